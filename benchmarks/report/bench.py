"""The single-token benches (`ssmdecode bench`): the headline and its variants (pdl, slot
order, other shapes)."""

from __future__ import annotations

from .common import is_upstream_grid, provenance, table

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
