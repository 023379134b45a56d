"""Running a launch config and comparing what it wrote: bit for bit against another config (how
`verify`, `sweep` and `tune` decide which configs are identical to upstream_config), or
against the float64 reference within ssmdecode.numerics.TOLERANCES (how `bench` checks a
config before timing it, and `verify --tolerance`).

Every comparison covers out and the whole written state pool after one call from the same
inputs and initial state; out is NaN-poisoned first, so unwritten output shows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from ssmdecode.bench.inputs import DecodeInputs, make_shape_inputs
from ssmdecode.config import LaunchConfig
from ssmdecode.numerics import BitDiff, ToleranceCheck, bit_diff, tolerance_check
from ssmdecode.ops.selective_state_update import selective_state_update, selective_state_update_reference
from ssmdecode.shapes import Shape

__all__ = [
    "STRICT_OUT_DTYPE",
    "Comparison",
    "against_reference",
    "compare_results",
    "compare_to",
    "fresh_inputs",
    "reference_result",
    "run_config",
]

# The dtype out is compared in. A bf16 out rounds a changed row-sum order away in all but a
# few elements: on the H200, (8,1) at dstate 256 and (16,4) with a bf16 state passed a bf16
# comparison at one shape, then differed at 84 of the 920 seed-grid points. Stored as float32,
# out shows the row sum's own bits, so any change of order shows at once.
STRICT_OUT_DTYPE = torch.float32


@dataclass(frozen=True)
class Comparison:
    """out and the whole written state pool of two runs, compared."""

    out: BitDiff
    state: BitDiff

    @property
    def identical(self) -> bool:
        return self.out.identical and self.state.identical

    def to_dict(self) -> dict[str, object]:
        return {"identical": self.identical, "out": asdict(self.out), "state": asdict(self.state)}


def fresh_inputs(shape: Shape, batch: int, device: torch.device, seed: int) -> DecodeInputs:
    """Inputs of one comparison: one slot set on a pool with one slot more than the batch, so
    a write to a slot no row owns shows in the state comparison."""
    return make_shape_inputs(shape, batch, device, seed, pool=batch + 1, rotation=1)


def run_config(
    inputs: DecodeInputs,
    config: LaunchConfig,
    *,
    last: bool = False,
    out_dtype: torch.dtype | None = None,
    fn: Callable[..., torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, state pool) after one call with config, with a NaN-poisoned out so unwritten
    output shows. The call runs on a copy of inputs' initial state, so the inputs stay
    reusable; last=True runs on inputs.state itself (the inputs' last use), which saves
    copying the pool: at the seed grid's largest points the pool is 4 GiB. out_dtype: the
    dtype out is stored in (default: the inputs', as a model stores it). fn: the kernel
    (ssmdecode.bench.kernels.kernel_function; default ssmdecode's)."""
    state = inputs.state if last else inputs.state.clone()
    out = torch.full(
        inputs.out.shape, float("nan"), dtype=out_dtype or inputs.out.dtype, device=inputs.out.device
    )
    (fn or selective_state_update)(**inputs.kwargs(0, state=state, out=out), config=config)
    return out, state


def compare_results(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> Comparison:
    """Compare two run_config results."""
    return Comparison(out=bit_diff(a[0], b[0]), state=bit_diff(a[1], b[1]))


def compare_to(
    reference: LaunchConfig,
    configs: list[LaunchConfig],
    shape: Shape,
    batch: int,
    device: torch.device,
    seed: int,
    out_dtype: torch.dtype = STRICT_OUT_DTYPE,
    fn: Callable[..., torch.Tensor] | None = None,
) -> dict[LaunchConfig, Comparison]:
    """Each config against reference, bit for bit, every run from the same fresh inputs and
    initial state, out stored in out_dtype (default float32: the strict check)."""
    inputs = fresh_inputs(shape, batch, device, seed)
    want = run_config(inputs, reference, out_dtype=out_dtype, fn=fn)
    return {
        config: compare_results(want, run_config(inputs, config, out_dtype=out_dtype, fn=fn))
        for config in configs
    }


def reference_result(inputs: DecodeInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, state pool) of the float64 reference for call 0 of inputs."""
    kwargs = inputs.kwargs(0)
    del kwargs["out"]
    return selective_state_update_reference(**kwargs, compute_dtype=torch.float64)


def against_reference(
    inputs: DecodeInputs,
    config: LaunchConfig,
    want: tuple[torch.Tensor, torch.Tensor],
    *,
    last: bool = False,
    fn: Callable[..., torch.Tensor] | None = None,
) -> dict[str, ToleranceCheck]:
    """out and the written state of one call with config (fn: the kernel, default ssmdecode's)
    against want, the float64 reference_result of the same inputs: {"out": ..., "state": ...}."""
    got = run_config(inputs, config, last=last, fn=fn)
    return {"out": tolerance_check(got[0], want[0]), "state": tolerance_check(got[1], want[1])}
