"""REPORT.md: the summary, then one section a kind of run, then the plots."""

from __future__ import annotations

from pathlib import Path

from .accuracy import accuracy_section
from .bench import PDL_NOTE, bench_section, slot_order_note
from .common import is_spec, load, table_rows_note
from .e2e import e2e_section
from .replay import replay_bench_section
from .rounding import is_rounding, rounding_section
from .spec import spec_bench_section, spec_e2e_section
from .summary import summary_text
from .sweeps import kernels_section, measuring_section, sweep_section
from .verify import verify_section


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
        replay_bench_section(folder),
        "",
        rounding_section(folder),
        "",
        accuracy_section(folder),
    ]
    plots = [p.relative_to(links_from) for p in sorted(folder.glob("*/*.png"))]
    if plots:
        parts += ["#### Plots", ""] + [f"![{p.parent.name}]({p})" for p in plots]
    return "\n".join(parts).rstrip() + "\n"
