"""Timing selective_state_update calls by the bench method (docs/measuring.md: cold L2 by
rotation, CUDA graph, median of 5 repeats): the inputs of a timed call, one config's time, and
its row of a report against the same-bytes ceiling. `bench`, `sweep`, `tune` and the scripts
under benchmarks/ time calls with these.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ssmdecode.bench.ceiling import Ceiling, bandwidth_tbps
from ssmdecode.bench.inputs import DecodeInputs, make_shape_inputs
from ssmdecode.bench.timer import Timing, cold_rotation, time_cold
from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update import selective_state_update, slot_order
from ssmdecode.shapes import Shape

__all__ = ["bench_row", "call_orders", "time_config", "timing_inputs"]


def timing_inputs(
    shape: Shape, batch: int, device: torch.device, seed: int, pdl: bool = False
) -> DecodeInputs:
    """Inputs whose K slot sets of batch slots hold at least 3x the L2 together (at least 2 sets
    for pdl calls: cold_rotation)."""
    rotation = cold_rotation(shape.state_bytes(batch), device, pdl)
    return make_shape_inputs(shape, batch, device, seed, rotation=rotation)


def call_orders(inputs: DecodeInputs, slot_ordered: bool) -> list[torch.Tensor | None]:
    """Each call's batch_order: slot_order of its slot set when slot_ordered, else None."""
    return [slot_order(slots) if slot_ordered else None for slots in inputs.slot_sets]


def time_config(
    inputs: DecodeInputs,
    config: LaunchConfig,
    device: torch.device,
    fn: Callable[..., torch.Tensor] | None = None,
    slot_ordered: bool = False,
) -> Timing:
    """One call's time with config, call i on slot set i mod K (updates inputs.state). fn:
    the kernel (ssmdecode.bench.kernels.kernel_function; default ssmdecode's). slot_ordered:
    pass batch_order=slot_order(slots of call i), computed before timing, as an engine computes
    it once per decode step for all layers."""
    fn = fn or selective_state_update
    orders = call_orders(inputs, slot_ordered)
    extra = [{"batch_order": order} if order is not None else {} for order in orders]
    return time_cold(
        lambda i: fn(**inputs.kwargs(i), config=config, **extra[i]), device, rotation=inputs.rotation
    )


def bench_row(
    shape: Shape, batch: int, timing: Timing, ceiling: Ceiling, gather: Timing | None = None
) -> dict[str, object]:
    """One measured (config, batch) against its same-bytes ceiling, and against the gather
    ceiling of its slots when given."""
    moved = 2 * shape.state_bytes(batch)
    return {
        "batch": batch,
        "us": timing.us,
        "tbps": bandwidth_tbps(moved, timing.us),
        "bytes_moved": moved,
        "ceiling_us": ceiling.us,
        "ceiling_tbps": ceiling.tbps,
        "fraction_of_ceiling": ceiling.us / timing.us,
        "timing": timing.to_dict(),
        **(
            {"gather_ceiling_us": gather.us, "fraction_of_gather_ceiling": gather.us / timing.us}
            if gather is not None
            else {}
        ),
        **(
            {
                "pdl_ceiling_us": ceiling.timings["triton_pdl"].us,
                "fraction_of_pdl_ceiling": ceiling.timings["triton_pdl"].us / timing.us,
            }
            if "triton_pdl" in ceiling.timings
            else {}
        ),
    }
