"""`ssmdecode bench-replay`: ReplaySSM decode (T = 1) and verify (T >= 2) steps of ssmdecode and
of the engines' kernels, on the same tensors in one process, against the floor measured first.

Per (cursor law, T, batch), on one state pool and one set of inputs (ssmdecode.bench.replay says
what they are and how each route's rings are laid out from the same cached tokens):

1. the floors: the read-only stream of the states over the calls' slots, the read + write
   stream, and the issue's floor = read-only + flushing share x (read + write - read-only) + the
   rings', inputs' and outputs' bytes at the read + write stream's bandwidth;
2. ssmdecode: the single-token table (T = 1), exact replay, fast replay (exact=False, where this
   tree has it), compat.vllm's output-only adapter (T = 1, where this tree has it), the
   intermediate-state path (T >= 2: sglang's buffer mode at the table's config);
3. the anchors, where they load (ssmdecode.bench.anchors: local copies, never required): vLLM's
   output-only kernel (T = 1, its own H200 config, its host's cursors), vLLM's Triton spec kernel
   (T >= 2), flashinfer's checkpointing_ssu, both algorithms (a module built for this T);
4. accuracy of every route on call 0's slots against a float64 recurrence of its own inputs
   (bench.replay.accuracy_of), on batches up to --accuracy-batch.

Each time: the cold-L2 CUDA-graph timer (graphs of max(20, K) calls over K disjoint slot sets
holding >= 3x L2, replayed 20 times, median of 5); only the SSM kernels, the cursors fixed.
Results: bench-replay.json, .md and one PNG per (law, T) in --out (default
benchmarks/results/<device_key>/bench-replay/).
"""

from __future__ import annotations

import argparse
import logging

from ssmdecode.bench.anchors import anchors_dir
from ssmdecode.bench.ceiling import measure_gather_ceiling, measure_read_ceiling
from ssmdecode.bench.replay import (
    LAWS,
    accuracy_of,
    case_floor_bytes,
    load_anchors,
    make_case,
    routes_for,
    time_route,
)
from ssmdecode.bench.report import (
    MEANINGLESS,
    environment,
    markdown_table,
    plot_vs_batch,
    results_dir,
    write_outputs,
)
from ssmdecode.bench.spec import ENGINE_WINDOW
from ssmdecode.bench.timer import method
from ssmdecode.cli_args import (
    add_batch_argument,
    add_common_arguments,
    add_shape_arguments,
    batches_from_args,
    device_from_args,
    shapes_from_args,
)

__all__ = ["add_parser", "run"]

log = logging.getLogger(__name__)

GPU_BATCHES = (1, 8, 64, 128, 512, 1024)
CPU_BATCHES = (1, 3)
DEFAULT_WINDOW = ENGINE_WINDOW  # bench.spec's: the engines' window
ACCURACY_BATCH = 128


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench-replay",
        help="ReplaySSM steps of ssmdecode and the engines' kernels against the floor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_shape_arguments(p)
    add_batch_argument(p, GPU_BATCHES, CPU_BATCHES)
    p.add_argument("--tokens", type=int, nargs="+", default=[1, 4], help="tokens a request, T (default 1 4)")
    p.add_argument(
        "--window",
        type=int,
        default=DEFAULT_WINDOW,
        help=f"cached tokens a ring holds besides the T new ones (default {DEFAULT_WINDOW}; vLLM's T = 1 "
        "buffer is window rows, ssmdecode's and flashinfer's rings window + T)",
    )
    p.add_argument(
        "--law",
        choices=LAWS,
        nargs="+",
        default=["steady"],
        help="the cursors: steady (T = 1: write_pos uniform in 0..W-1, flush at W-1; T >= 2: cached "
        "count uniform in 0..W, flush above W - T), noflush, allflush (default steady)",
    )
    p.add_argument(
        "--accuracy-batch",
        type=int,
        default=ACCURACY_BATCH,
        help=f"check accuracy against float64 at batches up to this (default {ACCURACY_BATCH})",
    )
    add_common_arguments(
        p,
        "folder for bench-replay.json, .md and .png (default benchmarks/results/<device_key>/bench-replay/)",
    )


def _floor_row(case, read_us: float, rw_us: float) -> dict[str, float]:
    state = case.shape.state_bytes(case.batch)
    extra = case_floor_bytes(case)
    flush = case.flush_fraction()
    copy_bw = 2 * state / (rw_us * 1e-6)  # bytes/s of the read + write stream, a copy
    floor = read_us + flush * (rw_us - read_us) + sum(extra.values()) / copy_bw * 1e6
    return {
        "read_us": read_us,
        "read_write_us": rw_us,
        "flush_fraction": flush,
        "mean_cached": case.mean_cached(),
        "extra_bytes": extra,
        "copy_tbps": copy_bw / 1e12,
        "floor_us": floor,
    }


def run(args: argparse.Namespace) -> int:
    device = device_from_args(args)
    (shape,) = shapes_from_args(args, device)
    batches = batches_from_args(args, device)
    if min(args.tokens) < 1 or max(args.tokens) > args.window:
        raise SystemExit(f"ssmdecode bench-replay: --tokens must be in 1..--window ({args.window})")
    if device.type != "cuda":
        print(MEANINGLESS)
    print(f"anchors folder: {anchors_dir()}")
    rows: list[dict[str, object]] = []
    floors: list[dict[str, object]] = []
    notes: dict[str, str] = {}
    failed: list[str] = []  # ssmdecode's own routes that raised: the exit code says so
    for law in args.law:
        for tokens in args.tokens:
            anchors = None
            for batch in batches:
                case = make_case(shape, tokens, batch, args.window, law, device, args.seed)
                anchors = anchors or load_anchors(case)
                read = measure_read_ceiling(case.state, case.slot_sets)
                rw = measure_gather_ceiling(case.state, case.slot_sets)
                floor = _floor_row(case, read.us, rw.us)
                floors.append({"law": law, "tokens": tokens, "batch": batch, **floor,
                               "rotation": case.rotation})  # fmt: skip
                for route in routes_for(case, anchors):
                    row: dict[str, object] = {
                        "law": law,
                        "tokens": tokens,
                        "batch": batch,
                        "route": route.name,
                        "kind": route.kind,
                        "family": route.family,
                        "available": route.available,
                    }
                    if not route.available:
                        notes[route.name] = route.why_not
                        rows.append({**row, "why_not": route.why_not})
                        continue
                    try:
                        if batch <= args.accuracy_batch:
                            row["accuracy"] = accuracy_of(case, route)
                        timing = time_route(case, route, device)
                    except Exception as e:  # reported, and the run goes on (GPU time is scarce)
                        log.warning("%s failed at T=%d batch %d: %r", route.name, tokens, batch, e)
                        if route.kind != "anchor":
                            failed.append(f"{route.name} T={tokens} batch {batch}: {e!r}")
                        notes[route.name] = f"failed: {e!r}"
                        rows.append({**row, "available": False, "why_not": f"failed: {e!r}"})
                        continue
                    row.update(
                        us=timing.us,
                        timing=timing.to_dict(),
                        fraction_of_floor=floor["floor_us"] / timing.us,
                    )
                    rows.append(row)
                    log.info("%s T=%d %s batch %d: %.2f us", law, tokens, route.name, batch, timing.us)
                del case
    _compare(rows)
    env = environment(device, args.command_line)
    data = {
        "environment": env,
        "method": {
            **method(),
            "timed": "only the SSM kernels of a step (vLLM: its precompute and main kernels); cursors "
            "fixed across the graph's calls; no bookkeeping",
            "floor": "read-only stream + flush fraction x (read + write stream - read-only stream) + "
            "(rings' reads and appends + inputs + outputs) bytes at the read + write stream's bandwidth",
            "inputs": "ssmdecode.bench.replay (docs/measuring.md, ReplaySSM)",
            "accuracy": "call 0's slots against a float64 recurrence of each route's own inputs: out in "
            "bfloat16 ulps at the float64 value; written states' max abs error / max |state|",
            "window": args.window,
            "laws": args.law,
            "seed": args.seed,
            "anchors_dir": str(anchors_dir()),
        },
        "shape": shape.to_dict(),
        "floors": floors,
        "rows": rows,
        "not_available": notes,
        "ssmdecode_failures": failed,
    }
    markdown = _markdown(shape.label, args, rows, floors, notes)
    out_dir = args.out if args.out is not None else results_dir(None, device) / "bench-replay"
    paths = write_outputs(out_dir, "bench-replay", data, markdown)
    for law in args.law:
        for tokens in args.tokens:
            series: dict[str, dict[int, float]] = {}
            for f in floors:
                if (f["law"], f["tokens"]) == (law, tokens):
                    series.setdefault("floor", {})[f["batch"]] = f["floor_us"]
            for r in rows:
                if (r["law"], r["tokens"]) == (law, tokens) and "us" in r:
                    series.setdefault(str(r["route"]), {})[r["batch"]] = r["us"]
            paths.append(
                plot_vs_batch(
                    out_dir / f"bench-replay-{law}-T{tokens}.png",
                    f"ReplaySSM steps, T={tokens}, {law}, {shape.label}",
                    series,
                    ylabel="us per call",
                )
            )
    print(markdown)
    print("wrote " + ", ".join(map(str, paths)))
    if device.type != "cuda":
        print(MEANINGLESS + " Timings need a GPU.")
    for line in failed:
        print(f"FAIL {line}")
    return 1 if failed else 0


def _compare(rows: list[dict[str, object]]) -> None:
    """Each ssmdecode row's speed-up over each anchor family of its (law, T, batch): the fastest
    of the family (flashinfer: the best of its algorithms)."""
    best: dict[tuple, dict[str, float]] = {}
    for r in rows:
        if r["kind"] == "anchor" and "us" in r:
            key = (r["law"], r["tokens"], r["batch"])
            fam = best.setdefault(key, {})
            fam[r["family"]] = min(fam.get(r["family"], float("inf")), r["us"])
    for r in rows:
        if r["kind"] == "ssmdecode" and "us" in r:
            fam = best.get((r["law"], r["tokens"], r["batch"]), {})
            r["vs"] = {f: us / r["us"] for f, us in fam.items()}
            r["anchor_us"] = dict(fam)


def _markdown(label: str, args: argparse.Namespace, rows, floors, notes) -> str:
    out = [f"Shape: {label}. Window {args.window}; us per call (cold L2, CUDA graphs).\n"]
    batches = sorted({f["batch"] for f in floors})
    for law in args.law:
        for tokens in args.tokens:
            here = [r for r in rows if (r["law"], r["tokens"]) == (law, tokens)]
            fl = {f["batch"]: f for f in floors if (f["law"], f["tokens"]) == (law, tokens)}
            table = [
                ["read-only stream", *[fl[b]["read_us"] for b in batches]],
                ["read + write stream", *[fl[b]["read_write_us"] for b in batches]],
                ["floor", *[fl[b]["floor_us"] for b in batches]],
                ["flush fraction", *[fl[b]["flush_fraction"] for b in batches]],
            ]
            names = list(dict.fromkeys(r["route"] for r in here))
            pct, vs = [], []
            for name in names:
                by = {r["batch"]: r for r in here if r["route"] == name}
                table.append([name, *[by.get(b, {}).get("us") for b in batches]])
                if any("us" in r for r in by.values()):
                    pct.append([name, *[_pct(by.get(b)) for b in batches]])
                for fam in ("vllm", "flashinfer"):
                    vals = [(by.get(b) or {}).get("vs", {}).get(fam) for b in batches]
                    if any(v is not None for v in vals):
                        vs.append([f"{name} vs {fam}", *vals])
            head = ["us per call", *[f"bs {b}" for b in batches]]
            out.append(f"### T = {tokens}, {law}\n\n" + markdown_table(head, table))
            if pct:
                out.append("\n% of floor\n\n" + markdown_table(["route", *head[1:]], pct))
            if vs:
                out.append(
                    "\nx faster than the anchor (its us / ours)\n\n"
                    + markdown_table(["route", *head[1:]], vs)
                )
            acc = [r for r in here if "accuracy" in r]
            if acc:
                out.append(
                    "\nAccuracy against float64 (out in bf16 ulps at the float64 value; floored: in "
                    "units of that ulp floored at 2^-18 max|out|, float32's summation floor, the fast "
                    "route's bar <= 1; state: max abs error / max |state| over the written states)\n\n"
                    + markdown_table(
                        [
                            "route",
                            "bs",
                            "out max ulps",
                            "out max, floored",
                            "out mean ulps",
                            "bf16(f64) mean ulps",
                            "state rel err",
                        ],
                        [
                            [
                                r["route"],
                                r["batch"],
                                r["accuracy"]["out_max_ulps"],
                                r["accuracy"].get("out_max_floored", "-"),
                                r["accuracy"]["out_mean_ulps"],
                                r["accuracy"]["bf16_of_float64_mean_ulps"],
                                _sci(r["accuracy"].get("state_max_rel")),
                            ]
                            for r in acc
                        ],
                    )
                )
            out.append("\n")
    if notes:
        out.append("Not timed:\n\n" + "\n".join(f"- {k}: {v}" for k, v in notes.items()) + "\n")
    return "\n".join(out)


def _pct(row: dict | None) -> float | None:
    return None if not row or "fraction_of_floor" not in row else 100 * row["fraction_of_floor"]


def _sci(v: float | None) -> str:
    return "-" if v is None else f"{v:.2e}"
