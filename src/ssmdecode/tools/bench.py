"""`ssmdecode bench`: microseconds, TB/s and the fraction of the same-bytes ceiling of
selective_state_update, per launch config and batch size, by the method of docs/measuring.md
(cold L2 by rotation, CUDA graph, median of 5 repeats).

Bytes that must move: the state, read once and written once: 2 x batch x H x P x N x elem
size. Each batch is held to the ceiling measured in the same run (ssmdecode.bench.ceiling);
the large-transfer peak is reported beside it, and the gather ceiling: the same stream over the
call's own slots, what their places in the pool allow.

With --rounding nearest stochastic (a 16-bit state), every config is timed both ways in the
same run: round-to-nearest stores, and stochastic rounding (rand_seed; the seed is fixed, which
costs what a fresh one does); 'table' then names each rounding's entries (a table's
"rounding=stochastic" entries for the stochastic calls, where it has them).

With --tokens T (speculative decoding's verify step, T draft tokens a request) and --mode
(buffer: sglang's intermediate-state buffer; dst: vLLM's per-token slots with accepted counts;
replay: selective_state_replay in steady state), each call is held to the streams of its own
bytes over its own slots and rows (ssmdecode.bench.spec): the 1 -> T stream (1 state read, T
written a request), or for replay the design's floor (the read-only stream, the flushing
fraction of the read-write stream's write part, the rings); and to the fastest upstream-grid
config (BLOCK_M, warps) measured beside it.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import logging
from collections.abc import Callable

import torch

from ssmdecode import selective_state_update
from ssmdecode.bench.calls import bench_row, call_orders, time_config, timing_inputs
from ssmdecode.bench.ceiling import Ceiling, measure_ceiling, measure_gather_ceiling, measure_peak
from ssmdecode.bench.compare import against_reference, fresh_inputs, reference_result
from ssmdecode.bench.report import (
    MEANINGLESS,
    environment,
    markdown_table,
    plot_vs_batch,
    results_dir,
    write_outputs,
)
from ssmdecode.bench.spec import (
    DEFAULT_WINDOW,
    SPEC_MODES,
    check_spec_against_reference,
    flush_fraction,
    make_spec_inputs,
    measure_spec_ceiling,
    spec_bytes,
    time_spec_advance,
    time_spec_config,
)
from ssmdecode.bench.timer import Timing, interleaved, median_timing, method
from ssmdecode.cli_args import (
    ConfigSpec,
    add_batch_argument,
    add_common_arguments,
    add_config_argument,
    add_shape_arguments,
    batches_from_args,
    device_from_args,
    shapes_from_args,
)
from ssmdecode.config import PARAMS
from ssmdecode.ops.selective_state_update.checks import DEFAULT_PHILOX_ROUNDS, PHILOX_ROUNDS_RANGE
from ssmdecode.shapes import Shape

__all__ = ["add_parser", "check_against_reference", "run"]

log = logging.getLogger(__name__)

GPU_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
CPU_BATCHES = (1, 3)


ROUNDINGS = ("nearest", "stochastic")


def check_against_reference(
    shape: Shape,
    batch: int,
    specs: list[ConfigSpec],
    device: torch.device,
    seed: int,
    kernels: dict[str, functools.partial] | None = None,
) -> list[tuple[str, bool, str]]:
    """Correctness before speed: each config's out and written state against the float64
    reference at one batch, within verify's tolerances, with each kernel of kernels (by
    rounding; default ssmdecode's). (label, within, summary) per config and kernel."""
    inputs = fresh_inputs(shape, batch, device, seed)
    want = reference_result(inputs)
    results = []
    for spec, (rounding, fn) in itertools.product(specs, (kernels or {"": None}).items()):
        config = spec.resolve(shape, batch, device, stochastic=rounding == "stochastic")
        checks = against_reference(inputs, config, want, fn=fn)
        out, state = checks["out"], checks["state"]
        results.append(
            (
                f"{spec.text} {config.label}{' ' + rounding if rounding else ''}",
                out.within and state.within,
                f"vs float64 reference at batch {batch}: out max abs diff "
                f"{out.max_abs:.2e} ({out.worst_excess:.2f}x tolerance), state "
                f"{state.max_abs:.2e} ({state.worst_excess:.2f}x)",
            )
        )
    return results


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="time launch configs against the same-bytes ceiling",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_shape_arguments(p)
    add_batch_argument(p, GPU_BATCHES, CPU_BATCHES)
    add_config_argument(p, named=True, default=("upstream", "default", "table"))
    p.add_argument(
        "--slot-order",
        action="store_true",
        help="call with batch_order=slot_order(slots), computed before timing (once "
        "per decode step in an engine): the state pool read in memory order",
    )
    p.add_argument(
        "--pdl",
        action="store_true",
        help="call with pdl=True (programmatic dependent launch, sm_90+): each call "
        "of the graph may start under the previous one's tail; the ceiling is also "
        "timed launched that way (the pdl ceiling), and every rotation holds at "
        "least 2 slot sets, so that no call reads what the call before it writes",
    )
    p.add_argument(
        "--rounding",
        choices=ROUNDINGS,
        nargs="+",
        default=["nearest"],
        help="how the state is stored: nearest (round to nearest), stochastic (rand_seed; "
        "a 16-bit --state-dtype); both: every config timed both ways in the same run",
    )
    p.add_argument(
        "--philox-rounds",
        type=int,
        default=DEFAULT_PHILOX_ROUNDS,
        help=f"Philox rounds of --rounding stochastic's random bits (default {DEFAULT_PHILOX_ROUNDS})",
    )
    s = p.add_argument_group("speculative decoding (verify calls of T draft tokens a request)")
    s.add_argument(
        "--tokens",
        type=int,
        nargs="+",
        help="draft tokens a request, T (several: one table each); times verify calls "
        "instead of single-token ones",
    )
    s.add_argument(
        "--mode",
        choices=SPEC_MODES,
        nargs="+",
        default=["buffer"],
        help="how a verify call writes: buffer (sglang's intermediate-state buffer, "
        "disable_state_update), dst (vLLM's per-token slots, num_accepted_tokens, "
        "cu_seqlens), replay (selective_state_replay, steady state); several in one "
        "run (default buffer)",
    )
    s.add_argument(
        "--params",
        choices=PARAMS,
        nargs="+",
        default=["tied"],
        help="how dt, A (and D, dt_bias) come: tied over the head dim as Mamba2 layers pass them "
        "(A [H] expanded over P and N), or dense [H, P, N] / [H, P] tensors of the same values "
        "(Mamba1-style layouts, engines that materialize A); several in one run (default tied)",
    )
    s.add_argument(
        "--gate",
        action="store_true",
        help="verify calls (--tokens) with the gate z given (out * z sigmoid(z)), which the "
        "kernel compiles as its own variant; default z None, as the engines' Mamba2 layers pass it",
    )
    s.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="time the configs of each point in this many interleaved rounds (odd rounds "
        "backwards) and report each one's median (default 1)",
    )
    s.add_argument(
        "--window",
        type=int,
        default=DEFAULT_WINDOW,
        help=f"replay: cached tokens a ring holds besides the drafts (default "
        f"{DEFAULT_WINDOW}; the ring is window + T long)",
    )
    add_common_arguments(
        p, "folder for bench.json, bench.md and bench.png (default benchmarks/results/<device_key>/)"
    )


def run(args: argparse.Namespace) -> int:
    if args.tokens and args.rounding != ["nearest"]:
        print("ssmdecode bench: --rounding is taken by single-token calls only (not with --tokens)")
        return 2
    if args.tokens:
        return run_spec(args)
    device = device_from_args(args)
    (shape,) = shapes_from_args(args, device)
    batches = batches_from_args(args, device)
    if device.type != "cuda":
        print(MEANINGLESS)

    if "stochastic" in args.rounding and shape.state_dtype == torch.float32:
        print(
            "ssmdecode bench: --rounding stochastic needs a 16-bit state (--state-dtype bfloat16 or float16)"
        )
        return 2
    lo, hi = PHILOX_ROUNDS_RANGE
    if not lo <= args.philox_rounds <= hi:
        print(f"ssmdecode bench: --philox-rounds is {args.philox_rounds}; expected {lo} to {hi}")
        return 2
    seed = torch.tensor([12345], dtype=torch.int64, device=device)
    kernels = {
        rounding: functools.partial(
            selective_state_update,
            pdl=args.pdl,
            **({"rand_seed": seed, "philox_rounds": args.philox_rounds} if rounding == "stochastic" else {}),
        )
        for rounding in args.rounding
    }
    checks = check_against_reference(shape, min(batches), args.config, device, args.seed, kernels)
    for label, ok, line in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {label}: {line}")
    if not all(ok for _, ok, _ in checks):
        print("the kernel disagrees with the float64 reference: not timing it")
        return 1

    peak = measure_peak(device)
    rows, ceilings, gathers = _time_single(args, shape, batches, device, kernels)

    env = environment(device, args.command_line)
    data = {
        "environment": env,
        "method": {
            **method(),
            "bytes_moved": "2 x batch x H x P x N x state elem size",
            "ceiling": "in-place x *= 1.0000001 over the same bytes, same rotation "
            "and timer; 'triton' is the ceiling, 'torch' (mul_) the cross-check",
            "gather_ceiling": "the same stream over each call's own slots of its state "
            "pool (in the call's order, unchanged bits), same rotation and timer: what "
            "the slots allow without math",
            "inputs": "model-like (ssmdecode.bench.inputs)",
            "seed": args.seed,
            "pdl": args.pdl,
            "slot_order": args.slot_order,
            "rounding": args.rounding,
            "philox_rounds": args.philox_rounds,
        },
        "shape": shape.to_dict(),
        "peak": peak.to_dict(),
        "ceilings": {str(b): c.to_dict() for b, c in ceilings.items()},
        "gather_ceilings": {str(b): t.to_dict() for b, t in gathers.items()},
        "rows": rows,
    }
    markdown = _single_markdown(args, shape, peak, rows)
    out_dir = results_dir(args.out, device)
    paths = write_outputs(out_dir, "bench", data, markdown)
    series: dict[str, dict[int, float]] = {}
    for r in rows:
        series.setdefault(r["config"], {})[r["batch"]] = r["tbps"]
    paths.append(
        plot_vs_batch(
            out_dir / "bench.png",
            f"selective_state_update, {shape.label}",
            series,
            {b: c.tbps for b, c in ceilings.items()},
            peak.tbps,
        )
    )
    print(markdown)
    print("wrote " + ", ".join(map(str, paths)))
    if device.type != "cuda":
        print(MEANINGLESS + " Timings need a GPU.")
    return 0


def _time_single(
    args: argparse.Namespace,
    shape: Shape,
    batches: list[int],
    device: torch.device,
    kernels: dict[str, Callable[..., object]],
) -> tuple[list[dict[str, object]], dict[int, Ceiling], dict[int, Timing]]:
    """Every batch's ceilings (flat and gathered), then each config and rounding timed on the
    same inputs: (rows, ceilings, gather ceilings)."""
    rows: list[dict[str, object]] = []
    ceilings: dict[int, Ceiling] = {}
    gathers: dict[int, Timing] = {}
    for batch in batches:
        inputs = timing_inputs(shape, batch, device, args.seed, args.pdl)
        ceilings[batch] = measure_ceiling(shape.state_bytes(batch), device, pdl=args.pdl)
        gathers[batch] = measure_gather_ceiling(
            inputs.state, inputs.slot_sets, call_orders(inputs, args.slot_order)
        )
        for spec, rounding in itertools.product(args.config, args.rounding):
            config = spec.resolve(shape, batch, device, stochastic=rounding == "stochastic")
            timing = time_config(inputs, config, device, kernels[rounding], args.slot_order)
            rows.append(
                {
                    "config": spec.text + ("" if rounding == "nearest" else " sr"),
                    "rounding": rounding,
                    "launch": config.label,
                    "launch_config": config.to_dict(),
                    **bench_row(shape, batch, timing, ceilings[batch], gathers[batch]),
                }
            )
            log.info("%s %s batch %d: %.2f us", spec.text, config.label, batch, timing.us)
        del inputs
    return rows, ceilings, gathers


def _single_markdown(
    args: argparse.Namespace, shape: Shape, peak: Ceiling, rows: list[dict[str, object]]
) -> str:
    """bench.md of a single-token run: the shape, the launch options, the peak, the table."""
    pdl_columns = all("pdl_ceiling_us" in r for r in rows)  # --pdl on a GPU
    table = markdown_table(
        [
            "config",
            "launch",
            "batch",
            "us",
            "TB/s",
            "ceiling us",
            "ceiling TB/s",
            "% of ceiling",
            "gather ceiling us",
            "% of gather ceiling",
            *(["pdl ceiling us", "% of pdl ceiling"] if pdl_columns else []),
        ],
        [
            [
                r["config"],
                r["launch"],
                r["batch"],
                r["us"],
                r["tbps"],
                r["ceiling_us"],
                r["ceiling_tbps"],
                100 * r["fraction_of_ceiling"],
                r["gather_ceiling_us"],
                100 * r["fraction_of_gather_ceiling"],
                *([r["pdl_ceiling_us"], 100 * r["fraction_of_pdl_ceiling"]] if pdl_columns else []),
            ]
            for r in rows
        ],
    )
    launch = (
        " Calls with pdl=True (programmatic dependent launch); the pdl ceiling is the "
        "same stream launched that way."
        if args.pdl
        else ""
    )
    if args.slot_order:
        launch += " Calls with batch_order=slot_order(slots), computed once per slot set before timing."
    markdown = (
        f"Shape: {shape.label}.{launch} Large-transfer peak ({peak.nbytes / 2**20:g} MiB in "
        f"place): {peak.tbps:.2f} TB/s.\n\n{table}"
    )
    return markdown


def run_spec(args: argparse.Namespace) -> int:
    """bench --tokens: verify calls of each mode and T against their streams and against the
    fastest upstream-grid config of the same run."""
    device = device_from_args(args)
    (shape,) = shapes_from_args(args, device)
    batches = batches_from_args(args, device)
    if min(args.tokens) < 1 or args.window < 1 or args.rounds < 1:
        raise SystemExit("ssmdecode bench: --tokens, --window and --rounds must be >= 1")
    if "dense" in args.params and "replay" in args.mode:
        raise SystemExit("ssmdecode bench: replay takes dt, A and dt_bias tied (not --params dense)")
    if device.type != "cuda":
        print(MEANINGLESS)
    points = list(itertools.product(args.mode, args.tokens, args.params))
    if not _spec_correct(args, shape, min(batches), device, points):
        return 1
    rows: list[dict[str, object]] = []
    for mode, tokens, params in points:
        for batch in batches:
            rows += _time_spec_point(args, shape, device, mode, tokens, params, batch)
    for row in rows:  # against the fastest upstream-grid config of its (mode, T, batch)
        peers = [
            r["us"]
            for r in rows
            if r["upstream_grid"]
            and (r["mode"], r["tokens"], r["params"], r["batch"])
            == (row["mode"], row["tokens"], row["params"], row["batch"])
        ]
        row["best_upstream_grid_us"] = min(peers) if peers else None
        row["vs_best_upstream_grid"] = min(peers) / row["us"] if peers else None

    env = environment(device, args.command_line)
    data = {
        "environment": env,
        "method": {
            **method(),
            "calls": "verify calls of T draft tokens a request "
            "(ssmdecode.bench.spec): buffer = sglang's (intermediate-state buffer, "
            "disable_state_update), dst = vLLM's (num_accepted_tokens, cu_seqlens, "
            "per-token slots), replay = selective_state_replay plus replay_advance a step, "
            "accepted counts uniform in 1..T",
            "bytes_moved": "buffer/dst: (1 + T) states a request; replay: (1 + flush "
            "fraction) states a request plus the rings",
            "ceiling": "buffer/dst: the 1 -> T stream over the call's slots and rows; "
            "replay: read-only stream + flush fraction x (read-write - read-only) + the "
            "rings' bytes at the read-write stream's rate",
            "window": args.window,
            "params": "tied: dt [B, T, H], A [H], D [H], dt_bias [H] expanded over the head dim "
            "(and N for A); dense: A [H, P, N], D and dt_bias [H, P] contiguous, the same values, "
            "dt still tied",
            "rounds": f"each point's configs timed in {args.rounds} interleaved rounds, the median",
            "seed": args.seed,
        },
        "shape": shape.to_dict(),
        "rows": rows,
    }
    markdown = _spec_markdown(shape, points, rows)
    out_dir = results_dir(args.out, device)
    paths = write_outputs(out_dir, "bench", data, markdown)
    series: dict[str, dict[int, float]] = {}
    for r in rows:
        series.setdefault(f"{r['mode']} T={r['tokens']} {r['params']} {r['config']}", {})[r["batch"]] = r[
            "fraction_of_ceiling"
        ]
    paths.append(
        plot_vs_batch(
            out_dir / "bench.png",
            f"verify calls, {shape.label}",
            series,
            ylabel="fraction of the call's own streams",
        )
    )
    print(markdown)
    print("wrote " + ", ".join(map(str, paths)))
    return 0


def _spec_correct(
    args: argparse.Namespace,
    shape: Shape,
    batch: int,
    device: torch.device,
    points: list[tuple[str, int, str]],
) -> bool:
    """Correctness before speed: every config of every (mode, T, params) point against the
    float64 reference at the smallest batch; prints a line each."""
    for mode, tokens, params in points:  # correctness before speed, at the smallest batch
        spec = make_spec_inputs(
            shape,
            batch,
            tokens,
            mode,
            device,
            args.seed,
            rotation=1,
            window=args.window,
            params=params,
            has_z=args.gate,
        )
        for cs in args.config:
            config = cs.resolve(shape, batch, device, mode, tokens, dense=params == "dense")
            ok, line = check_spec_against_reference(spec, config)
            print(f"{'ok  ' if ok else 'FAIL'} {mode} T={tokens} {params} {cs.text} {config.label}: {line}")
            if not ok:
                print("the kernel disagrees with the float64 reference: not timing it")
                return False
    return True


def _time_spec_point(
    args: argparse.Namespace,
    shape: Shape,
    device: torch.device,
    mode: str,
    tokens: int,
    params: str,
    batch: int,
) -> list[dict[str, object]]:
    """One (mode, T, params, batch) point: its streams and ceiling, then every config timed on
    the same inputs in args.rounds interleaved rounds; a row a config."""
    rows: list[dict[str, object]] = []
    spec = make_spec_inputs(
        shape, batch, tokens, mode, device, args.seed, window=args.window, params=params, has_z=args.gate
    )
    streams = measure_spec_ceiling(spec, device)
    flush = flush_fraction(spec) if mode == "replay" else None
    advance = time_spec_advance(spec, device) if mode == "replay" else None
    moved = spec_bytes(shape, batch, tokens, mode, flush or 0.0, args.window)
    if mode == "replay":
        read, rw = streams["read"].us, streams["read_write"].us
        rings = moved - shape.state_bytes(batch) * (1 + flush)
        ceiling_us = read + flush * (rw - read) + rings / (2 * shape.state_bytes(batch)) * rw
    else:
        ceiling_us = streams["fanout"].us
    configs = {
        cs: cs.resolve(shape, batch, device, mode, tokens, dense=params == "dense") for cs in args.config
    }
    rounds = interleaved(
        list(args.config),
        lambda cs, spec=spec, configs=configs: time_spec_config(spec, configs[cs], device),
        args.rounds,
    )
    for cs in args.config:
        config = configs[cs]
        timing = median_timing(rounds[cs])
        rows.append(
            {
                "mode": mode,
                "tokens": tokens,
                "params": params,
                "gate": args.gate,
                "batch": batch,
                "config": cs.text,
                "launch": config.label,
                "launch_config": config.to_dict(),
                "upstream_grid": config.upstream_grid,
                "us": timing.us,
                "bytes_moved": moved,
                "tbps": moved / (timing.us * 1e-6) / 1e12,
                "ceiling_us": ceiling_us,
                "fraction_of_ceiling": ceiling_us / timing.us,
                "streams": {k: t.to_dict() for k, t in streams.items()},
                "flush_fraction": flush,
                # the step's bookkeeping alone, inside "us" (replay)
                "advance_us": None if advance is None else advance.us,
                "window": args.window if mode == "replay" else None,
                "timing": timing.to_dict(),
                "rounds_us": [t.us for t in rounds[cs]],
            }
        )
        log.info(
            "%s T=%d %s %s %s batch %d: %.2f us (ceiling %.2f)",
            mode,
            tokens,
            params,
            cs.text,
            config.label,
            batch,
            timing.us,
            ceiling_us,
        )
    return rows


def _spec_markdown(shape: Shape, points: list[tuple[str, int, str]], rows: list[dict[str, object]]) -> str:
    """bench.md of a verify run: a table a (mode, T, params) point."""
    markdown = f"Shape: {shape.label}. Verify calls, T draft tokens a request.\n\n"
    for mode, tokens, params in points:
        sub = [r for r in rows if (r["mode"], r["tokens"], r["params"]) == (mode, tokens, params)]
        markdown += (
            f"### mode {mode}, T = {tokens}, params {params}\n\n"
            + markdown_table(
                [
                    "config",
                    "launch",
                    "batch",
                    "us",
                    "ceiling us",
                    "% of ceiling",
                    "x best upstream-grid",
                    "flush",
                    "of which bookkeeping, us",
                ],
                [
                    [
                        r["config"],
                        r["launch"],
                        r["batch"],
                        r["us"],
                        r["ceiling_us"],
                        100 * r["fraction_of_ceiling"],
                        r["vs_best_upstream_grid"],
                        r["flush_fraction"],
                        r["advance_us"],
                    ]
                    for r in sub
                ],
            )
            + "\n"
        )
    return markdown
