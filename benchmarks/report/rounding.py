"""Stochastic rounding of 16-bit states (`bench --rounding nearest stochastic`): the section
of every bench-sr-* run, and the summary's sentence at the default Philox rounds."""

from __future__ import annotations

from pathlib import Path

from ssmdecode.ops.selective_state_update.checks import DEFAULT_PHILOX_ROUNDS

from .common import ROOT, fine_range, link, load, provenance, table


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
