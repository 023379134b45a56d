"""Build the results report of one device from the JSON that the ssmdecode tools wrote.

    python benchmarks/make_report.py [benchmarks/results/NVIDIA_H200]

Writes <folder>/REPORT.md and replaces the part of README.md between the markers
`<!-- results:begin -->` and `<!-- results:end -->` with the same tables. No figure is typed by
hand: every number below comes from a bench, sweep, verify or e2e JSON in the folder, and every
table names the command, commit and date of the run that measured it, with the ceiling and the
upstream configs of that same run. The one exception is marked as such: the kernel sweeps are
also held against benchmarks/reference/measuring_h200.json, the upstream-kernel table of the
measuring notes (docs/measuring.md) copied as printed there (a target, not a result of ours).
"""

from __future__ import annotations

import argparse
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
    return (
        f"<sub>{env['device']}, torch {env['torch']}, Triton {env['triton']}, commit "
        f"{env['git_commit'][:7]}, {env['date_utc'][:16].replace('T', ' ')} UTC: "
        f"`{env['command'].split(' --out ')[0]}`</sub>"
    )


def table(headers: list[str], rows: list[list[object]]) -> str:
    def cell(v: object) -> str:
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def is_upstream_grid(row: dict) -> bool:
    """A config the upstream kernel can launch: its grid order, no cache hints."""
    return LaunchConfig.from_dict(row["launch_config"]).upstream_grid


GATHER_NOTE = (
    "The gather ceiling is the same in-place stream over each call's own slots of "
    "its pool, in the call's order, without math (ssmdecode.bench.ceiling): what the "
    "places of the slots allow. Where it is under the same-bytes ceiling, the slots "
    "cost that much whatever the kernel."
)


def bench_section(data: dict, title: str, bar: float | None) -> str:
    """Per batch: the same-bytes ceiling, the best upstream-grid config measured in the same
    run, the table's config, and the ratios."""
    by_batch: dict[int, list[dict]] = {}
    for row in data["rows"]:
        by_batch.setdefault(row["batch"], []).append(row)
    # ceiling columns that every row carries (--pdl runs; gather ceilings since run 25)
    has_pdl = all("pdl_ceiling_us" in r for r in data["rows"])
    has_gather = all("gather_ceiling_us" in r for r in data["rows"])
    rows = []
    for batch, measured in sorted(by_batch.items()):
        table_row = next(r for r in measured if r["config"] == "table")
        upstream = next(r for r in measured if r["config"] == "upstream")
        best = min((r for r in measured if is_upstream_grid(r)), key=lambda r: r["us"])
        pdl = (
            [table_row["pdl_ceiling_us"], f"{100 * table_row['fraction_of_pdl_ceiling']:.1f}%"]
            if has_pdl
            else []
        )
        gather = (
            [table_row["gather_ceiling_us"], f"{100 * table_row['fraction_of_gather_ceiling']:.1f}%"]
            if has_gather
            else []
        )
        rows.append(
            [
                batch,
                table_row["ceiling_us"],
                upstream["us"],
                f"{best['launch']} {best['us']:.2f}",
                f"{table_row['launch']} {table_row['us']:.2f}",
                table_row["tbps"],
                f"{100 * table_row['fraction_of_ceiling']:.1f}%",
                *gather,
                *pdl,
                f"{upstream['us'] / table_row['us']:.2f}x",
                f"{best['us'] / table_row['us']:.2f}x",
            ]
        )
    shape = data["shape"]
    pdl_headers = ["pdl ceiling us", "table % of pdl ceiling"] if has_pdl else []
    gather_headers = ["gather ceiling us", "table % of gather ceiling"] if has_gather else []
    text = [
        f"#### {title}: H{shape['nheads']} P{shape['headdim']} N{shape['dstate']} "
        f"G{shape['ngroups']}, {shape['state_dtype']} state, {shape['dtype']} inputs",
        "",
        table(
            [
                "batch",
                "ceiling us",
                "upstream default us",
                "best upstream-grid config, us",
                "table config, us",
                "table TB/s",
                "table % of ceiling",
                *gather_headers,
                *pdl_headers,
                "vs upstream",
                "vs best upstream-grid",
            ],
            rows,
        ),
        "",
    ]
    if bar is not None:
        text.append(
            f"Bar: {100 * bar:.0f}% of the same-bytes ceiling. Large-transfer peak of "
            f"the run: {data['peak']['tbps']:.2f} TB/s."
        )
    if gather_headers:
        text.append(GATHER_NOTE)
    text.append(provenance(data))
    return "\n".join(text)


def verify_section(folder: Path) -> str:
    rows = []
    first = None
    for path in sorted(folder.glob("verify*/verify.json")):
        data = load(path)
        grid = data["grid"]
        first = first or data
        rows.append(
            [
                f"P{grid['headdim']} N{grid['dstate']} {grid['state_dtype']} state",
                f"{data['points'] - data['failures']}/{data['points']}",
                grid.get("out_dtype") or grid["dtype"],
                data["environment"]["git_commit"][:7],
            ]
        )
    if not rows:
        return ""
    return "\n".join(
        [
            "#### Bit-identity of the shipped table with the upstream config (`ssmdecode verify`)",
            "",
            "Heads 8, 16, 32, 64, 128 x batch 1..64 then every 8 up to 1024 (the seed's 920 points);",
            "out and the whole state pool after one call, bit for bit.",
            "",
            table(["shape", "points identical", "out stored as", "commit"], rows),
            "",
            provenance(first),
        ]
    )


def e2e_section(folder: Path) -> str:
    parts = []
    for path in sorted(folder.glob("e2e-*/e2e.json")):
        data = load(path)
        # The SSU share is its profiled kernel time per step over the graphed step time. (Runs
        # before the fix in e2e.kernel_times also counted the profiler's step annotations as
        # kernel time, so their own ssu_share column is not used.)
        rows = [
            [
                r["batch"],
                f"{r['config']} {r['launch']}",
                r["step_us"],
                f"{r['tokens_per_s']:,.0f}",
                f"{r['vs_first']:.3f}x",
                r["ssu_us_per_step"],
                f"{100 * r['ssu_us_per_step'] / r['step_us']:.0f}%",
            ]
            for r in data["rows"]
        ]
        shape = data["shape"]
        variants = sorted({r["variant"] for r in data["rows"] if r.get("variant")})
        what = {
            "pdl": "+pdl rows: the SSU called with pdl=True",
            "order": "+order rows: slot_order(slots) once per step, passed to every layer's "
            "SSU as batch_order (the sort is part of the step)",
        }
        title = f"#### e2e: {shape['name']}, {data['layers']} Mamba2 layers, d_model {data['d_model']}"
        if variants:
            title += ", " + " and ".join(f"+{v}" for v in variants)
        title += f" (`{path.parent.name}/`)"
        parts += [
            title,
            "",
            "The config column names the launch config each row ran (the table "
            "of the day of the run, which may differ from the one shipped now)."
            + "".join(f" {what[v]}." for v in variants),
            "",
            table(
                [
                    "batch",
                    "config",
                    "step us",
                    "tokens/s",
                    "vs the batch's first row",
                    "SSU us per step (profiled)",
                    "SSU share of the step",
                ],
                rows,
            ),
            "",
            provenance(data),
            "",
        ]
    for path in sorted(folder.glob("e2e-*/e2e-greedy.json")):
        data = load(path)
        a, b = data["configs"]["a"], data["configs"]["b"]
        verdict = "identical" if data["identical"] else "DIFFERENT"
        parts += [
            f"#### Greedy decoding: {a['spec']} {a['launch']} vs {b['spec']} {b['launch']}",
            "",
            f"{data['tokens_compared']} token ids and log-probs compared: **{verdict}** "
            f"({data['result']['token_id_mismatches']} id and "
            f"{data['result']['logprob_mismatches']} log-prob mismatches; control run "
            f"{'identical' if data['control']['identical'] else 'DIFFERENT'}).",
            "",
            provenance(data),
            "",
        ]
    return "\n".join(parts)


def sweep_section(folder: Path) -> str:
    path = folder / "sweep" / "sweep.json"
    if not path.exists():
        return ""
    data = load(path)
    md = (folder / "sweep" / "sweep.md").read_text()
    body = md[md.index("| (BLOCK_M") :].strip()
    return "\n".join(
        ["#### Sweep of the upstream grid's (BLOCK_M, num_warps) configs", "", body, "", provenance(data)]
    )


# The kernels `ssmdecode sweep --kernel` can time, in the order the report shows them; each
# one's sweep is <folder>/sweep-<kernel>/ (benchmarks/run_gpu.sh sweep_upstream).
KERNEL_SOURCES = {
    "mamba_ssm": "state-spaces/mamba's `mamba_ssm/ops/triton/selective_state_update.py`",
    "sglang": "sgl-project/sglang's `python/sglang/srt/layers/attention/mamba/ops/mamba_ssm.py` "
    "(a runtime loop over T tokens, here T = 1)",
    "ssmdecode": "this repository's",
}
# The upstream-kernel table of the measuring notes (docs/measuring.md), copied by hand: a
# target, not a result of ours.
REFERENCE = ROOT / "benchmarks/reference/measuring_h200.json"
WITHIN = 0.05


def kernel_sweeps(folder: Path) -> dict[str, dict]:
    """Each kernel's sweep in the folder, by kernel name; missing ones are left out."""
    paths = {k: folder / f"sweep-{k}" / "sweep.json" for k in KERNEL_SOURCES}
    return {k: load(p) for k, p in paths.items() if p.exists()}


def sweep_cell(data: dict, label: str, batch: int) -> dict | None:
    """A sweep's result for one config label and batch, None where it did not run them."""
    config = next((c for c in data["configs"] if c["label"] == label), None)
    return config["batches"].get(str(batch)) if config else None


def seed_ratio(us: dict[str, float | None]) -> str:
    """(8,1)/(4,4): the seed's config over the upstream default, from microseconds by label."""
    fast, slow = us.get("(8,1)"), us.get("(4,4)")
    return "-" if fast is None or slow is None else f"{fast / slow:.3f}"


def kernels_section(folder: Path) -> str:
    """The same configs swept on each upstream kernel (`--kernel mamba_ssm`, `--kernel sglang`)
    and on ssmdecode's, in one run: what the harness gives for each kernel side by side."""
    sweeps = kernel_sweeps(folder)
    if len(sweeps) < 2:
        return ""
    first = next(iter(sweeps.values()))
    batches = [s["batch"] for s in first["summary"]]
    rows = []
    for c in first["configs"]:
        cells = []
        for b in batches:
            values = [sweep_cell(data, c["label"], b) for data in sweeps.values()]
            cells.append(
                " / ".join(
                    "-" if v is None else f"{v['us']:.2f}{'' if v['identical'] else ' ≠'}" for v in values
                )
            )
        rows.append([c["label"], *cells])
    names = " / ".join(sweeps)
    text = [
        "#### The upstream kernels and ssmdecode's through the same harness, same run",
        "",
        "`ssmdecode sweep --kernel <name>` times a kernel with each config. The upstream "
        "kernels were carried to the GPU for the run and are not part of this repository: "
        + "; ".join(f"{k}: {KERNEL_SOURCES[k]}" for k in sweeps if k != "ssmdecode")
        + ". Each "
        f"cell is {names}, microseconds; ≠ where the config's bits differ from that "
        "kernel's (4,4).",
        "",
        table(["config", *[f"batch {b}: {names}" for b in batches]], rows),
        "",
    ]
    clocks = {k: d["environment"].get("clocks") for k, d in sweeps.items()}
    if all(clocks.values()):
        text.append(
            "Clocks at the end of each sweep: "
            + "; ".join(
                f"{k} SM {c['sm_mhz']} MHz (max {c['max_sm_mhz']}), memory {c['mem_mhz']} MHz, "
                f"{c['temperature_c']} C"
                for k, c in clocks.items()
            )
            + "."
        )
    for data in sweeps.values():
        text += ["", provenance(data)]
    return "\n".join(text)


def measuring_section(folder: Path) -> str:
    """Each kernel's sweep against the measuring notes' upstream-kernel table: per config
    and batch the measured/reference ratio, and the (8,1)/(4,4) ratio at batch 512."""
    if not REFERENCE.exists():
        return ""
    ref = load(REFERENCE)
    sweeps = {
        k: d
        for k, d in kernel_sweeps(folder).items()
        if d["shape"] == ref["shape"] and ref["device"] == d["environment"]["device"]
    }
    if ref["device_key"] != folder.name or not sweeps:
        return ""
    batches = ref["batches"]
    within = {k: [0, 0] for k in sweeps}  # cells within WITHIN of the reference, cells compared
    rows = []
    for c in ref["configs"]:
        cells = []
        for k, data in sweeps.items():
            ratios = []
            for b in batches:
                cell = sweep_cell(data, c["label"], b)
                if cell is None:
                    ratios.append("-")
                    continue
                ratio = cell["us"] / c["us"][str(b)]
                ok = abs(ratio - 1) <= WITHIN
                within[k][0] += ok
                within[k][1] += 1
                ratios.append(f"{ratio:.3f}{'' if ok else ' ✗'}")
            cells.append(" / ".join(ratios))
        rows.append(
            [
                f"{c['label']} {c['note']}".strip(),
                " / ".join(f"{c['us'][str(b)]:.2f}" for b in batches),
                *cells,
            ]
        )
    rows.append(
        [f"**within {100 * WITHIN:.0f}%**", "", *[f"**{n}/{total}**" for n, total in within.values()]]
    )
    measured = [
        {label: cell["us"] for label in ("(8,1)", "(4,4)") if (cell := sweep_cell(data, label, 512))}
        for data in sweeps.values()
    ]
    rows.append(
        [
            "(8,1)/(4,4) at batch 512",
            seed_ratio({c["label"]: c["us"]["512"] for c in ref["configs"]}),
            *map(seed_ratio, measured),
        ]
    )
    bs = " / ".join(map(str, batches))
    whole = [k for k, (n, total) in within.items() if n == total]
    verdict = (
        f"Every cell within {100 * WITHIN:.0f}% of MEASURING.md: {', '.join(whole)}."
        if whole
        else f"No kernel has every cell within {100 * WITHIN:.0f}% of MEASURING.md."
    )
    return "\n".join(
        [
            "#### The sweeps above against MEASURING.md's upstream-kernel table",
            "",
            f'`{REFERENCE.relative_to(ROOT)}` holds the table "{ref["section"]}" of '
            f"`{ref['source']}` (torch {ref['torch']}, Triton {ref['triton']}) as printed there: a "
            "target measured outside this repository, not a result of ours. Each kernel's cells are "
            f"its microseconds over the reference's at batch {bs}; ✗ where they differ by more than "
            f"{100 * WITHIN:.0f}%.",
            "",
            table(["config", f"MEASURING.md us, batch {bs}", *[f"{k} / MEASURING.md" for k in sweeps]], rows),
            "",
            verdict,
        ]
    )


PDL_NOTE = (
    "With pdl=True each call of the timed graph may start under the previous call's tail, so "
    "it is held against the pdl ceiling: the same stream launched the same way, in the same "
    "run (the plain ceiling's calls do not overlap, and beating it means nothing). Every "
    "config in this table, upstream's included, is ssmdecode's kernel called with pdl=True."
)


def slot_order_note(data: dict) -> str:
    """What the slot-ordered rows are, and how much of the pool each batch's call fills (one
    of the rotation's K disjoint slot sets: 1/K), read off the rows."""
    fill = {r["batch"]: r["timing"]["rotation"] for r in data["rows"] if r["config"] == "table"}
    full = [b for b, k in sorted(fill.items()) if k == 1]
    parts = [f"1/{k} at {b}" for b, k in sorted(fill.items()) if 1 < k <= 3]
    return (
        "Every config, upstream's included, is ssmdecode's kernel called with batch_order = "
        "slot_order(that call's slots), computed before timing as an engine computes it once "
        "per decode step for all layers; the rows' bits do not depend on the order. A call's "
        f"slots fill the whole pool at batch {', '.join(map(str, full)) or 'none'}, "
        f"{', '.join(parts) or 'less elsewhere'}, less below."
    )


def build(folder: Path, links_from: Path) -> str:
    """The report of a results folder; image links relative to the folder links_from."""
    parts = [f"### Measured on {folder.name}", ""]
    headline = folder / "bench" / "bench.json"
    if headline.exists():
        parts += [bench_section(load(headline), "Headline (Nemotron-3-Super, TP8 rank)", 0.97), ""]
    for path in sorted(folder.glob("bench-?*/bench.json")):
        data = load(path)
        if data["method"].get("pdl"):  # the headline, every config called with pdl=True
            parts += [bench_section(data, "Headline, calls with pdl=True", None), PDL_NOTE, ""]
            continue
        if data["method"].get("slot_order"):  # the headline, rows taken in slot order
            parts += [
                bench_section(data, "Headline, calls with batch_order=slot_order(slots)", 0.97),
                slot_order_note(data),
                "",
            ]
            continue
        flags = data["environment"]["command"].split(" --tp 8 ")[-1].split(" --batch")[0]
        parts += [bench_section(data, f"Headline with {flags}", 0.90), ""]
    parts += [
        verify_section(folder),
        "",
        sweep_section(folder),
        "",
        kernels_section(folder),
        "",
        measuring_section(folder),
        "",
        e2e_section(folder),
    ]
    plots = [p.relative_to(links_from) for p in sorted(folder.glob("*/*.png"))]
    if plots:
        parts += ["#### Plots", ""] + [f"![{p.parent.name}]({p})" for p in plots]
    return "\n".join(parts).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "folder",
        nargs="?",
        type=Path,
        default=ROOT / "benchmarks/results/NVIDIA_H200",
        help="a device's results folder (default: %(default)s)",
    )
    folder = parser.parse_args().folder.resolve()
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
