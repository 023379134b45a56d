"""The stochastic store's variants of an exploration run, side by side, from its bench JSON.

    python benchmarks/sr_variants.py benchmarks/results/NVIDIA_H200/explorations/run81 [--base old]
    python benchmarks/sr_variants.py --benches benchmarks/results/NVIDIA_H200/bench-sr-float16-r4 ...

An exploration folder holds one `<variant>-<dtype>/bench.json` for each variant and state dtype
(`ssmdecode bench --rounding nearest stochastic`, round-to-nearest and the stochastic store timed
in the same call). Prints a markdown table a (variant, dtype, batch): the stochastic store's
time, its cost over round-to-nearest of the same call, its time over the --base variant's
stochastic store of the same run, and its fractions of the flat and the gather ceiling of its
call. Only the `table` config is shown (--config picks another).

With --benches BENCH..., instead the stochastic store of several bench runs side by side (each a
folder of `ssmdecode bench --rounding nearest stochastic`, such as bench_sr's on different
machines): a row a (run, dtype, batch) with the run's commit and date, the config the table
named for each rounding, both times, the stochastic store's cost and its fractions of the
flat and the gather ceiling beside round-to-nearest's of the flat one.

With --clocks, instead the `nvidia-smi` samples the folder holds (`smi-<variant>.csv`, or
`<variant>-<dtype>-<rounding>.csv`; with or without the header line): for each file, over its
busy samples (drawing more than 300 W), the SM clock (median, lowest) and power, and the share
of samples whose throttle reasons include the software power cap (0x4).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _rows(path: Path) -> dict[tuple[str, int], dict]:
    return {(r["config"], r["batch"]): r for r in json.loads(path.read_text())["rows"]}


def table(folder: Path, base: str, config: str | list[str]) -> list[str]:
    """The markdown lines of the folder's table (see the module docstring); several configs
    give a config column and their rows one after the other."""
    if not isinstance(config, str):
        if len(config) == 1:
            return table(folder, base, config[0])
        lines = []
        for c in config:
            part = table(folder, base, c)
            if not lines:
                lines = ["| config " + part[0], "|---" + part[1]]
            lines += [f"| {c} " + line for line in part[2:]]
        return lines
    runs: dict[tuple[str, str], dict] = {}
    for path in sorted(folder.glob("*-*/bench.json")):
        variant, dtype = path.parent.name.rsplit("-", 1)
        runs[(variant, dtype)] = _rows(path)
    if not runs:
        raise SystemExit(f"sr_variants: no <variant>-<dtype>/bench.json under {folder}")
    head = ["variant", "state", "batch", "SR us", "SR over RTN", f"SR over {base}'s"]
    head += ["% of flat ceiling", "% of gather ceiling"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    order = sorted(runs, key=lambda k: (k[1], k[0] != base, k[0]))
    for variant, dtype in order:
        rows = runs[(variant, dtype)]
        ref = runs.get((base, dtype))
        for batch in sorted({b for c, b in rows if c == f"{config} sr"}):
            sr, rtn = rows[(f"{config} sr", batch)], rows[(config, batch)]
            over_base = "-"
            if ref is not None and (f"{config} sr", batch) in ref:
                over_base = f"{(sr['us'] / ref[(f'{config} sr', batch)]['us'] - 1) * 100:+.1f}%"
            cells = [variant, dtype, str(batch), f"{sr['us']:.2f}"]
            cells += [f"{(sr['us'] / rtn['us'] - 1) * 100:+.1f}%", over_base]
            cells += [f"{sr[k] * 100:.1f}" for k in ("fraction_of_ceiling", "fraction_of_gather_ceiling")]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def benches(folders: list[Path], config: str) -> list[str]:
    """The markdown lines of the bench runs' table (see the module docstring, --benches)."""
    head = ["run", "state", "batch", "RTN config", "SR config", "RTN us", "SR us", "SR over RTN"]
    head += ["RTN % of flat ceiling", "SR % of flat ceiling", "SR % of gather ceiling"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for folder in folders:
        path = folder / "bench.json"
        if not path.is_file():
            raise SystemExit(f"sr_variants: no bench.json in {folder}")
        data = json.loads(path.read_text())
        env, rows = data["environment"], _rows(path)
        run = f"{env['git_commit']} {env['date_utc'][:16]}"
        for batch in sorted({b for c, b in rows if c == f"{config} sr"}):
            sr, rtn = rows[(f"{config} sr", batch)], rows[(config, batch)]
            cells = [run, data["shape"]["state_dtype"], str(batch), rtn["launch"], sr["launch"]]
            cells += [f"{rtn['us']:.2f}", f"{sr['us']:.2f}", f"{(sr['us'] / rtn['us'] - 1) * 100:+.1f}%"]
            cells += [f"{rtn['fraction_of_ceiling'] * 100:.1f}", f"{sr['fraction_of_ceiling'] * 100:.1f}"]
            cells.append(f"{sr['fraction_of_gather_ceiling'] * 100:.1f}")
            lines.append("| " + " | ".join(cells) + " |")
    return lines


_POWER_CAP = 0x4  # nvidia-smi's clocks_event_reasons: SW power cap
_BUSY_W = 300.0


def clocks(folder: Path) -> list[str]:
    """The markdown lines of the folder's clock and power table (see the module docstring)."""
    lines = [
        "| samples of | busy samples | SM MHz median | SM MHz lowest | W median | W highest | power-capped |",
        "|---|---|---|---|---|---|---|",
    ]
    files = sorted(folder.glob("*.csv"))
    for path in files:
        busy = []
        for line in path.read_text().splitlines():
            cells = [c.strip() for c in line.split(",")]
            if not cells[0][:1].isdigit():
                continue  # the header
            mhz = int(cells[1].split()[0])
            watts = next(float(c.split()[0]) for c in cells[2:] if c.endswith(" W"))
            if watts > _BUSY_W:
                busy.append((mhz, watts, int(cells[-1], 16) & _POWER_CAP != 0))
        if not busy:
            continue
        mhz, watts = sorted(b[0] for b in busy), sorted(b[1] for b in busy)
        capped = sum(b[2] for b in busy) / len(busy)
        lines.append(
            f"| {path.stem} | {len(busy)} | {mhz[len(mhz) // 2]} | {mhz[0]} | {watts[len(watts) // 2]:.0f} | "
            f"{watts[-1]:.0f} | {capped * 100:.0f}% |"
        )
    if len(lines) == 2:
        raise SystemExit(f"sr_variants: no nvidia-smi samples over {_BUSY_W:.0f} W under {folder}")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, nargs="?", help="an exploration folder (not with --benches)")
    p.add_argument("--benches", type=Path, nargs="+", help="bench folders, side by side instead")
    p.add_argument("--base", default="old", help="the variant the others are held against (default old)")
    p.add_argument("--config", nargs="+", default=["table"], help="the bench configs shown (default table)")
    p.add_argument("--clocks", action="store_true", help="the nvidia-smi samples' table instead")
    args = p.parse_args()
    if args.benches:
        print("\n".join(line for c in args.config for line in benches(args.benches, c)))
        return 0
    if args.folder is None:
        p.error("give an exploration folder, or --benches")
    print("\n".join(clocks(args.folder) if args.clocks else table(args.folder, args.base, args.config)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
