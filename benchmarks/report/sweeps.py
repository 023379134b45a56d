"""The sweeps of the upstream grid's configs (`ssmdecode sweep`), the same configs on each
kernel, and those sweeps against the measuring notes' upstream-kernel table."""

from __future__ import annotations

from pathlib import Path

from .common import ROOT, load, provenance, table


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
