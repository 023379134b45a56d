"""Build the results report of one device from the JSON that the ssmdecode tools wrote.

    python benchmarks/make_report.py [benchmarks/results/NVIDIA_H200]

Writes three things, all from the JSON in the folder:

- <folder>/REPORT.md: every measured table (benches, verify, sweeps, model steps), the summary
  first;
- <folder>/summary.png: one figure of what ssmdecode gains over the baseline of each run, with
  what the ceiling of that run would gain beside it (the decode call, the verify calls of
  speculative decoding at T = 4, and the model steps of both);
- the part of README.md between the markers `<!-- results:begin -->` and
  `<!-- results:end -->`: a short table of the summary's gains, that figure and where each
  figure came from (the summary's full table and sentences are REPORT.md's).

No figure is typed by hand: every number comes from a bench, sweep, verify or e2e JSON in the
folder, and every table names the command, commit and date of the run that measured it, with
the ceiling and the upstream configs of that same run. The one exception is marked as such: the
kernel sweeps are also held against benchmarks/reference/measuring_h200.json, the
upstream-kernel table of docs/measuring.md copied as printed there (a target, not a result of
ours).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ssmdecode.config import LaunchConfig, TableError, load_table, nearest_bucket, table_key
from ssmdecode.ops.selective_state_update.checks import DEFAULT_PHILOX_ROUNDS

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


def bench_section(data: dict, title: str, bar: float | None, note: str = "") -> str:
    """Per batch: the same-bytes ceiling, the best upstream-grid config measured in the same
    run, the table's config, and the ratios; note (what the table rows ran) before the
    provenance line."""
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
    if note:
        text.append(note)
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


def is_rounding(data: dict) -> bool:
    """A bench of one state stored both ways (`bench --rounding nearest stochastic`)."""
    return "stochastic" in (data["method"].get("rounding") or [])


# Issue 18's speed bar: stochastic rounding at most this much slower than round-to-nearest at
# these batches (the same config, the same run)
ROUNDING_BAR, ROUNDING_BAR_FROM = 0.05, 64


def rounding_section(folder: Path) -> str:
    """Each 16-bit state dtype: the time of each config stored rounded to nearest and
    stochastically, per Philox rounds and batch, from the bench-sr-* folders (one run each)."""
    runs: dict[str, list[dict]] = {}
    for path in sorted(folder.glob("bench-?*/bench.json")):
        data = load(path)
        if is_rounding(data):
            runs.setdefault(data["shape"]["state_dtype"], []).append(data)
    if not runs:
        return ""
    parts = [
        "#### Stochastic rounding of 16-bit states (`ssmdecode bench --rounding nearest stochastic`)",
        "",
        "Each config stored rounded to nearest and stochastically in one run; cost = stochastic's "
        f"time over nearest's, minus 1. Bar: at most {ROUNDING_BAR:.0%} at bs >= {ROUNDING_BAR_FROM}. "
        "The ceiling is the flat stream of the call's bytes; the gather ceiling the same stream "
        "over the call's own slots (docs/performance.md).",
    ]
    for dtype, datas in sorted(runs.items()):
        rows, worst = [], {}
        for data in sorted(datas, key=lambda d: -d["method"]["philox_rounds"]):
            rounds = data["method"]["philox_rounds"]
            by = {(r["config"].removesuffix(" sr"), r["rounding"], r["batch"]): r for r in data["rows"]}
            for (config, rounding, batch), near in sorted(by.items()):
                sr = by.get((config, "stochastic", batch))
                if rounding != "nearest" or sr is None:
                    continue
                cost = sr["us"] / near["us"] - 1
                if batch >= ROUNDING_BAR_FROM:
                    worst[(config, rounds)] = max(worst.get((config, rounds), -1.0), cost)
                rows.append(
                    [
                        rounds,
                        config,
                        near["launch"],
                        batch,
                        near["us"],
                        sr["us"],
                        f"{100 * cost:+.1f}",
                        f"{100 * near['fraction_of_ceiling']:.1f}",
                        f"{100 * sr['fraction_of_ceiling']:.1f}",
                        f"{100 * sr['fraction_of_gather_ceiling']:.1f}",
                    ]
                )
        held = [
            f"{c} at {r} rounds: {100 * w:+.1f}%"
            for (c, r), w in sorted(worst.items(), key=lambda i: -i[0][1])
        ]
        parts += [
            "",
            f"{dtype} state, the worst cost at bs >= {ROUNDING_BAR_FROM}: " + "; ".join(held),
            "",
            table(
                [
                    "Philox rounds",
                    "config",
                    "launch",
                    "batch",
                    "nearest us",
                    "stochastic us",
                    "cost %",
                    "nearest % of ceiling",
                    "stochastic % of ceiling",
                    "stochastic % of gather ceiling",
                ],
                rows,
            ),
            "",
            "<sub>"
            + "; ".join(provenance(d).removeprefix("<sub>").removesuffix("</sub>") for d in datas)
            + "</sub>",
        ]
    return "\n".join(parts)


def accuracy_section(folder: Path) -> str:
    """`ssmdecode accuracy`'s tables (their own markdown) and provenance, one per accuracy*
    folder (other Philox rounds, other decays)."""
    parts = []
    for path in sorted(folder.glob("accuracy*/accuracy.json")):
        data = load(path)
        md = (path.parent / "accuracy.md").read_text()
        body = md[md.index("Shape:") :].split("\nwrote ")[0].strip()
        parts += [
            f"#### Accuracy of 16-bit states over a long decode (`ssmdecode accuracy`, {path.parent.name}/)",
            "",
            body,
            "",
            provenance(data),
            "",
        ]
    return "\n".join(parts).rstrip()


def e2e_section(folder: Path) -> str:
    parts = []
    for path in sorted(folder.glob("e2e-*/e2e.json")):
        data = load(path)
        if is_spec(data):  # verify steps: spec_e2e_section
            continue
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
            table_rows_note(folder, data),
            "",
            provenance(data),
            "",
        ]
    for path in sorted(folder.glob("e2e-*/e2e-greedy.json")):
        data = load(path)
        if "configs" not in data:  # e2e --spec --greedy: spec_e2e_section
            continue
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
    source = ref["source"]
    whole = [k for k, (n, total) in within.items() if n == total]
    verdict = (
        f"Every cell within {100 * WITHIN:.0f}% of {source}: {', '.join(whole)}."
        if whole
        else f"No kernel has every cell within {100 * WITHIN:.0f}% of {source}."
    )
    return "\n".join(
        [
            f"#### The sweeps above against {source}'s upstream-kernel table",
            "",
            f'`{REFERENCE.relative_to(ROOT)}` holds the table "{ref["section"]}" of '
            f"`{source}` (torch {ref['torch']}, Triton {ref['triton']}) as printed there: a "
            "target measured outside this repository, not a result of ours. Each kernel's cells are "
            f"its microseconds over the reference's at batch {bs}; ✗ where they differ by more than "
            f"{100 * WITHIN:.0f}%.",
            "",
            table(["config", f"{source} us, batch {bs}", *[f"{k} / {source}" for k in sweeps]], rows),
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


def is_spec(data: dict) -> bool:
    """A run of speculative decoding's verify calls (bench --tokens) or steps (e2e --spec)."""
    return any("tokens" in r for r in data["rows"])


def row_mode(row: dict) -> tuple[str, int]:
    """The table key's mode and token count a row's call looked up: bench rows name a mode,
    e2e --spec rows a path (buffer or replay); single-token rows neither."""
    mode = row.get("mode") or row.get("path") or "single"
    return mode, row["tokens"] if mode != "single" else 0


def shipped_config(folder: Path, shape: dict, batch: int, mode: str, tokens: int) -> str | None:
    """The label of the config the shipped table of the folder's device picks today for a
    call, None where the table holds no entry for it."""
    try:
        table = load_table(folder.name)
    except TableError:
        return None
    key = table_key(shape["headdim"], shape["dstate"], shape["state_dtype"], mode, tokens)
    buckets = (table or {}).get(key)
    return buckets[nearest_bucket(list(buckets), batch)].label if buckets else None


def table_rows_note(folder: Path, data: dict) -> str:
    """Whether a run's "table" rows ran the configs the shipped table picks today: a run made
    before entries were re-tuned measured other configs under the same name."""
    ran = sorted(
        {(r["batch"], *row_mode(r), r["launch"]) for r in data["rows"] if r.get("config") == "table"}
    )
    differ = []
    for batch, mode, tokens, launch in ran:
        now = shipped_config(folder, data["shape"], batch, mode, tokens)
        if now is not None and now != launch:
            where = f"batch {batch}" + ("" if mode == "single" else f", {mode} T = {tokens}")
            differ.append(f"{where}: {launch} then, {now} now")
    if not ran:
        return ""
    if not differ:
        return "Its table rows ran the configs the shipped table picks today."
    return (
        "Its table rows ran the table of the day of the run, not the shipped one, at "
        + "; ".join(differ)
        + "."
    )


# Known limits of one run, shown beside its figures while the folder holds that run (keyed by
# folder and commit); a later run of the same folder drops the note.
RUN_NOTES = {
    ("e2e-spec", "7646a04"): (
        "In this run the intermediate-state path's copy of the accepted state took two more "
        "passes over the states than it needs (a torch.where over the gathered states); "
        "5a9b5a8 makes it one gather and one scatter a layer, not measured yet "
        "(docs/performance.md)."
    ),
}


def run_note(path: Path, data: dict) -> str:
    return RUN_NOTES.get((path.parent.name, data["environment"]["git_commit"][:7]), "")


SPEC_MODES = {
    "buffer": "sglang's way: every draft's state into the intermediate-state buffer, with "
    "disable_state_update; ceiling: the 1 → T stream over the call's slots and buffer rows",
    "dst": "vLLM's way: every draft's state to its own slot, the initial state read at the slot "
    "of the last accepted token (num_accepted_tokens, cu_seqlens); ceiling: the 1 → T stream "
    "over the call's slots",
    "replay": "selective_state_replay in steady state (accepted counts uniform in 1..T, "
    "replay_advance a step); ceiling: replay's floor, the read-only stream plus the flushing "
    "fraction of the read-write stream's write part plus the rings' bytes",
}


def spec_bench_section(folder: Path, data: dict, name: str) -> str:
    """Verify calls (bench --tokens --mode) of the results folder `name`: per mode, T and
    batch, the call's ceiling, the upstream config, the fastest upstream-grid config and the
    table's, all of one run."""
    shape = data["shape"]
    window = data["method"].get("window")
    parts = []
    for mode in [m for m in SPEC_MODES if any(r["mode"] == m for r in data["rows"])]:
        cells: dict[tuple[int, int], dict[str, dict]] = {}
        for r in data["rows"]:
            if r["mode"] == mode:
                cells.setdefault((r["tokens"], r["batch"]), {})[r["config"]] = r
        rows = []
        for (tokens, batch), by_config in sorted(cells.items()):
            up, tab = by_config["upstream"], by_config["table"]
            best = min((r for r in by_config.values() if r["upstream_grid"]), key=lambda r: r["us"])
            flush = tab.get("flush_fraction")
            rows.append(
                [
                    tokens,
                    batch,
                    tab["ceiling_us"],
                    up["us"],
                    f"{best['launch']} {best['us']:.2f}",
                    f"{tab['launch']} {tab['us']:.2f}",
                    f"{100 * tab['fraction_of_ceiling']:.1f}%",
                    f"{up['us'] / tab['us']:.2f}x",
                    f"{best['us'] / tab['us']:.2f}x",
                    "-" if flush is None else f"{100 * flush:.0f}%",
                    "-" if tab.get("advance_us") is None else f"{tab['advance_us']:.2f}",
                ]
            )
        what = SPEC_MODES[mode] + (f"; window {window}" if mode == "replay" and window else "")
        parts += [
            f"#### Verify calls, mode {mode}: H{shape['nheads']} P{shape['headdim']} "
            f"N{shape['dstate']} G{shape['ngroups']}, {shape['state_dtype']} state, "
            f"{shape['dtype']} inputs ({name}/)",
            "",
            f"T draft tokens a request; {what}.",
            "",
            table(
                [
                    "T",
                    "batch",
                    "ceiling us",
                    "upstream (4,4) us",
                    "best upstream-grid config, us",
                    "table config, us",
                    "table % of ceiling",
                    "vs upstream",
                    "vs best upstream-grid",
                    "flushing",
                    "of which bookkeeping, us",
                ],
                rows,
            ),
            "",
        ]
    parts += [table_rows_note(folder, data), "", provenance(data)]
    return "\n".join(parts)


def spec_e2e_section(folder: Path) -> str:
    """Verify steps of the layer stack (e2e --spec): each way's step time, tokens/s and the SSM
    kernels' share, against way (a) of the same run."""
    parts = []
    for path in sorted(folder.glob("e2e-*/e2e.json")):
        data = load(path)
        if not is_spec(data):
            continue
        tokens = data["rows"][0]["tokens"]
        rows = [
            [
                r["batch"],
                r["way"],
                r["launch"],
                r["step_us"],
                f"{r['mean_accepted']:.2f}",
                f"{r['tokens_per_s']:,.0f}",
                f"{r['vs_a']:.2f}x",
                r["ssm_us_per_step"],
                f"{100 * r['ssm_us_per_step'] / r['step_us']:.0f}%",
            ]
            for r in data["rows"]
        ]
        shape = data["shape"]
        parts += [
            f"#### Verify steps, T = {tokens}: {shape['name']}, {data['layers']} Mamba2 layers, "
            f"d_model {data['d_model']} (`{path.parent.name}/`)",
            "",
            f"One verify step of {tokens} tokens a request and its acceptance, timed as a CUDA "
            f"graph; accepted counts uniform in 1..{tokens}; tokens/s = batch x mean accepted / "
            "step time. (a) the intermediate-state path at upstream's (4,4): every draft's state "
            "into a buffer, then the engine's copy of the accepted state into the pool; (b) the "
            "same at the table's configs; (c) replay at the table's configs. Each way draws its "
            "own accepted counts, so tokens/s vs (a) carries that draw too (the summary compares "
            "step times).",
            "",
            table(
                [
                    "batch",
                    "way",
                    "config",
                    "step us",
                    "mean accepted",
                    "tokens/s",
                    "tokens/s vs (a)",
                    "SSM kernels us per step (profiled)",
                    "SSM share of the step",
                ],
                rows,
            ),
            "",
            table_rows_note(folder, data),
            "",
            run_note(path, data),
            "",
            provenance(data),
            "",
        ]
    for path in sorted(folder.glob("e2e-*/e2e-greedy.json")):
        data = load(path)
        if "results" not in data:  # plain greedy decoding: e2e_section
            continue
        rows = [
            [
                way,
                r["launch"],
                "identical" if r["identical"] else "DIFFERENT",
                r["token_id_mismatches"],
                r["logprob_mismatches"],
                r["steps"],
                f"{r['mean_accepted']:.2f}",
            ]
            for way, r in data["results"].items()
        ]
        parts += [
            f"#### Greedy speculative decoding: {data['prompts']} prompts x {data['new_tokens']} tokens "
            f"(`{path.parent.name}/`)",
            "",
            f"{data['method']['decoding']}; {data['method']['compared']}.",
            "",
            table(
                [
                    "way",
                    "config",
                    "verdict",
                    "id mismatches",
                    "log-prob mismatches",
                    "steps",
                    "mean accepted",
                ],
                rows,
            ),
            "",
            provenance(data),
            "",
        ]
    return "\n".join(parts)


# The summary: what ssmdecode gains over the baseline of each run, beside what the ceiling of
# that run would gain, at a few batches (the figure has every batch measured).
SUMMARY_BATCHES = (8, 64, 512)
SUMMARY_TOKENS = 4
SUMMARY_RUNS = {
    "bench": "bench/bench.json",
    "bench_spec": "bench-spec/bench.json",
    "e2e": "e2e-nemotron3-super-tp8/e2e.json",
    "e2e_spec": "e2e-spec/e2e.json",
}


@dataclass
class Gain:
    """One line of the summary: ssmdecode against a baseline of the same run, with a ceiling.
    points: batch -> (baseline us, ssmdecode us, ceiling us, gather ceiling us or None)."""

    what: str  # the table's label
    legend: str  # the figure's
    ceiling_legend: str
    panel: int  # 0 decode call, 1 verify call, 2 model step
    points: dict[int, tuple[float, float, float, float | None]]

    def over_baseline(self, column: int) -> list[float]:
        """The baseline's time over a column's (1 ssmdecode, 2 ceiling, 3 gather ceiling), by
        ascending batch."""
        return [p[0] / p[column] for _, p in sorted(self.points.items())]


def summary_runs(folder: Path) -> dict[str, tuple[Path, dict]]:
    paths = {k: folder / v for k, v in SUMMARY_RUNS.items()}
    return {k: (p, load(p)) for k, p in paths.items() if p.exists()}


def by_batch(rows: list[dict], **match: object) -> dict[int, dict]:
    return {r["batch"]: r for r in rows if all(r.get(k) == v for k, v in match.items())}


def summary_gains(runs: dict[str, tuple[Path, dict]]) -> list[Gain]:
    gains = []
    if "bench" in runs:
        rows = runs["bench"][1]["rows"]
        up, tab = by_batch(rows, config="upstream"), by_batch(rows, config="table")
        gains.append(
            Gain(
                "**Decode call**, T = 1: upstream's default config (4,4) → the table; ceiling: "
                "the same-bytes stream (the gather stream)",
                "table over (4,4)",
                "same-bytes ceiling over (4,4)",
                0,
                {
                    b: (up[b]["us"], t["us"], t["ceiling_us"], t.get("gather_ceiling_us"))
                    for b, t in tab.items()
                    if b in up
                },
            )
        )
    if "bench_spec" in runs:
        rows = [r for r in runs["bench_spec"][1]["rows"] if r["tokens"] == SUMMARY_TOKENS]
        up = by_batch(rows, mode="buffer", config="upstream")
        tab = by_batch(rows, mode="buffer", config="table")
        replay = by_batch(rows, mode="replay", config="table")
        gains += [
            Gain(
                f"**Verify call**, T = {SUMMARY_TOKENS}, sglang's intermediate-state buffer: "
                "(4,4) → the table; ceiling: the 1 → T stream",
                "buffer call: table over (4,4)",
                "1 → T stream over (4,4)",
                1,
                {b: (up[b]["us"], t["us"], t["ceiling_us"], None) for b, t in tab.items() if b in up},
            ),
            Gain(
                f"**Verify call**, T = {SUMMARY_TOKENS}: the buffer call at (4,4) → replay "
                "(selective_state_replay) at the table; ceiling: replay's floor",
                "replay over the buffer call at (4,4)",
                "replay's floor over the buffer call at (4,4)",
                1,
                {b: (up[b]["us"], r["us"], r["ceiling_us"], None) for b, r in replay.items() if b in up},
            ),
        ]

    def steps(base: dict[int, dict], ours: dict[int, dict], ssm: str) -> dict:
        # The ceiling of a step: the same step with its SSM kernels taking no time (their
        # profiled time per step taken off the graphed step).
        return {
            b: (base[b]["step_us"], o["step_us"], o["step_us"] - o[ssm], None)
            for b, o in ours.items()
            if b in base
        }

    if "e2e" in runs:
        rows = [r for r in runs["e2e"][1]["rows"] if not r.get("variant")]
        gains.append(
            Gain(
                "**Model step**, decode (T = 1): (4,4) → the table; ceiling: the step with its "
                "SSU kernels taking no time",
                "decode: table over (4,4)",
                "decode with no SSU time",
                2,
                steps(by_batch(rows, config="upstream"), by_batch(rows, config="table"), "ssu_us_per_step"),
            )
        )
    if "e2e_spec" in runs:
        rows = runs["e2e_spec"][1]["rows"]
        tokens = rows[0]["tokens"]
        base = by_batch(rows, path="buffer", config="upstream")
        gains += [
            Gain(
                f"**Model step**, verify (T = {tokens}), the intermediate-state path: (4,4) → "
                "the table; ceiling: the step with its SSM kernels taking no time",
                "verify, buffer: table over (4,4)",
                "verify, buffer, with no SSM time",
                2,
                steps(base, by_batch(rows, path="buffer", config="table"), "ssm_us_per_step"),
            ),
            Gain(
                f"**Model step**, verify (T = {tokens}): the intermediate-state path at (4,4) → "
                "replay at the table; ceiling: as above, replay's step",
                "verify: replay over the buffer at (4,4)",
                "verify, replay, with no SSM time",
                2,
                steps(base, by_batch(rows, path="replay", config="table"), "ssm_us_per_step"),
            ),
        ]
    return gains


def link(path: Path, links_from: Path) -> str:
    """A Markdown link target to path from a file in the folder links_from."""
    return os.path.relpath(path, links_from)


def percent_range(values: list[float]) -> str:
    return f"{100 * min(values):.0f}-{100 * max(values):.0f}%"


def fine_range(values: list[float]) -> str:
    return f"{100 * min(values):.1f}-{100 * max(values):.1f}%"


def rounding_summary(folder: Path, links_from: Path) -> tuple[str, list[dict]]:
    """One sentence on the table's stochastic store against round-to-nearest, each 16-bit
    state dtype, at the default Philox rounds (the bench-sr-* runs), and those runs."""
    runs = []
    for path in sorted(folder.glob("bench-?*/bench.json")):
        data = load(path)
        if is_rounding(data) and data["method"]["philox_rounds"] == DEFAULT_PHILOX_ROUNDS:
            runs.append(data)
    parts = []
    for data in sorted(runs, key=lambda d: d["shape"]["state_dtype"]):
        by = {(r["config"], r["batch"]): r for r in data["rows"]}
        costs, ceiling, nearest = [], [], []
        for (config, batch), near in sorted(by.items()):
            sr = by.get((config + " sr", batch))
            if config != "table" or sr is None or batch < ROUNDING_BAR_FROM:
                continue
            costs.append(sr["us"] / near["us"] - 1)
            if batch >= 256:
                ceiling.append(sr["fraction_of_ceiling"])
                nearest.append(near["fraction_of_ceiling"])
        if costs:
            parts.append(
                f"{data['shape']['state_dtype']} {100 * min(costs):+.1f} to {100 * max(costs):+.1f}%"
                + (
                    f" (at {fine_range(ceiling)} of the same-bytes ceiling from bs 256 up, "
                    f"round-to-nearest at {fine_range(nearest)})"
                    if ceiling
                    else ""
                )
            )
    if not parts:
        return "", []
    return (
        f"A 16-bit state stored with stochastic rounding ({DEFAULT_PHILOX_ROUNDS} Philox rounds, "
        f"the default) costs over round-to-nearest, at the table's configs from bs "
        f"{ROUNDING_BAR_FROM} up: "
        + "; ".join(parts)
        + f' ([docs/numerics.md]({link(ROOT / "docs" / "numerics.md", links_from)}), "Speed"; '
        f"at bs 1024 the cost moves with the machine's power headroom: "
        f"[docs/performance.md]({link(ROOT / 'docs' / 'performance.md', links_from)}), "
        '"The bar across runs").',
        runs,
    )


def summary_text(folder: Path, links_from: Path) -> str:
    """The summary table, the sentences computed from the same runs, the figure and the
    provenance of every run it quotes."""
    runs = summary_runs(folder)
    gains = summary_gains(runs)
    if not gains:
        return ""
    where = "below" if links_from == folder else f"in [REPORT.md]({link(folder / 'REPORT.md', links_from)})"
    performance = link(ROOT / "docs" / "performance.md", links_from)
    rows = []
    for g in gains:
        for i, b in enumerate(b for b in SUMMARY_BATCHES if b in g.points):
            base, ours, ceiling, gather = g.points[b]
            rows.append(
                [
                    g.what if i == 0 else "",
                    b,
                    base,
                    ours,
                    f"{ceiling:.2f}" + ("" if gather is None else f" ({gather:.2f})"),
                    f"{base / ours:.2f}x",
                    f"{base / ceiling:.2f}x" + ("" if gather is None else f" ({base / gather:.2f}x)"),
                ]
            )
    text = [
        table(
            ["", "batch", "baseline, us", "ssmdecode, us", "ceiling, us", "gain", "gain at the ceiling"],
            rows,
        ),
        "",
        "Gain: the baseline's time over ssmdecode's, both from the same run; gain at the "
        "ceiling: the baseline's time over the ceiling's, what a call at the ceiling would gain "
        "(for a model step, what it would gain if its SSM kernels took no time). "
        "(4,4) is the upstream kernels' default launch config, run by ssmdecode's kernel with "
        "the same bits; the upstream kernels themselves through the same harness, and every "
        f"batch, config and shape measured, are {where}.",
    ]
    if "bench" in runs:
        data = runs["bench"][1]
        up = [r for r in data["rows"] if r["config"] == "upstream"]
        tab = [r for r in data["rows"] if r["config"] == "table"]
        batches = sorted(r["batch"] for r in tab)
        shape = data["shape"]
        text += [
            "",
            f"At this shape ({shape['name']}: H{shape['nheads']} P{shape['headdim']} "
            f"N{shape['dstate']} G{shape['ngroups']}, {shape['state_dtype']} state, "
            f"{shape['dtype']} inputs) over batch {batches[0]}-{batches[-1]}, upstream's default "
            f"config runs decode calls at {percent_range([r['fraction_of_ceiling'] for r in up])} "
            "of the same-bytes ceiling and the table's configs at "
            f"{percent_range([r['fraction_of_ceiling'] for r in tab])} "
            f"({percent_range([r['fraction_of_gather_ceiling'] for r in tab])} of the gather "
            "ceiling: the same stream over the call's own slots, what their places in the pool "
            "allow).",
        ]
    if "bench_spec" in runs:
        rows = [
            r
            for r in runs["bench_spec"][1]["rows"]
            if r["tokens"] == SUMMARY_TOKENS and r["config"] == "table"
        ]
        buffer = [r["fraction_of_ceiling"] for r in rows if r["mode"] == "buffer"]
        replay = [r["fraction_of_ceiling"] for r in rows if r["mode"] == "replay"]
        text += [
            "",
            f"At T = {SUMMARY_TOKENS} the table's buffer calls run at {percent_range(buffer)} of "
            "the 1 → T stream"
            + (
                " (past 100% where the kernel moves those bytes faster than the stream does: "
                "the stream is not tight at these sizes)"
                if max(buffer) > 1
                else ""
            )
            + f", replay at {percent_range(replay)} of its floor; "
            f"[docs/performance.md]({performance}) says where the rest goes.",
        ]
    rounding, rounding_runs = rounding_summary(folder, links_from)
    if rounding:
        text += ["", rounding]
    notes = [n for path, data in runs.values() if (n := run_note(path, data))]
    text += ["", *notes] if notes else []
    plot = folder / "summary.png"
    if plot.exists():
        text += ["", f"![summary]({plot.relative_to(links_from)})"]
    for data in [*(data for _, data in runs.values()), *rounding_runs]:
        text += ["", provenance(data)]
    return "\n".join(text)


# The README's short table: each summary line's gain at SUMMARY_BATCHES, its ceiling's beside it
# (the panel names the line's kind, as the figure's titles do).
README_PANELS = ("**Decode call**, T = 1", f"**Verify call**, T = {SUMMARY_TOKENS}", "**Model step**")


def readme_summary(folder: Path, links_from: Path) -> str:
    """The README's part: the short table of the summary's gains, the figure and the
    provenance of the runs it quotes; the times, ceilings and sentences stay in REPORT.md."""
    runs = summary_runs(folder)
    gains = summary_gains(runs)
    if not gains:
        return ""
    rows, panel = [], None
    for g in gains:
        cells = []
        for b in SUMMARY_BATCHES:
            if b in g.points:
                base, ours, ceiling, _ = g.points[b]
                cells.append(f"{base / ours:.2f}x ({base / ceiling:.2f}x)")
            else:
                cells.append("")
        rows.append([README_PANELS[g.panel] if g.panel != panel else "", g.legend, *cells])
        panel = g.panel
    report = link(folder / "REPORT.md", links_from)
    text = [
        table(["", "ssmdecode against the baseline", *(f"bs {b}" for b in SUMMARY_BATCHES)], rows),
        "",
        "Each cell: the baseline's time over ssmdecode's, both from the same run; in parentheses, "
        "the baseline's time over the ceiling's, what a call at the ceiling would gain (for a "
        "model step, what it would gain if its SSM kernels took no time). (4,4) is the upstream "
        "kernels' default launch config, run by ssmdecode's kernel with the same bits. The times "
        "and ceilings, every batch, config and shape measured, and the upstream kernels "
        f"themselves are in [REPORT.md]({report}).",
    ]
    plot = folder / "summary.png"
    if plot.exists():
        text += ["", f"![summary]({plot.relative_to(links_from)})"]
    for _, data in runs.values():
        text += ["", provenance(data)]
    return "\n".join(text)


def summary_plot(folder: Path) -> Path | None:
    """summary.png: per panel (decode call, verify call, model step) each gain of the summary
    against batch, and what its ceiling would gain, dashed in the same colour."""
    gains = summary_gains(summary_runs(folder))
    if not gains:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    titles = ("Decode call, T = 1", f"Verify call, T = {SUMMARY_TOKENS}", "Model step, 4 Mamba2 layers")
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), sharey=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, g in enumerate(gains):
        ax, colour = axes[g.panel], colours[i % len(colours)]
        batches = sorted(g.points)
        ax.plot(batches, g.over_baseline(1), "o-", color=colour, label=g.legend)
        ax.plot(batches, g.over_baseline(2), "--", color=colour, label=g.ceiling_legend)
        if all(g.points[b][3] is not None for b in batches):
            ax.plot(batches, g.over_baseline(3), ":", color=colour, label="gather ceiling over (4,4)")
    # legends where the lines leave room: the decode call's gains sit above 1.05
    for ax, title, corner in zip(axes, titles, ("lower left", "upper left", "upper left"), strict=True):
        ax.axhline(1.0, color="gray", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("batch")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small", loc=corner)
    axes[0].set_ylabel("baseline's time / time (the same run's)")
    fig.suptitle(f"ssmdecode on {folder.name}: gain over the baseline, and the gain at the ceiling (dashed)")
    path = folder / "summary.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def build(folder: Path, links_from: Path) -> str:
    """The report of a results folder; image links relative to the folder links_from."""
    parts = [f"### Measured on {folder.name}", ""]
    summary = summary_text(folder, links_from)
    if summary:
        parts += ["#### Summary", "", summary, ""]
    headline = folder / "bench" / "bench.json"
    if headline.exists():
        data = load(headline)
        note = table_rows_note(folder, data)
        parts += [bench_section(data, "Headline (Nemotron-3-Super, TP8 rank)", 0.97, note), ""]
    for path in sorted(folder.glob("bench-?*/bench.json")):
        data = load(path)
        if is_rounding(data):  # rounding_section
            continue
        note = table_rows_note(folder, data)
        if is_spec(data):  # verify calls, bench --tokens --mode
            parts += [spec_bench_section(folder, data, path.parent.name), ""]
            continue
        if data["method"].get("pdl"):  # the headline, every config called with pdl=True
            parts += [bench_section(data, "Headline, calls with pdl=True", None, note), PDL_NOTE, ""]
            continue
        if data["method"].get("slot_order"):  # the headline, rows taken in slot order
            parts += [
                bench_section(data, "Headline, calls with batch_order=slot_order(slots)", 0.97, note),
                slot_order_note(data),
                "",
            ]
            continue
        flags = data["environment"]["command"].split(" --tp 8 ")[-1].split(" --batch")[0]
        parts += [bench_section(data, f"Headline with {flags}", 0.90, note), ""]
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
        "",
        spec_e2e_section(folder),
        "",
        rounding_section(folder),
        "",
        accuracy_section(folder),
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
    plot = summary_plot(folder)
    (folder / "REPORT.md").write_text(build(folder, folder))
    wrote = [folder / "REPORT.md", *([plot] if plot else [])]
    readme = ROOT / "README.md"
    text = readme.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        summary = readme_summary(folder, ROOT)
        readme.write_text(head + BEGIN + "\n" + summary + "\n" + END + rest.split(END, 1)[1])
        wrote.append(readme)
    print("wrote " + ", ".join(str(p.relative_to(ROOT)) for p in wrote))
    return 0


if __name__ == "__main__":
    sys.exit(main())
