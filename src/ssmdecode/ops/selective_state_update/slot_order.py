"""slot_order: the batch rows in ascending order of their state slots, for
selective_state_update(batch_order=...)."""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from ssmdecode.ops.selective_state_update.checks import INDEX_DTYPES, interpreted

__all__ = ["sort_slots"]


@triton.jit
def _slot_order_kernel(p_slots, p_order, n, stride_slots, BLOCK: tl.constexpr):
    # One program sorts keys slot * BLOCK + row (unique, so the order is stable; exact for
    # |slot| < 2^63 / BLOCK, at least 2^50) and keeps the rows: the key's low bits, whatever
    # the sign of the slot (BLOCK is a power of two). Lanes past n sort last.
    o_row = tl.arange(0, BLOCK)
    m_row = o_row < n
    b_slot = tl.load(p_slots + o_row * stride_slots, mask=m_row, other=0).to(tl.int64)
    b_key = tl.where(m_row, b_slot * BLOCK + o_row, 9223372036854775807)
    b_row = (tl.sort(b_key) & (BLOCK - 1)).to(tl.int32)
    tl.store(p_order + o_row, b_row, mask=m_row)


_SLOT_ORDER_MAX_BLOCK = 8192  # one program's sort; larger batches use torch.argsort


def sort_slots(state_batch_indices: torch.Tensor) -> torch.Tensor:
    """slot_order's sort, eager (api.slot_order is the public door): the batch rows in
    ascending order of their state slots (int32 [B]), for
    selective_state_update(batch_order=...): a slot-major config then reads the state pool in
    memory order. The slots are the same for every layer of a decode step, so compute it once
    per step. Rows of equal slots (padding) keep their order; pad_slot_id -1 sorts first.
    Slots must lie within +-2^50 (the sort keys are int64).

    One small Triton kernel (a sort in one program) up to 8192 rows: torch.argsort takes a
    radix sort of several kernels, which cost a decode step about as much as slot order
    saved at batch 512 (docs/performance.md). CPU slots take torch.argsort unless the kernels
    run under Triton's interpreter."""
    if not isinstance(state_batch_indices, torch.Tensor) or state_batch_indices.dim() != 1:
        raise TypeError("state_batch_indices must be a 1-D torch.Tensor of slots")
    if state_batch_indices.dtype not in INDEX_DTYPES:
        raise TypeError(f"state_batch_indices has dtype {state_batch_indices.dtype}; expected int32 or int64")
    n = state_batch_indices.shape[0]
    on_gpu = state_batch_indices.is_cuda  # CPU tensors: the interpreter; no CUDA API
    if n == 0 or n > _SLOT_ORDER_MAX_BLOCK or not (on_gpu or interpreted()):
        return torch.argsort(state_batch_indices, stable=True).to(torch.int32)
    order = torch.empty(n, dtype=torch.int32, device=state_batch_indices.device)
    block = max(16, triton.next_power_of_2(n))
    with torch.cuda.device(state_batch_indices.device) if on_gpu else contextlib.nullcontext():
        _slot_order_kernel[(1,)](
            state_batch_indices,
            order,
            n,
            state_batch_indices.stride(0),
            BLOCK=block,
            num_warps=4 if block <= 1024 else 8,
        )
    return order
