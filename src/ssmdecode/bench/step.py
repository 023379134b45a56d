"""Timing selective_state_update inside decode steps of a Mamba2 layer stack
(ssmdecode.models.mamba2): the stack and its cold slot sets (StepBench), the kernel's share of
a step's kernel time from torch.profiler (profile_step) and every kernel's times (kernel_times).
`ssmdecode e2e` reports these, `ssmdecode tune --in-model` ranks configs by them,
benchmarks/ncu_model.py profiles them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.autograd import DeviceType

from ssmdecode.bench.timer import Timing, cold_rotation, time_cold
from ssmdecode.config import KERNEL, LaunchConfig
from ssmdecode.models.mamba2 import REPLAY_WINDOW, Mamba2DecodeStack, Mamba2Dims
from ssmdecode.shapes import HEADLINE, PRESETS, Shape

__all__ = [
    "CPU_D_MODEL",
    "PROFILED_STEPS",
    "StepBench",
    "StepVariant",
    "busy_us",
    "kernel_share",
    "kernel_spans",
    "kernel_times",
    "model_dims",
    "profile_step",
    "step_options",
]

PROFILED_STEPS = 5
# The model width under the interpreter (CPU), beside the tiny shape of ssmdecode.shapes.
CPU_D_MODEL = 32

# A step variant beside the plain one: "pdl" (pdl=True) or "order" (slot_order once per step).
StepVariant = str | None


def step_options(variant: StepVariant) -> dict[str, bool]:
    """Mamba2DecodeStack.step's keyword arguments of a variant."""
    return {"pdl": variant == "pdl", "slot_ordered": variant == "order"}


def model_dims(shape: Shape, d_model: int | None, device: torch.device) -> Mamba2Dims:
    """A rank's layer sizes for a kernel shape: d_model if given, else the width of the preset
    the shape was cut from (its name, "nemotron3-super/tp8"), else the headline's on a GPU and
    CPU_D_MODEL on CPU."""
    if d_model is None:
        preset = shape.name.split("/")[0]
        if preset in PRESETS:
            d_model = PRESETS[preset].d_model
        else:
            d_model = PRESETS[HEADLINE[0]].d_model if device.type == "cuda" else CPU_D_MODEL
    return Mamba2Dims(shape=shape, d_model=d_model)


@dataclass
class StepBench:
    """A Mamba2 layer stack whose state pools hold K disjoint slot sets of `batch` slots (K by
    cold_rotation, so each timed step finds its states in HBM; slot 0 stays the null slot),
    and one batch of hidden rows: what `e2e` times, and `tune --in-model`."""

    stack: Mamba2DecodeStack
    hidden: torch.Tensor  # [batch, d_model]
    slot_sets: torch.Tensor  # [K, batch], int64

    @classmethod
    def build(
        cls,
        dims: Mamba2Dims,
        layers: int,
        batch: int,
        device: torch.device,
        seed: int,
        min_sets: int = 1,
        path: str = "table",
        window: int = REPLAY_WINDOW,
    ) -> StepBench:
        """min_sets: at least that many slot sets, where a caller steps on more sets than the
        L2 asks for (benchmarks/ncu_model.py). path, window: the stack's (replay decode: its
        rings hold random tokens and each slot's cursors are drawn from the steady state, a
        ring_start uniform in [0, R) and num_cached uniform in 1 .. window, so that the timed
        steps flush as many slots as serving does, about 1 in window, not all at once)."""
        shape = dims.shape
        conv_bytes = dims.conv_dim * dims.d_conv * shape.dtype.itemsize * batch
        rotation = max(min_sets, cold_rotation(layers * (shape.state_bytes(batch) + conv_bytes), device))
        stack = Mamba2DecodeStack(
            dims, layers, slots=rotation * batch + 1, device=device, seed=seed, path=path, window=window
        )
        gen = torch.Generator(device=device).manual_seed(seed)
        for pool in stack.ssm_state:
            pool.normal_(generator=gen)
        slot_sets = (torch.randperm(rotation * batch, generator=gen, device=device) + 1).view(rotation, batch)
        hidden = torch.randn(batch, dims.d_model, generator=gen, device=device).to(shape.dtype)
        if path != "table":
            for ring in stack.rings:
                ring["x_cache"].normal_(generator=gen)
                ring["B_cache"].normal_(generator=gen)
                ring["dt_cache"].uniform_(0.01, 0.1, generator=gen)
            n = stack.slots
            stack.ring_start.copy_(torch.randint(0, stack.ring, (n,), generator=gen, device=device))
            stack.num_cached.copy_(torch.randint(1, window + 1, (n,), generator=gen, device=device))
        return cls(stack, hidden, slot_sets)

    def time(self, config: LaunchConfig | None, pdl: bool = False, slot_ordered: bool = False) -> Timing:
        """One decode step with config (None: the table), step i on slot set i, by the
        cold-L2 CUDA-graph timer."""
        return time_cold(
            lambda i: self.stack.step(
                self.hidden, self.slot_sets[i], config, pdl=pdl, slot_ordered=slot_ordered
            ),
            self.hidden.device,
            rotation=self.slot_sets.shape[0],
        )


def kernel_share(
    spans: Iterable[tuple[str, float, float]], steps: int, match: str = KERNEL
) -> dict[str, float | None]:
    """From the kernels of `steps` profiled steps, (name, start, end) in device microseconds
    (kernel_spans): the device time during which a kernel whose name contains match runs
    (default the single-token kernel's; "selective_state" takes the replay kernels too), a
    step, the time during which any kernel runs, a step, and the first's share of the second.
    Kernels that overlap (one on a stream beside the call's, or a programmatic-dependent launch
    over its predecessor's tail) count once (busy_us), so the share is of the step's device time."""
    spans = list(spans)
    total = busy_us(spans)
    ssu = busy_us(span for span in spans if match in span[0])
    return {
        "ssu_share": ssu / total if total else None,
        "ssu_us_per_step": ssu / steps if total else None,
        "kernel_us_per_step": total / steps if total else None,
    }


def busy_us(spans: Iterable[tuple[str, float, float]]) -> float:
    """The microseconds covered by the union of the spans' [start, end) intervals."""
    busy, reach = 0.0, float("-inf")
    for _, start, end in sorted(spans, key=lambda span: span[1]):
        if end > reach:
            busy += end - max(start, reach)
            reach = end
    return busy


def kernel_spans(events: Iterable[Any]) -> list[tuple[str, float, float]]:
    """(name, start, end) in device microseconds of each kernel in torch.profiler events. The
    "decode step i" ranges also appear on the GPU timeline, as user annotations that span each
    eager step, launch gaps included: they are not kernels and are left out."""
    return [
        (event.name, event.time_range.start, event.time_range.end)
        for event in events
        if event.device_type == DeviceType.CUDA and not getattr(event, "is_user_annotation", False)
    ]


def profile_step(
    bench: StepBench,
    config: LaunchConfig | None,
    trace: Path | None,
    variant: StepVariant = None,
    match: str = KERNEL,
) -> dict[str, float | None]:
    """PROFILED_STEPS eager steps, step i on slot set i mod K, under torch.profiler: the
    matching kernels' share of the steps' kernel time (kernel_share; None on CPU, where there
    are no kernels).
    trace: also write the profile there as a Chrome trace."""
    prof = _profiled_steps(bench, PROFILED_STEPS, config, variant)
    if trace is not None:
        trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    return kernel_share(kernel_spans(prof.events()), PROFILED_STEPS, match)


def kernel_times(
    bench: StepBench, steps: int, config: LaunchConfig | None = None, variant: StepVariant = None
) -> dict[str, list[float]]:
    """`steps` eager steps, step i on slot set i mod K, under torch.profiler: each kernel's
    device times, us a launch in launch order, by kernel name (empty on CPU, where there are no
    kernels). What a step's time is spent on, kernel by kernel (benchmarks/results/
    NVIDIA_H100_80GB_HBM3/e2e-small-step/)."""
    times: dict[str, list[float]] = {}
    for name, start, end in kernel_spans(_profiled_steps(bench, steps, config, variant).events()):
        times.setdefault(name, []).append(end - start)
    return times


def _profiled_steps(
    bench: StepBench, steps: int, config: LaunchConfig | None, variant: StepVariant
) -> torch.profiler.profile:
    """The profile of `steps` eager steps of bench, each in a "decode step i" range."""
    hidden, slot_sets = bench.hidden, bench.slot_sets
    activities = [torch.profiler.ProfilerActivity.CPU]
    if hidden.is_cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for i in range(steps):
            with torch.profiler.record_function(f"decode step {i}"):
                bench.stack.step(hidden, slot_sets[i % slot_sets.shape[0]], config, **step_options(variant))
        if hidden.is_cuda:
            torch.cuda.synchronize(hidden.device)
    return prof
