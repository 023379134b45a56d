"""The ceiling of a multi-token (verify) call: a stream without math that reads each request's
state once and writes it to the T places the call writes (the 1 -> T stream).

A verify call of T tokens a request must read B states and write B x T states: to the
intermediate-state buffer (sglang's rows, steps 0 .. T - 1) or to the slots dst[b, t] (vLLM's),
plus the final state where the call writes it. The stream moves exactly those bytes between
exactly those places: program (k, b) reads 1024 32-bit words of request b's slot and stores
them, unchanged, at each of the request's destinations, so the cost of where the slots and
rows lie is in it and no arithmetic is. Timed by the same cold-L2 timer, rotating over the
same K disjoint sets of slots and rows as the calls measured, it is what `ssmdecode bench
--tokens` holds each config to (the "1 -> T" stream of docs/measuring.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import triton
import triton.language as tl

from ssmdecode.bench.timer import Timing, time_cold

__all__ = ["FANOUT_BLOCK", "fanout_calls", "measure_fanout_ceiling"]

FANOUT_BLOCK = 1024  # 32-bit words a program, 4 warps (as the flat and gather streams)
_WARPS = 4


@triton.jit
def _fanout_kernel(p_src, p_dst, p_src_word, p_dst_word, words, addend, T: tl.constexpr, BLOCK: tl.constexpr):
    # Program (k, b): words k*BLOCK .. of request b's state, read once from word offset
    # src_word[b] of p_src and written (plus a runtime addend: 0 leaves the bits) to the T word
    # offsets dst_word[b, :] of p_dst. Slot-major, as the verify kernel's slot-major configs.
    i_b = tl.program_id(1)
    o_src = tl.load(p_src_word + i_b, eviction_policy="evict_last")
    o_word = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_word = o_word < words
    b_word = tl.load(p_src + o_src + o_word, mask=m_word, eviction_policy="evict_first") + addend
    for t in tl.static_range(T):
        o_dst = tl.load(p_dst_word + i_b * T + t, eviction_policy="evict_last")
        tl.store(p_dst + o_dst + o_word, b_word, mask=m_word, eviction_policy="evict_first")


def _words(t: torch.Tensor, what: str) -> torch.Tensor:
    """A contiguous tensor of float states as flat 32-bit words."""
    if not t.is_contiguous() or t.nbytes % 4:
        raise ValueError(
            f"{what} must be contiguous and a multiple of 4 bytes; got shape "
            f"{tuple(t.shape)}, strides {t.stride()}, dtype {t.dtype}"
        )
    return t.view(-1).view(torch.int32)


def fanout_calls(
    state: torch.Tensor,
    src_sets: torch.Tensor,
    dst: torch.Tensor,
    dst_offsets: Sequence[torch.Tensor],
    addend: int = 0,
) -> list[Callable[[], object]]:
    """Call i of the 1 -> T stream: each request's state read from slot src_sets[i, b] of the
    pool state ([S, ...], contiguous) and written to the T places dst_offsets[i][b, :] of dst
    (the pool itself, or an intermediate-state buffer [R, T_c, ...]), each an offset in states
    of dst's token-state size (slot * 1, or row * T_c + step). addend: added to every word (0
    for the ceiling; the tests add 1 to see each place written)."""
    if src_sets.dim() != 2:
        raise ValueError(f"src_sets has shape {tuple(src_sets.shape)}; expected [K, B]")
    if len(dst_offsets) != src_sets.shape[0]:
        raise ValueError(
            f"dst_offsets has {len(dst_offsets)} entries; expected one per slot set ({src_sets.shape[0]})"
        )
    pool = _words(state, "state")
    words = state[0].nbytes // 4
    out = _words(dst, "dst")
    batch = src_sets.shape[1]
    calls = []
    for slots, offsets in zip(src_sets, dst_offsets, strict=True):
        if offsets.dim() != 2 or offsets.shape[0] != batch:
            raise ValueError(
                f"each dst_offsets entry must be [B, T] with B = {batch}; got {tuple(offsets.shape)}"
            )
        tokens = offsets.shape[1]
        src_word = (slots.to(torch.int64) * words).contiguous()
        dst_word = (offsets.to(torch.int64) * words).contiguous()
        grid = (triton.cdiv(words, FANOUT_BLOCK), batch)
        calls.append(
            lambda s=src_word, d=dst_word, t=tokens, g=grid: _fanout_kernel[g](
                pool, out, s, d, words, addend, T=t, BLOCK=FANOUT_BLOCK, num_warps=_WARPS
            )
        )
    return calls


def measure_fanout_ceiling(
    state: torch.Tensor,
    src_sets: torch.Tensor,
    dst: torch.Tensor,
    dst_offsets: Sequence[torch.Tensor],
) -> Timing:
    """The 1 -> T ceiling of calls that read the slots src_sets[i] of state and write the
    places dst_offsets[i] of dst (see fanout_calls), rotating over the K sets as the calls
    measured do. The states read keep their bits; the places get copies of them."""
    return time_cold(fanout_calls(state, src_sets, dst, dst_offsets), state.device)
