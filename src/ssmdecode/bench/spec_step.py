"""Timing speculative decoding's verify steps through a Mamba2 layer stack
(ssmdecode.models.mamba2_spec), for `ssmdecode e2e --spec`: a stack a path (the intermediate-
state path, or replay), K disjoint slot sets so that each timed step finds its states in HBM,
accepted counts drawn per request and step, the cold-L2 CUDA-graph timer; and the SSM kernels'
share of a step's kernel time from torch.profiler.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssmdecode.bench.step import kernel_share, kernel_spans
from ssmdecode.bench.timer import Timing, cold_rotation, time_cold
from ssmdecode.config import LaunchConfig
from ssmdecode.models.mamba2 import Mamba2Dims
from ssmdecode.models.mamba2_spec import Mamba2VerifyStack

__all__ = ["SSM_KERNELS", "SpecStepBench"]

# The kernels whose time is the SSM's share: the single-token, multi-token and replay kernels.
SSM_KERNELS = "selective_state"
PROFILED_STEPS = 5


@dataclass
class SpecStepBench:
    """One path's stack with K slot sets of `batch` requests (slot 0 the null slot), hidden
    rows [batch, T, d] and accepted counts [K, batch] (uniform in 1 .. T)."""

    stack: Mamba2VerifyStack
    hidden: torch.Tensor
    slot_sets: torch.Tensor
    accepted: torch.Tensor

    @classmethod
    def build(
        cls,
        dims: Mamba2Dims,
        layers: int,
        batch: int,
        tokens: int,
        path: str,
        device: torch.device,
        seed: int,
        window: int = 8,
    ) -> SpecStepBench:
        shape = dims.shape
        per_step = layers * batch * shape.state_bytes(1) * (1 + tokens if path == "buffer" else 1)
        rotation = cold_rotation(per_step, device)
        stack = Mamba2VerifyStack(dims, layers, rotation * batch + 1, tokens, path, device, seed, window)
        gen = torch.Generator(device=device).manual_seed(seed)
        for pool in stack.ssm_state:
            pool.normal_(generator=gen)
        slot_sets = (torch.randperm(rotation * batch, generator=gen, device=device) + 1).view(rotation, batch)
        hidden = torch.randn(batch, tokens, dims.d_model, generator=gen, device=device).to(shape.dtype)
        accepted = torch.randint(1, tokens + 1, (rotation, batch), generator=gen, device=device)
        return cls(stack, hidden, slot_sets, accepted)

    def step(self, i: int, config: LaunchConfig | None) -> None:
        """Verify step i (slot set i mod K) and the acceptance of its drafts."""
        i %= self.slot_sets.shape[0]
        self.stack.verify(self.hidden, self.slot_sets[i], config)
        self.stack.accept(self.slot_sets[i], self.accepted[i])

    def time(self, config: LaunchConfig | None) -> Timing:
        """A verify step with its acceptance, by the cold-L2 CUDA-graph timer."""
        return time_cold(lambda i: self.step(i, config), self.hidden.device, rotation=self.slot_sets.shape[0])

    def mean_accepted(self) -> float:
        """Tokens a request gains a step: the mean accepted count."""
        return float(self.accepted.float().mean())

    def profile(self, config: LaunchConfig | None) -> dict[str, float | None]:
        """PROFILED_STEPS eager steps under torch.profiler: the SSM kernels' device time a step
        and its share of all kernels' (None on CPU)."""
        activities = [torch.profiler.ProfilerActivity.CPU]
        on_gpu = self.hidden.is_cuda
        if on_gpu:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            for i in range(PROFILED_STEPS):
                self.step(i, config)
            if on_gpu:
                torch.cuda.synchronize(self.hidden.device)
        share = kernel_share(kernel_spans(prof.events()), PROFILED_STEPS, SSM_KERNELS)
        return {
            "ssm_share": share["ssu_share"],
            "ssm_us_per_step": share["ssu_us_per_step"],
            "kernel_us_per_step": share["kernel_us_per_step"],
        }
