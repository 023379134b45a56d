"""`ssmdecode bench`: microseconds, TB/s and the fraction of the same-bytes ceiling of
selective_state_update, per launch config and batch size, by the method of docs/measuring.md
(cold L2 by rotation, CUDA graph, median of 5 repeats).

Bytes that must move: the state, read once and written once: 2 x batch x H x P x N x elem
size. Each batch is held to the ceiling measured in the same run (ssmdecode.bench.ceiling);
the large-transfer peak is reported beside it, and the gather ceiling: the same stream over the
call's own slots, what their places in the pool allow.
"""

from __future__ import annotations

import argparse
import functools
import logging

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
from ssmdecode.bench.timer import Timing, method
from ssmdecode.cli_args import (
    ConfigSpec,
    add_batch_argument,
    add_common_arguments,
    add_shape_arguments,
    batches_from_args,
    device_from_args,
    shapes_from_args,
)
from ssmdecode.shapes import Shape

__all__ = ["add_parser", "check_against_reference", "run"]

log = logging.getLogger(__name__)

GPU_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
CPU_BATCHES = (1, 3)


def check_against_reference(
    shape: Shape, batch: int, specs: list[ConfigSpec], device: torch.device, seed: int
) -> list[tuple[str, bool, str]]:
    """Correctness before speed: each config's out and written state against the float64
    reference at one batch, within verify's tolerances. (label, within, summary) per config."""
    inputs = fresh_inputs(shape, batch, device, seed)
    want = reference_result(inputs)
    results = []
    for spec in specs:
        config = spec.resolve(shape, batch, device)
        checks = against_reference(inputs, config, want)
        out, state = checks["out"], checks["state"]
        results.append((f"{spec.text} {config.label}", out.within and state.within,
                        f"vs float64 reference at batch {batch}: out max abs diff "
                        f"{out.max_abs:.2e} ({out.worst_excess:.2f}x tolerance), state "
                        f"{state.max_abs:.2e} ({state.worst_excess:.2f}x)"))
    return results


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench", help="time launch configs against the same-bytes ceiling",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_arguments(p)
    add_batch_argument(p, GPU_BATCHES, CPU_BATCHES)
    p.add_argument("--config", type=ConfigSpec.parse, nargs="+",
                   default=[ConfigSpec("upstream"), ConfigSpec("default"), ConfigSpec("table")],
                   help=f"configs: {ConfigSpec.HELP} (default: upstream default table)")
    p.add_argument("--slot-order", action="store_true",
                   help="call with batch_order=slot_order(slots), computed before timing (once "
                   "per decode step in an engine): the state pool read in memory order")
    p.add_argument("--pdl", action="store_true",
                   help="call with pdl=True (programmatic dependent launch, sm_90+): each call "
                   "of the graph may start under the previous one's tail; the ceiling is also "
                   "timed launched that way (the pdl ceiling), and every rotation holds at "
                   "least 2 slot sets, so that no call reads what the call before it writes")
    add_common_arguments(p, "folder for bench.json, bench.md and bench.png "
                         "(default benchmarks/results/<device_key>/)")


def run(args: argparse.Namespace) -> int:
    device = device_from_args(args)
    (shape,) = shapes_from_args(args, device)
    batches = batches_from_args(args, device)
    if device.type != "cuda":
        print(MEANINGLESS)

    checks = check_against_reference(shape, min(batches), args.config, device, args.seed)
    for label, ok, line in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {label}: {line}")
    if not all(ok for _, ok, _ in checks):
        print("the kernel disagrees with the float64 reference: not timing it")
        return 1

    kernel = functools.partial(selective_state_update, pdl=args.pdl)
    peak = measure_peak(device)
    rows: list[dict[str, object]] = []
    ceilings: dict[int, Ceiling] = {}
    gathers: dict[int, Timing] = {}
    for batch in batches:
        inputs = timing_inputs(shape, batch, device, args.seed, args.pdl)
        ceilings[batch] = measure_ceiling(shape.state_bytes(batch), device, pdl=args.pdl)
        gathers[batch] = measure_gather_ceiling(inputs.state, inputs.slot_sets,
                                                call_orders(inputs, args.slot_order))
        for spec in args.config:
            config = spec.resolve(shape, batch, device)
            timing = time_config(inputs, config, device, kernel, args.slot_order)
            rows.append({"config": spec.text, "launch": config.label,
                         "launch_config": config.to_dict(),
                         **bench_row(shape, batch, timing, ceilings[batch], gathers[batch])})
            log.info("%s %s batch %d: %.2f us", spec.text, config.label, batch, timing.us)
        del inputs

    env = environment(device, args.command_line)
    data = {
        "environment": env,
        "method": {**method(), "bytes_moved": "2 x batch x H x P x N x state elem size",
                   "ceiling": "in-place x *= 1.0000001 over the same bytes, same rotation "
                   "and timer; 'triton' is the ceiling, 'torch' (mul_) the cross-check",
                   "gather_ceiling": "the same stream over each call's own slots of its state "
                   "pool (in the call's order, unchanged bits), same rotation and timer: what "
                   "the slots allow without math",
                   "inputs": "model-like (ssmdecode.bench.inputs)", "seed": args.seed,
                   "pdl": args.pdl, "slot_order": args.slot_order},
        "shape": shape.to_dict(),
        "peak": peak.to_dict(),
        "ceilings": {str(b): c.to_dict() for b, c in ceilings.items()},
        "gather_ceilings": {str(b): t.to_dict() for b, t in gathers.items()},
        "rows": rows,
    }
    pdl_columns = all("pdl_ceiling_us" in r for r in rows)  # --pdl on a GPU
    table = markdown_table(
        ["config", "launch", "batch", "us", "TB/s", "ceiling us", "ceiling TB/s",
         "% of ceiling", "gather ceiling us", "% of gather ceiling",
         *(["pdl ceiling us", "% of pdl ceiling"] if pdl_columns else [])],
        [[r["config"], r["launch"], r["batch"], r["us"], r["tbps"], r["ceiling_us"],
          r["ceiling_tbps"], 100 * r["fraction_of_ceiling"], r["gather_ceiling_us"],
          100 * r["fraction_of_gather_ceiling"],
          *([r["pdl_ceiling_us"], 100 * r["fraction_of_pdl_ceiling"]] if pdl_columns else [])]
         for r in rows],
    )
    launch = (" Calls with pdl=True (programmatic dependent launch); the pdl ceiling is the "
              "same stream launched that way." if args.pdl else "")
    if args.slot_order:
        launch += (" Calls with batch_order=slot_order(slots), computed once per slot set "
                   "before timing.")
    markdown = (f"Shape: {shape.label}.{launch} Large-transfer peak ({peak.nbytes / 2**20:g} MiB in "
                f"place): {peak.tbps:.2f} TB/s.\n\n{table}")
    out_dir = results_dir(args.out, device)
    paths = write_outputs(out_dir, "bench", data, markdown)
    series: dict[str, dict[int, float]] = {}
    for r in rows:
        series.setdefault(r["config"], {})[r["batch"]] = r["tbps"]
    paths.append(plot_vs_batch(out_dir / "bench.png", f"selective_state_update, {shape.label}",
                               series, {b: c.tbps for b, c in ceilings.items()}, peak.tbps))
    print(markdown)
    print("wrote " + ", ".join(map(str, paths)))
    if device.type != "cuda":
        print(MEANINGLESS + " Timings need a GPU.")
    return 0
