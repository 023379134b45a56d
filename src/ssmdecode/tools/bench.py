"""`ssmdecode bench`: microseconds, TB/s and the fraction of the same-bytes ceiling of
selective_state_update, per launch config and batch size, by the method of
../shared/MEASURING.md (cold L2 by rotation, CUDA graph, median of 5 repeats).

Bytes that must move: the state, read once and written once: 2 x batch x H x P x N x elem
size. Each batch is held to the ceiling measured in the same run (ssmdecode.bench.ceiling);
the large-transfer peak is reported beside it, and the gather ceiling: the same stream over the
call's own slots, what their places in the pool allow.
"""

from __future__ import annotations

import argparse
import functools
import logging
from collections.abc import Callable

import torch

from ssmdecode import selective_state_update, slot_order
from ssmdecode.bench.ceiling import (
    Ceiling,
    bandwidth_tbps,
    measure_ceiling,
    measure_gather_ceiling,
    measure_peak,
)
from ssmdecode.bench.inputs import DecodeInputs, make_shape_inputs
from ssmdecode.bench.presets import Shape
from ssmdecode.bench.timer import Timing, cold_rotation, method, time_cold
from ssmdecode.config import LaunchConfig
from ssmdecode.tools import (
    ConfigSpec,
    add_batch_argument,
    add_common_arguments,
    add_shape_arguments,
    batches_from_args,
    device_from_args,
    shapes_from_args,
)
from ssmdecode.tools.report import (
    MEANINGLESS,
    environment,
    markdown_table,
    plot_vs_batch,
    results_dir,
    write_outputs,
)
from ssmdecode.tools.verify import against_reference, fresh_inputs, reference_result

__all__ = ["check_against_reference", "time_config", "timing_inputs"]

log = logging.getLogger(__name__)

GPU_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
CPU_BATCHES = (1, 3)


def timing_inputs(shape: Shape, batch: int, device: torch.device, seed: int,
                  pdl: bool = False) -> DecodeInputs:
    """Inputs whose K slot sets of batch slots hold at least 3x the L2 together (at least 2 sets
    for pdl calls: cold_rotation)."""
    rotation = cold_rotation(shape.state_bytes(batch), device, pdl)
    return make_shape_inputs(shape, batch, pool=rotation * batch, device=device, seed=seed)


def call_orders(inputs: DecodeInputs, slot_ordered: bool) -> list[torch.Tensor | None]:
    """Each call's batch_order: slot_order of its slot set when slot_ordered, else None."""
    return [slot_order(slots) if slot_ordered else None for slots in inputs.slot_sets]


def time_config(inputs: DecodeInputs, config: LaunchConfig, device: torch.device,
                fn: Callable[..., torch.Tensor] | None = None,
                slot_ordered: bool = False) -> Timing:
    """One call's time with config, call i on slot set i mod K (updates inputs.state). fn:
    the kernel (ssmdecode.tools.kernels.kernel_function; default ssmdecode's). slot_ordered:
    pass batch_order=slot_order(slots of call i), computed before timing, as an engine computes
    it once per decode step for all layers."""
    fn = fn or selective_state_update
    orders = call_orders(inputs, slot_ordered)
    extra = [{"batch_order": order} if order is not None else {} for order in orders]
    return time_cold(lambda i: fn(**inputs.kwargs(i), config=config, **extra[i]), device,
                     rotation=inputs.rotation)


def bench_row(shape: Shape, batch: int, timing: Timing, ceiling: Ceiling,
              gather: Timing | None = None) -> dict[str, object]:
    """One measured (config, batch) against its same-bytes ceiling, and against the gather
    ceiling of its slots when given."""
    moved = 2 * shape.state_bytes(batch)
    return {
        "batch": batch, "us": timing.us, "tbps": bandwidth_tbps(moved, timing.us),
        "bytes_moved": moved, "ceiling_us": ceiling.us, "ceiling_tbps": ceiling.tbps,
        "fraction_of_ceiling": ceiling.us / timing.us, "timing": timing.to_dict(),
        **({"gather_ceiling_us": gather.us, "fraction_of_gather_ceiling": gather.us / timing.us}
           if gather is not None else {}),
        **({"pdl_ceiling_us": ceiling.timings["triton_pdl"].us,
            "fraction_of_pdl_ceiling": ceiling.timings["triton_pdl"].us / timing.us}
           if "triton_pdl" in ceiling.timings else {}),
    }


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
                   help="configs: default, table, upstream or BM,W[,slot][,evict] "
                   "(default: upstream default table)")
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
