"""ReplaySSM: the fast replay route against the engines' own kernels (`ssmdecode bench-replay`)."""

from __future__ import annotations

from pathlib import Path

from .common import load, provenance, table

FAST = "ssmdecode replay fast"
EXACT = "ssmdecode replay exact"
INTERMEDIATE = "ssmdecode intermediate-state (sglang buffer, table)"


def route_us(rows: list[dict], route: str) -> float | None:
    hit = [r["us"] for r in rows if r["route"] == route and r.get("us") is not None]
    return hit[0] if hit else None


def _cell(us: float | None) -> str:
    return "-" if us is None else f"{us:.2f}"


def best_anchor(rows: list[dict], family: str) -> float | None:
    """The fastest of an engine's kernels (flashinfer's algorithms) at one point."""
    times = [r["us"] for r in rows if r["family"] == family and r.get("us") is not None]
    return min(times) if times else None


def _ratio(anchor: float | None, ours: float | None) -> str:
    return "-" if anchor is None or ours is None else f"{anchor / ours:.2f}x"


def replay_bench_section(folder: Path) -> str:
    """Per bench-replay* folder, cursor law and T: each batch's floor, the fast route (its time
    and share of the floor), the exact route, the intermediate-state path where the run has it,
    the engines' kernels (flashinfer's best algorithm), the fast route's speed against each, and
    its accuracy against float64; all of one run."""
    parts = []
    for path in sorted(folder.glob("bench-replay*/bench-replay.json")):
        data = load(path)
        floors = {(f["law"], f["tokens"], f["batch"]): f["floor_us"] for f in data["floors"]}
        for law, tokens in dict.fromkeys((r["law"], r["tokens"]) for r in data["rows"]):
            sub = [r for r in data["rows"] if r["law"] == law and r["tokens"] == tokens]
            if not any(r["route"] == FAST and r.get("us") is not None for r in sub):
                continue
            rows = []
            for batch in sorted({r["batch"] for r in sub}):
                at = [r for r in sub if r["batch"] == batch]
                fast = route_us(at, FAST)
                floor = floors.get((law, tokens, batch))
                vllm, fi = best_anchor(at, "vllm"), best_anchor(at, "flashinfer")
                acc = (
                    next((r["accuracy"] for r in at if r["route"] == FAST and r.get("accuracy")), None) or {}
                )
                state = acc.get("state_max_rel")
                rows.append(
                    [
                        batch,
                        _cell(floor),
                        _cell(fast),
                        "-" if floor is None or fast is None else f"{100 * floor / fast:.1f}%",
                        _cell(route_us(at, EXACT)),
                        _cell(route_us(at, INTERMEDIATE)),
                        _cell(vllm),
                        _cell(fi),
                        _ratio(vllm, fast),
                        _ratio(fi, fast),
                        "-" if acc.get("out_max_floored") is None else f"{acc['out_max_floored']:.3f}",
                        "-" if state is None else f"{state:.1e}",
                    ]
                )
            parts += [
                f"##### ReplaySSM, T = {tokens}, {law} cursors, window {data['method']['window']} "
                f"(`{path.parent.name}/`)",
                "",
                table(
                    [
                        "batch",
                        "floor",
                        "fast route",
                        "% of floor",
                        "exact route",
                        "intermediate-state path",
                        "vLLM",
                        "flashinfer",
                        "x vLLM",
                        "x flashinfer",
                        "out, floored",
                        "state rel",
                    ],
                    rows,
                ),
                "",
                provenance(data),
                "",
            ]
    if parts:
        parts = [
            "#### ReplaySSM: the fast replay route against the engines' kernels",
            "",
            "Each table one run of `ssmdecode bench-replay`: us per call, cold L2, CUDA graphs; the "
            "floor, measured in the same run: the read-only stream of the states plus the flushing "
            "share of the write, plus the rings', inputs' and outputs' bytes. The engines' kernels "
            "are local copies timed in the same process (flashinfer: the fastest of its "
            "algorithms); x: their time over the fast route's. The fast route's accuracy against "
            "float64 (where the run measured it): out in units of numerics.out_resolution (bar <= 1), "
            "the flushed states' max error over max |state| (bar 1e-5).",
            "",
            *parts,
        ]
    return "\n".join(parts).rstrip()
