"""What the family's launchers share: the kernel variants of the same bits, a prepared launch,
the constexprs every kernel derives from its arguments, and the range check of the ordered row
sum."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import triton

from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update.checks import interpreted
from ssmdecode.ops.selective_state_update.common import ORDERED_MAX_N, ORDERED_MIN_N

__all__ = [
    "HEURISTICS",
    "Launch",
    "Variant",
    "check_ordered_sum",
    "given",
    "named_strides",
    "run_on",
    "strides",
    "tile_launch",
    "update_arguments",
]


@dataclass(frozen=True)
class Variant:
    """Kernel variants that keep the bits, for the tests that show they do and for
    explorations that time them (the product always runs the default): masked_vectors, the
    vectors masked even where the tile divides (the code of uneven tiles); strided_rows, the
    state tile addressed by its runtime strides even where the pool's rows are packed."""

    masked_vectors: bool = False
    strided_rows: bool = False


class Launch(NamedTuple):
    """One kernel launch, prepared: kernel[grid](*args, **kwargs), after the launch before (a
    kernel whose output it reads, e.g. the fast replay route's Grams) and before the launch
    after (a kernel that writes what it read, e.g. the fast route's flush kernel), where there
    are such; beside, a launch that touches nothing the others do, on a stream of its own from
    the call's start to its end (on the CPU, under the interpreter, before the others)."""

    kernel: Any
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    before: Launch | None = None
    after: Launch | None = None
    beside: Launch | None = None

    def run(self) -> None:
        if self.beside is None:
            self._run_chain()
        elif interpreted():  # (run_on admits CPU tensors only there): one after the other
            self.beside.run()
            self._run_chain()
        else:  # beside on a stream of its own, after what came before the call, joined after
            current = torch.cuda.current_stream()
            side = _side_stream(current.device)
            side.wait_stream(current)
            with torch.cuda.stream(side):
                self.beside.run()
            self._run_chain()
            current.wait_stream(side)

    def _run_chain(self) -> None:
        if self.before is not None:
            self.before.run()
        self.kernel[self.grid](*self.args, **self.kwargs)
        if self.after is not None:
            self.after.run()


# The side stream's priority (torch's: lower is higher, -1 the highest it gives every
# device): a launch beside runs at a higher priority than the call's stream, meant to have its
# programs dispatched as soon as the GPU has room (CUDA graphs keep each kernel's priority:
# torch instantiates them with cudaGraphInstantiateFlagUseNodePriority). On the H200 the fast
# route's decode step beside took the same time at 0 and -1 (runs 126-127,
# benchmarks/results/NVIDIA_H200/fast-decode-beside/).
SIDE_PRIORITY = -1
_SIDE_STREAMS: dict[tuple[torch.device, int], torch.cuda.Stream] = {}


def _side_stream(device: torch.device) -> torch.cuda.Stream:
    """The stream a device's launches beside run on (Launch.beside): one for the process."""
    key = (device, SIDE_PRIORITY)
    if key not in _SIDE_STREAMS:
        _SIDE_STREAMS[key] = torch.cuda.Stream(device, priority=SIDE_PRIORITY)
    return _SIDE_STREAMS[key]


def tile_launch(
    kernel: Any,
    config: LaunchConfig,
    headdim: int,
    nheads: int,
    batch: int,
    arguments: dict[str, Any],
    flags: dict[str, Any],
    pdl: bool,
) -> Launch:
    """The launch of one of the family's tile kernels, its arguments and flags by keyword (the
    kernel's parameter names): a program per BLOCK_M rows of a (request, head), grid (P blocks,
    H, B) with config.slot_major, else (P blocks, B, H); with pdl=True launched
    programmatic-dependent, and config's register cap if it has one."""
    flags = dict(flags)
    if pdl:
        flags["launch_pdl"] = True
    if config.max_registers is not None:
        flags["maxnreg"] = config.max_registers
    n_mblocks = triton.cdiv(headdim, config.block_m)
    grid = (n_mblocks, nheads, batch) if config.slot_major else (n_mblocks, batch, nheads)
    return Launch(kernel, grid, (), {**arguments, **flags})


def run_on(device: torch.device, launch: Launch | None) -> None:
    """Run a prepared launch (None: nothing to do) on the device of the call's state; CPU
    tensors run only under Triton's interpreter."""
    if device.type != "cuda" and not interpreted():
        raise ValueError(
            f"state is on {device}, but Triton compiles for the GPU here: CPU tensors run only "
            "under Triton's interpreter (TRITON_INTERPRET=1 set before ssmdecode is imported)"
        )
    if launch is None:
        return
    if device.type == "cuda":
        with torch.cuda.device(device):
            launch.run()
    else:  # CPU tensors: Triton's interpreter; no CUDA API may be touched
        launch.run()


def given(**flags: str) -> dict[str, Callable[[dict[str, Any]], bool]]:
    """Triton heuristics FLAG=pointer: each constexpr FLAG says whether that optional pointer
    argument was passed (not None)."""
    return {flag: (lambda args, name=name: args[name] is not None) for flag, name in flags.items()}


# The constexprs every kernel of the family derives from its arguments; each kernel adds its own.
HEURISTICS = {
    **given(HAS_DT_BIAS="p_dt_bias", HAS_D="p_D", HAS_Z="p_z", HAS_SRC_IDX="p_src_idx", STOCHASTIC="p_seed"),
    "BLOCK_N": lambda args: triton.next_power_of_2(args["dstate"]),
}


def strides(t: torch.Tensor | None, ndim: int) -> tuple[int, ...]:
    return t.stride() if t is not None else (0,) * ndim


def named_strides(name: str, t: torch.Tensor | None, dims: str) -> dict[str, int]:
    """A kernel's stride arguments of one tensor by keyword: stride_<name>_<dim> for each letter
    of dims (its dimensions in order), 0 for a tensor not given."""
    return {f"stride_{name}_{d}": s for d, s in zip(dims, strides(t, len(dims)), strict=True)}


def update_arguments(call: Any, pad_slot_id: int, token: str) -> dict[str, Any]:
    """The arguments the single-token and the verify kernels take alike, by keyword, from a
    checked call (checks.Call): the pointers of the state, the inputs, out, the slot indices and
    the seed; the sizes; the strides of the state and the per-head parameters, and of the
    per-request tensors with token "" (the single-token layout [B, ...]) or "t" ([B, T, ...])."""
    state = call.state
    return dict(
        p_state=state,
        p_x=call.x,
        p_dt=call.dt,
        p_dt_bias=call.dt_bias,
        p_A=call.A,
        p_B=call.B,
        p_C=call.C,
        p_D=call.D,
        p_z=call.z,
        p_out=call.out,
        p_src_idx=call.src_idx,
        p_dst_idx=call.dst_idx,
        p_seed=call.rand_seed,
        headdim=state.shape[-2],
        dstate=state.shape[-1],
        pad_slot_id=pad_slot_id,
        **named_strides("state", state, "shpn"),
        **named_strides("x", call.x, f"b{token}hp"),
        **named_strides("dt", call.dt, f"b{token}hp"),
        **named_strides("dt_bias", call.dt_bias, "hp"),
        **named_strides("A", call.A, "hpn"),
        **named_strides("B", call.B, f"b{token}gn"),
        **named_strides("C", call.C, f"b{token}gn"),
        **named_strides("D", call.D, "hp"),
        **named_strides("z", call.z, f"b{token}hp"),
        **named_strides("out", call.out, f"b{token}hp"),
    )


def check_ordered_sum(config: LaunchConfig, block_n: int, dstate: int) -> None:
    """The ordered row sum is defined for 16 <= next_power_of_2(dstate) <= 256."""
    if config.ordered_sum and not ORDERED_MIN_N <= block_n <= ORDERED_MAX_N:
        raise ValueError(
            f"config {config.label} sums rows in the upstream order, which is defined for "
            f"{ORDERED_MIN_N} <= dstate <= {ORDERED_MAX_N}; got dstate {dstate}"
        )


@dataclass(frozen=True)
class ReplayCall:
    """A checked replay call as both replay kernels take it (the exact route's and the fast
    one's), built once by replay.prepare: the tensors with x, dt, B, C, z, out as [B', T', ...]
    (a packed call as one row), the sizes and the launch's choices."""

    state: torch.Tensor
    x_cache: torch.Tensor
    B_cache: torch.Tensor
    dt_cache: torch.Tensor
    ring_start: torch.Tensor | None
    num_cached: torch.Tensor
    x: torch.Tensor
    dt: torch.Tensor
    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    D: torch.Tensor | None
    z: torch.Tensor | None
    dt_bias: torch.Tensor | None
    out: torch.Tensor
    state_batch_indices: torch.Tensor | None
    cu_seqlens: torch.Tensor | None
    rand_seed: torch.Tensor | None
    pad_slot_id: int
    tokens: int
    ring: int
    dt_softplus: bool
    fast_exp: bool
    philox_rounds: int
    config: LaunchConfig
    pdl: bool
    flush: bool

    @property
    def requests(self) -> int:
        """The call's requests: x's rows, or cu_seqlens' spans when packed."""
        return self.x.shape[0] if self.cu_seqlens is None else self.cu_seqlens.shape[0] - 1

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments both kernels take: pointers p_<tensor>, sizes, strides
        stride_<tensor>_<dim>."""
        headdim, dstate = self.state.shape[-2:]
        kwargs: dict[str, Any] = dict(
            p_state=self.state,
            p_x_cache=self.x_cache,
            p_B_cache=self.B_cache,
            p_dt_cache=self.dt_cache,
            p_ring_start=self.ring_start,
            p_cached=self.num_cached,
            p_x=self.x,
            p_dt=self.dt,
            p_dt_bias=self.dt_bias,
            p_A=self.A,
            p_B=self.B,
            p_C=self.C,
            p_D=self.D,
            p_z=self.z,
            p_out=self.out,
            p_src_idx=self.state_batch_indices,
            p_cu_seqlens=self.cu_seqlens,
            p_seed=self.rand_seed,
            headdim=headdim,
            dstate=dstate,
            pad_slot_id=self.pad_slot_id,
            total_tokens=self.x.shape[1],
            ring=self.ring,
        )
        named = (
            ("state", self.state, "s", "h", "p", "n"),
            ("xc", self.x_cache, "s", "h", "r", "p"),
            ("Bc", self.B_cache, "s", "g", "r", "n"),
            ("dtc", self.dt_cache, "s", "h", "r"),
            ("x", self.x, "b", "t", "h", "p"),
            ("B", self.B, "b", "t", "g", "n"),
            ("C", self.C, "b", "t", "g", "n"),
            ("out", self.out, "b", "t", "h", "p"),
        )
        for name, t, *dims in named:
            kwargs.update({f"stride_{name}_{d}": s for d, s in zip(dims, t.stride(), strict=True)})
        kwargs.update(zip(("stride_dt_b", "stride_dt_t", "stride_dt_h"), self.dt.stride()[:3], strict=True))
        kwargs.update(zip(("stride_D_h", "stride_D_p"), strides(self.D, 2), strict=True))
        kwargs.update(
            zip(("stride_z_b", "stride_z_t", "stride_z_h", "stride_z_p"), strides(self.z, 4), strict=True)
        )
        kwargs.update(
            stride_dt_bias_h=0 if self.dt_bias is None else self.dt_bias.stride(0),
            stride_A_h=self.A.stride(0),
            stride_src_idx=0 if self.state_batch_indices is None else self.state_batch_indices.stride(0),
        )
        return kwargs

    def launch(self, kernel: Any, arguments: dict[str, Any], flags: dict[str, Any]) -> Launch:
        """kernel launched by keyword with the call's arguments and these of its own, the flags
        both kernels take and these: a program per BLOCK_M rows of a (request, head)."""
        config, state = self.config, self.state
        nheads, headdim, dstate = state.shape[1:]
        block_n = triton.next_power_of_2(dstate)
        shared = dict(
            T=self.tokens,
            WINDOW=self.ring - self.tokens,
            FLUSH=self.flush,
            HEADS_PER_GROUP=nheads // self.B.shape[-2],
            DT_SOFTPLUS=self.dt_softplus,
            EVEN_M=headdim % config.block_m == 0,
            EVEN_N=dstate == block_n,
            PACKED_ROWS=state.stride(-1) == 1 and state.stride(-2) == block_n,
            FAST_EXP=self.fast_exp,
            PHILOX_ROUNDS=self.philox_rounds if self.rand_seed is not None else 0,
            BLOCK_M=config.block_m,
            SLOT_MAJOR=config.slot_major,
            EVICT_FIRST=config.evict_first,
            PDL=self.pdl,
            num_warps=config.num_warps,
        )
        return tile_launch(
            kernel,
            config,
            headdim,
            nheads,
            self.requests,
            {**self.arguments(), **arguments},
            {**shared, **flags},
            self.pdl,
        )
