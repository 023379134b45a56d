"""The summary: the table and sentences at the top of REPORT.md and in the README, and its
figure, summary.png."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .common import ROOT, link, load, percent_range, provenance, run_note, table
from .replay import FAST, best_anchor, route_us
from .rounding import rounding_summary

# The summary: what ssmdecode gains over the baseline of each run, beside what the ceiling of
# that run would gain, at a few batches (the figure has every batch measured).
SUMMARY_BATCHES = (8, 64, 512)
SUMMARY_TOKENS = 4
SUMMARY_RUNS = {
    "bench": "bench/bench.json",
    "bench_spec": "bench-spec/bench.json",
    "e2e": "e2e-nemotron3-super-tp8/e2e.json",
    "e2e_spec": "e2e-spec/e2e.json",
    "bench_replay": "bench-replay/bench-replay.json",
}
# ReplaySSM's lines: the engine kernel each T is held against (bench-replay's row family, the
# fastest of its algorithms at each batch; its name in the table and in the legend), in the
# steady cursor law.
REPLAY_ANCHORS = {
    1: ("vllm", "vLLM's ReplaySSM output-only kernel", "vLLM's"),
    SUMMARY_TOKENS: ("flashinfer", "flashinfer's checkpointing_ssu", "flashinfer's"),
}
REPLAY_LAW = "steady"


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
    if "bench_replay" in runs:
        gains += replay_gains(runs["bench_replay"][1])
    return sorted(gains, key=lambda g: g.panel)  # each panel's lines together (a stable sort)


def replay_gains(data: dict) -> list[Gain]:
    """ReplaySSM: the engine's own kernel (the fastest of its algorithms, timed in the same
    process) over the fast route, with replay's floor of the same run as the ceiling."""
    floors = {(f["tokens"], f["batch"]): f["floor_us"] for f in data["floors"] if f["law"] == REPLAY_LAW}
    gains = []
    for tokens, (family, engine, short) in REPLAY_ANCHORS.items():
        rows = [r for r in data["rows"] if r["law"] == REPLAY_LAW and r["tokens"] == tokens]
        points = {}
        for batch in sorted({r["batch"] for r in rows}):
            at = [r for r in rows if r["batch"] == batch]
            fast, anchor = route_us(at, FAST), best_anchor(at, family)
            if fast is not None and anchor is not None and (tokens, batch) in floors:
                points[batch] = (anchor, fast, floors[(tokens, batch)], None)
        if not points:
            continue
        panel = 0 if tokens == 1 else 1
        gains.append(
            Gain(
                f"{README_PANELS[panel]}, ReplaySSM: {engine} (bfloat16-level state errors) → the "
                "fast replay route (float32-accurate); ceiling: replay's floor",
                f"ReplaySSM: fast route over {short}",
                f"replay's floor over {short}",
                panel,
                points,
            )
        )
    return gains


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
        "kernels' default launch config, run by ssmdecode's kernel with the same bits. ReplaySSM: "
        "the engine's own kernel, timed in the same process, over replay's fast route "
        "(`selective_state_replay(..., exact=False)`, float32-accurate where the engines' kernels "
        "keep bfloat16-level errors in the state), in the steady state of a window of 16. The "
        "times and ceilings, every batch, config and shape measured, and the upstream kernels "
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
    # legends where the lines leave room: the decode call's ReplaySSM line falls from the left
    for ax, title, corner in zip(axes, titles, ("upper right", "upper left", "upper left"), strict=True):
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
