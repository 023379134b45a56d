"""What the memory system allows: the same-bytes ceiling and the large-transfer peak.

Ceiling, per call measured: an SM kernel that reads and writes exactly the state bytes of the
call (batch x H x P x N x elem size, read once and written once), flat and contiguous, an
in-place elementwise x *= 1.0000001, cold by the same rotation over disjoint buffers and timed
by the same timer (ssmdecode.bench.timer). Small transfers never reach the large-transfer
bandwidth (launch, ramp and tail), so each batch is held to its own ceiling, measured in the
same run. Two kernels cross-check each other: a flat Triton stream (1024 fp32 per program, 4
warps) and torch's in-place mul_; on an H200 they agreed (docs/measuring.md).

Not copy_: inside a CUDA graph it became a copy-engine memcpy and moved only 2.77 TB/s on an
H200, well under what the SMs reach.

Peak: the same in-place stream over a large buffer (512 MiB), reported beside the ceiling.

Gather ceiling, per call measured: the same stream, but over the call's own slots of its own
state pool (each slot's state read once and written back unchanged, 1024 words a program, the
slots in the call's order), so the cost of where the slots lie in the pool is in it and no
math is. The flat ceiling asks how close a call comes to the HBM; the gather ceiling asks how
close it comes to what its slots allow. On an H200 a stream of random slots that fill a third
of the pool stays 4-6% under the flat ceiling whatever the layout of its programs, and reaches
it when the slots are consecutive (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ssmdecode.bench.timer import Timing, cold_rotation, time_cold
from ssmdecode.ops._gdc import gdc_launch_dependents, gdc_wait

__all__ = [
    "CEILING_KERNELS",
    "GATHER_BLOCK",
    "PEAK_BYTES",
    "Ceiling",
    "bandwidth_tbps",
    "measure_ceiling",
    "measure_gather_ceiling",
    "measure_peak",
    "measure_read_ceiling",
    "peak_bytes",
    "stream_calls",
]

PEAK_BYTES = 512 * 2**20
# Under the interpreter each program of 1024 elements costs milliseconds: keep the CPU peak
# buffer small. Its timing means nothing either way.
_CPU_PEAK_BYTES = 64 * 2**10
_STREAM_BLOCK = 1024
_STREAM_WARPS = 4
_SCALE = 1.0000001  # rounds to 1 + 2^-23 in fp32: every pass changes the data
CEILING_KERNELS = ("triton", "torch")


@triton.jit
def _scale_in_place_kernel(p_buf, n_elements, scale, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    # One program: BLOCK contiguous fp32, read once and written once. With PDL, launched as
    # selective_state_update(pdl=True) is: the next call may launch at once, and the load is in
    # flight before the wait for the previous call (which wrote another buffer: cold_rotation
    # gives pdl calls at least 2).
    if PDL:
        gdc_launch_dependents()
    i_p = tl.program_id(0).to(tl.int64)  # int64: buffers of the largest calls pass 2^31 elements
    o_buf = i_p * BLOCK + tl.arange(0, BLOCK)
    m_buf = o_buf < n_elements
    b_buf = tl.load(p_buf + o_buf, mask=m_buf)
    if PDL:
        gdc_wait()
    tl.store(p_buf + o_buf, b_buf * scale, mask=m_buf)


GATHER_BLOCK = 1024  # 32-bit words a program of the gather stream (4 warps, as the flat one)


# fmt: off
@triton.jit
def _gather_in_place_kernel(p_pool, p_slots, stride_slot, words, addend,
                            BLOCK: tl.constexpr):
    # Program (k, b): words k*BLOCK .. of the state of slot slots[b], read once and written
    # back plus a runtime addend (0: unchanged bits, whatever the state's dtype). Slot-major:
    # a slot's programs are consecutive, as the kernel's slot-major configs read it.
    i_slot = tl.load(p_slots + tl.program_id(1), eviction_policy="evict_last").to(tl.int64)
    o_word = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_word = o_word < words
    p_word = p_pool + i_slot * stride_slot + o_word
    b_word = tl.load(p_word, mask=m_word, eviction_policy="evict_first")
    tl.store(p_word, b_word + addend, mask=m_word, eviction_policy="evict_first")
# fmt: on


def _gather_calls(
    state: torch.Tensor,
    slot_sets: torch.Tensor,
    orders: Sequence[torch.Tensor | None] | None,
    addend: int = 0,
) -> list[Callable[[], object]]:
    """Call i of the gather stream: every 32-bit word of the slots slot_sets[i] (in the order
    orders[i] when given) plus addend, in place. The ceiling adds 0; the tests add 1."""
    if not state.is_contiguous() or state.dim() < 2 or state[0].nbytes % 4:
        raise ValueError(
            f"state must be a contiguous pool [S, ...] with a slot's state a "
            f"multiple of 4 bytes; got shape {tuple(state.shape)}, strides "
            f"{state.stride()}, dtype {state.dtype}"
        )
    if slot_sets.dim() != 2:
        raise ValueError(f"slot_sets has shape {tuple(slot_sets.shape)}; expected [K, B]")
    orders = [None] * slot_sets.shape[0] if orders is None else list(orders)
    if len(orders) != slot_sets.shape[0]:
        raise ValueError(
            f"orders has {len(orders)} entries; expected one per slot set ({slot_sets.shape[0]})"
        )
    words = state[0].nbytes // 4
    pool = state.view(-1).view(torch.int32).view(state.shape[0], words)
    rows = [
        (slots if order is None else slots[order.long()]).to(torch.int32).contiguous()
        for slots, order in zip(slot_sets, orders, strict=True)
    ]
    grid = (triton.cdiv(words, GATHER_BLOCK), slot_sets.shape[1])
    return [
        lambda row=row: _gather_in_place_kernel[grid](
            pool, row, words, words, addend, BLOCK=GATHER_BLOCK, num_warps=_STREAM_WARPS
        )
        for row in rows
    ]


def measure_gather_ceiling(
    state: torch.Tensor, slot_sets: torch.Tensor, orders: Sequence[torch.Tensor | None] | None = None
) -> Timing:
    """The gather ceiling of calls on state (a contiguous pool [S, ...], a slot's state a
    multiple of 4 bytes): call i streams in place the state of the slots slot_sets[i] (valid
    slots, no padding), taken in the order orders[i] when given (batch_order's meaning),
    rotating over the K rows of slot_sets as the calls measured do. The pool's bits do not
    change."""
    return time_cold(_gather_calls(state, slot_sets, orders), state.device)


# fmt: off
@triton.jit
def _read_kernel(p_pool, p_slots, p_sink, stride_slot, words, never, BLOCK: tl.constexpr):
    # The read-only stream: every word of slot slots[b] loaded once, nothing stored (the store
    # hangs on a sum of the words that never equals the runtime `never`, so the loads stay).
    i_slot = tl.load(p_slots + tl.program_id(1), eviction_policy="evict_last").to(tl.int64)
    o_word = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_word = o_word < words
    b_word = tl.load(p_pool + i_slot * stride_slot + o_word, mask=m_word, eviction_policy="evict_first")
    total = tl.sum((b_word & 1).to(tl.int32), axis=0)  # no overflow: at most BLOCK
    if total == never:  # never (-1: a runtime value the compiler cannot see through)
        tl.store(p_sink + tl.program_id(1), total)
# fmt: on


def measure_read_ceiling(state: torch.Tensor, slot_sets: torch.Tensor) -> Timing:
    """The read-only stream of calls on state (a contiguous pool [S, ...], a slot's state a
    multiple of 4 bytes): call i reads every word of the slots slot_sets[i] once and writes
    nothing, rotating over the K rows of slot_sets as the calls measured do. What a call that
    only reads its states (a replay step that does not flush) is held to."""
    _gather_calls(state, slot_sets, None)  # the same checks of the pool and the sets
    words = state[0].nbytes // 4
    pool = state.view(-1).view(torch.int32).view(state.shape[0], words)
    sink = torch.zeros(slot_sets.shape[1], dtype=torch.int32, device=state.device)
    grid = (triton.cdiv(words, GATHER_BLOCK), slot_sets.shape[1])
    rows = [s.to(torch.int32).contiguous() for s in slot_sets]
    return time_cold(
        [
            lambda r=r: _read_kernel[grid](
                pool, r, sink, words, words, -1, BLOCK=GATHER_BLOCK, num_warps=_STREAM_WARPS
            )
            for r in rows
        ],
        state.device,
    )


def bandwidth_tbps(bytes_moved: int, us: float) -> float:
    """Bandwidth in TB/s (10^12 bytes per second) of bytes_moved in us microseconds."""
    return bytes_moved / (us * 1e-6) / 1e12 if us > 0 else 0.0


@dataclass(frozen=True)
class Ceiling:
    """The in-place stream over nbytes (so 2 x nbytes moved), timed by each kernel."""

    nbytes: int
    timings: dict[str, Timing]  # kernel name ("triton", "torch") -> timing

    @property
    def us(self) -> float:
        """The ceiling: the Triton stream's time (the SM kernel of the method)."""
        return self.timings["triton"].us

    @property
    def tbps(self) -> float:
        return bandwidth_tbps(2 * self.nbytes, self.us)

    def to_dict(self) -> dict[str, object]:
        return {
            "nbytes": self.nbytes,
            "bytes_moved": 2 * self.nbytes,
            "us": self.us,
            "tbps": self.tbps,
            "kernels": {
                name: {**t.to_dict(), "tbps": bandwidth_tbps(2 * self.nbytes, t.us)}
                for name, t in self.timings.items()
            },
        }


def stream_calls(kernel: str, buffers: torch.Tensor) -> list[Callable[[], object]]:
    """One in-place stream call per row of buffers [K, n] fp32, by kernel: "triton" (the
    ceiling's), "triton_pdl" (the same launched as pdl=True calls are) or "torch" (mul_)."""
    if kernel == "torch":
        return [lambda row=row: row.mul_(_SCALE) for row in buffers]
    n = buffers.shape[1]
    grid = (triton.cdiv(n, _STREAM_BLOCK),)
    pdl = {"launch_pdl": True, "PDL": True} if kernel == "triton_pdl" else {}
    return [
        lambda row=row: _scale_in_place_kernel[grid](
            row, n, _SCALE, BLOCK=_STREAM_BLOCK, num_warps=_STREAM_WARPS, **pdl
        )
        for row in buffers
    ]


def measure_ceiling(nbytes: int, device: torch.device, pdl: bool = False) -> Ceiling:
    """The same-bytes ceiling of a call whose state is nbytes: each kernel streams nbytes in
    place, rotating over disjoint flat buffers that together hold 3x the L2. pdl (a GPU of
    compute capability 9.0+): also the Triton stream launched as pdl=True calls are, as
    "triton_pdl", the yardstick of calls that overlap the previous one's tail."""
    n = max(1, -(-nbytes // 4))  # fp32 elements
    rotation = cold_rotation(4 * n, device, pdl)
    # Random values, not zeros, so nothing can shortcut the data.
    buffers = torch.randn(rotation, n, device=device)
    kernels = CEILING_KERNELS + (("triton_pdl",) if pdl and device.type == "cuda" else ())
    timings = {kernel: time_cold(stream_calls(kernel, buffers), device) for kernel in kernels}
    return Ceiling(nbytes=4 * n, timings=timings)


def peak_bytes(device: torch.device) -> int:
    """The buffer of the large-transfer peak: 512 MiB on a GPU, 64 KiB under the interpreter."""
    return PEAK_BYTES if device.type == "cuda" else _CPU_PEAK_BYTES


def measure_peak(device: torch.device) -> Ceiling:
    """The large-transfer peak: the same in-place stream over peak_bytes(device)."""
    return measure_ceiling(peak_bytes(device), device)
