"""Build the results report of one device from the JSON that the ssmdecode tools wrote.

    python benchmarks/make_report.py [benchmarks/results/NVIDIA_H200]

Writes <folder>/REPORT.md and replaces the part of README.md between the markers
`<!-- results:begin -->` and `<!-- results:end -->` with the same tables. No figure is typed by
hand: every number below comes from a bench, sweep, verify or e2e JSON in the folder, and every
table names the command, commit and date of the run that measured it, with the ceiling and the
upstream configs of that same run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ssmdecode.config import LaunchConfig

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def provenance(data: dict) -> str:
    env = data["environment"]
    return (f"<sub>{env['device']}, torch {env['torch']}, Triton {env['triton']}, commit "
            f"{env['git_commit']}, {env['date_utc'][:16].replace('T', ' ')} UTC: "
            f"`{env['command'].split(' --out ')[0]}`</sub>")


def table(headers: list[str], rows: list[list[object]]) -> str:
    def cell(v: object) -> str:
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def is_upstream_grid(row: dict) -> bool:
    """A config the upstream kernel can launch: its grid order, no cache hints."""
    return LaunchConfig.from_dict(row["launch_config"]).upstream_grid


def bench_section(data: dict, title: str, bar: float | None) -> str:
    """Per batch: the same-bytes ceiling, the best upstream-grid config measured in the same
    run, the table's config, and the ratios."""
    by_batch: dict[int, list[dict]] = {}
    for row in data["rows"]:
        by_batch.setdefault(row["batch"], []).append(row)
    rows = []
    for batch, measured in sorted(by_batch.items()):
        table_row = next(r for r in measured if r["config"] == "table")
        upstream = next(r for r in measured if r["config"] == "upstream")
        best = min((r for r in measured if is_upstream_grid(r)), key=lambda r: r["us"])
        rows.append([
            batch, table_row["ceiling_us"], upstream["us"], f"{best['launch']} {best['us']:.2f}",
            f"{table_row['launch']} {table_row['us']:.2f}", table_row["tbps"],
            f"{100 * table_row['fraction_of_ceiling']:.1f}%",
            f"{upstream['us'] / table_row['us']:.2f}x", f"{best['us'] / table_row['us']:.2f}x",
        ])
    shape = data["shape"]
    text = [f"#### {title}: H{shape['nheads']} P{shape['headdim']} N{shape['dstate']} "
            f"G{shape['ngroups']}, {shape['state_dtype']} state, {shape['dtype']} inputs", "",
            table(["batch", "ceiling us", "upstream default us", "best upstream-grid config, us",
                   "table config, us", "table TB/s", "table % of ceiling", "vs upstream",
                   "vs best upstream-grid"], rows), ""]
    if bar is not None:
        text.append(f"Bar: {100 * bar:.0f}% of the same-bytes ceiling. Large-transfer peak of "
                    f"the run: {data['peak']['tbps']:.2f} TB/s.")
    text.append(provenance(data))
    return "\n".join(text)


def verify_section(folder: Path) -> str:
    rows = []
    first = None
    for path in sorted(folder.glob("verify*/verify.json")):
        data = load(path)
        grid = data["grid"]
        first = first or data
        rows.append([f"P{grid['headdim']} N{grid['dstate']} {grid['state_dtype']} state",
                     f"{data['points'] - data['failures']}/{data['points']}",
                     grid.get("out_dtype") or grid["dtype"], data["environment"]["git_commit"]])
    if not rows:
        return ""
    return "\n".join([
        "#### Bit-identity of the shipped table with the upstream config (`ssmdecode verify`)", "",
        "Heads 8, 16, 32, 64, 128 x batch 1..64 then every 8 up to 1024 (the seed's 920 points);",
        "out and the whole state pool after one call, bit for bit.", "",
        table(["shape", "points identical", "out stored as", "commit"], rows), "",
        provenance(first)])


def e2e_section(folder: Path) -> str:
    parts = []
    for path in sorted(folder.glob("e2e-*/e2e.json")):
        data = load(path)
        # The SSU share is its profiled kernel time per step over the graphed step time. (Runs
        # before the fix in e2e.kernel_times also counted the profiler's step annotations as
        # kernel time, so their own ssu_share column is not used.)
        rows = [[r["batch"], f"{r['config']} {r['launch']}", r["step_us"], f"{r['tokens_per_s']:,.0f}",
                 f"{r['vs_first']:.3f}x", r["ssu_us_per_step"],
                 f"{100 * r['ssu_us_per_step'] / r['step_us']:.0f}%"] for r in data["rows"]]
        shape = data["shape"]
        parts += [f"#### e2e: {shape['name']}, {data['layers']} Mamba2 layers, d_model {data['d_model']}",
                  "", "The config column names the launch config each row ran (the table of the "
                  "day of the run, which may differ from the one shipped now).", "",
                  table(["batch", "config", "step us", "tokens/s", "vs upstream",
                         "SSU us per step (profiled)", "SSU share of the step"], rows), "",
                  provenance(data), ""]
    for path in sorted(folder.glob("e2e-*/e2e-greedy.json")):
        data = load(path)
        a, b = data["configs"]["a"], data["configs"]["b"]
        verdict = "identical" if data["identical"] else "DIFFERENT"
        parts += [f"#### Greedy decoding: {a['spec']} {a['launch']} vs {b['spec']} {b['launch']}", "",
                  f"{data['tokens_compared']} token ids and log-probs compared: **{verdict}** "
                  f"({data['result']['token_id_mismatches']} id and "
                  f"{data['result']['logprob_mismatches']} log-prob mismatches; control run "
                  f"{'identical' if data['control']['identical'] else 'DIFFERENT'}).", "",
                  provenance(data), ""]
    return "\n".join(parts)


def sweep_section(folder: Path) -> str:
    path = folder / "sweep" / "sweep.json"
    if not path.exists():
        return ""
    data = load(path)
    md = (folder / "sweep" / "sweep.md").read_text()
    body = md[md.index("| (BLOCK_M"):].strip()
    return "\n".join(["#### Sweep of the upstream grid's (BLOCK_M, num_warps) configs", "",
                      body, "", provenance(data)])


def kernels_section(folder: Path) -> str:
    """The same configs swept on the upstream kernel (`--kernel mamba_ssm`) and on ssmdecode's,
    in one run: what the harness gives for each kernel side by side."""
    paths = [folder / "sweep-mamba_ssm" / "sweep.json", folder / "sweep-ssmdecode" / "sweep.json"]
    if not all(p.exists() for p in paths):
        return ""
    upstream, ours = (load(p) for p in paths)
    batches = [s["batch"] for s in upstream["summary"]]
    ours_by = {c["label"]: c for c in ours["configs"]}
    rows = []
    for c in upstream["configs"]:
        o = ours_by[c["label"]]
        cells = []
        for b in map(str, batches):
            mark = "" if c["batches"][b]["identical"] else " ≠"
            cells.append(f"{c['batches'][b]['us']:.2f}{mark} / {o['batches'][b]['us']:.2f}")
        rows.append([c["label"], *cells])
    clocks = upstream["environment"].get("clocks") or {}
    ratio = {k: (next(c for c in d["configs"] if c["label"] == "(8,1)")["batches"]["512"]["us"]
                 / next(c for c in d["configs"] if c["label"] == "(4,4)")["batches"]["512"]["us"])
             for k, d in (("upstream", upstream), ("ours", ours)) if "512" in d["configs"][0]["batches"]}
    text = ["#### The upstream kernel and ssmdecode's through the same harness, same run", "",
            "`ssmdecode sweep --kernel mamba_ssm` times the published mamba_ssm Triton kernel "
            "(carried to the GPU for the run, not part of this repository) with each config; "
            "each cell is upstream kernel / ssmdecode, microseconds, ≠ where the config's bits "
            "differ from that kernel's (4,4).", "",
            table(["config", *[f"batch {b}" for b in batches]], rows), ""]
    if ratio:
        text.append(f"(8,1)/(4,4) at batch 512: {ratio.get('upstream', 0):.2f} on the upstream "
                    f"kernel, {ratio.get('ours', 0):.2f} on ssmdecode's.")
    if clocks:
        text.append(f"Clocks at the end of the upstream sweep: SM {clocks['sm_mhz']} MHz (max "
                    f"{clocks['max_sm_mhz']}), memory {clocks['mem_mhz']} MHz, "
                    f"{clocks['temperature_c']} C.")
    text += ["", provenance(upstream)]
    return "\n".join(text)


def build(folder: Path, links_from: Path) -> str:
    """The report of a results folder; image links relative to the folder links_from."""
    parts = [f"### Measured on {folder.name}", ""]
    headline = folder / "bench" / "bench.json"
    if headline.exists():
        parts += [bench_section(load(headline), "Headline (Nemotron-3-Super, TP8 rank)", 0.97), ""]
    for path in sorted(folder.glob("bench-?*/bench.json")):
        data = load(path)
        flags = data["environment"]["command"].split(" --tp 8 ")[-1].split(" --batch")[0]
        parts += [bench_section(data, f"Headline with {flags}", 0.90), ""]
    parts += [verify_section(folder), "", sweep_section(folder), "", kernels_section(folder), "",
              e2e_section(folder)]
    plots = [p.relative_to(links_from) for p in sorted(folder.glob("*/*.png"))]
    if plots:
        parts += ["#### Plots", ""] + [f"![{p.parent.name}]({p})" for p in plots]
    return "\n".join(parts).rstrip() + "\n"


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "benchmarks/results/NVIDIA_H200"
    folder = folder.resolve()
    (folder / "REPORT.md").write_text(build(folder, folder))
    readme = ROOT / "README.md"
    text = readme.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        readme.write_text(head + BEGIN + "\n" + build(folder, ROOT) + END + rest.split(END, 1)[1])
    print(f"wrote {folder / 'REPORT.md'} and the results section of README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
