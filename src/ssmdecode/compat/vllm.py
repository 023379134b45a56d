"""vLLM's calling convention for selective_state_update, run by ssmdecode's kernels.

Mirrors `selective_state_update` of vLLM's vllm/model_executor/layers/mamba/ops/mamba_ssm.py as
it stands after vLLM PR #35431 (block 0 is the null block; docs/compat.md maps each argument and
records the versions read):

- D and dt_bias are required and come before z;
- rows whose state_batch_indices entry is null_block_id (0, vLLM's NULL_BLOCK_ID) read and
  write no slot; state_batch_indices and dst_state_batch_indices may be [B] or [B, K] and may
  have more rows than the batch;
- without num_accepted_tokens, each request reads the slot of column 0 and writes its final
  state to dst_state_batch_indices column 0 (default: the slot it reads);
- num_accepted_tokens [B] (speculative decoding): the initial state is read from
  state_batch_indices[b, max(num_accepted[b] - 1, 0)], and token t's state is written to
  dst_state_batch_indices[b, t] (default: state_batch_indices[b, t]), an entry equal to
  null_block_id skipped; no other state is written;
- cu_seqlens [B + 1]: x, dt, z, B, C, out pack the tokens of every request ([total, H, P]),
  request b's being cu_seqlens[b] .. cu_seqlens[b + 1] - 1; a request of none is left alone;
- out is required and written in place; the function returns None;
- enable_stochastic_rounding (fp16 states only, ValueError otherwise): the final state is
  stored with stochastic rounding, keyed by a seed drawn for the call, cache_philox_rounds
  Philox rounds (0: 10); with num_accepted_tokens (speculative decoding) vLLM's kernel rounds
  no store stochastically, and neither does the adapter. The random bits are ssmdecode's
  (software Philox; vLLM's fp16 path uses sm_100's cvt.rs), so they differ from vLLM's;
- is_blackwell only picks vLLM's fallback launch config; ssmdecode picks its own from
  `config` or the device's table, which is keyed by the device's name, so it is accepted and
  has no effect.

Bits: vLLM's kernel computes dA as exp2(log2(e) * A * dt) (its fast_exp), which rounds
differently from exp: the adapter runs ssmdecode's kernels with fast_exp=True, so that its
out and states are vLLM's kernel's bit for bit (tests/test_compat_upstream.py, on the GPU).

Errors name vLLM's null_block_id where ssmdecode's checks say pad_slot_id; an int8 / fp8
state raises NotImplementedError.

`config` is ssmdecode's own keyword-only addition: a LaunchConfig to force, None for the
device's table. vLLM never passes it.
"""

from __future__ import annotations

import torch

from ssmdecode.compat import (
    engine_names,
    require_out,
    require_supported_state,
    require_tensors,
    stochastic_rounding,
)
from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update import selective_state_update as _selective_state_update

__all__ = ["NULL_BLOCK_ID", "selective_state_update"]

NULL_BLOCK_ID = 0
"""vLLM's reserved null block: the state slot index that marks a padded row."""

_ENGINE = "vllm"
_OPTIONAL = ("z", "state_batch_indices", "dst_state_batch_indices", "num_accepted_tokens", "cu_seqlens")
# ssmdecode's names of the arguments vLLM calls otherwise, for the messages (engine_names)
_NAMES = {"pad_slot_id": "null_block_id"}


def _rows(name: str, indices: torch.Tensor | None, batch: int) -> torch.Tensor | None:
    """vLLM's slot indices, [B'] or [B', K] with B' >= B, as [B, K] (a missing column dim is
    one column)."""
    if indices is None:
        return None
    if indices.dim() == 1:
        indices = indices.unsqueeze(1)
    elif indices.dim() != 2:
        raise ValueError(
            f"ssmdecode.compat.vllm: {name} has shape {tuple(indices.shape)}; expected [B] or [B, K]"
        )
    if indices.shape[0] < batch:
        raise ValueError(
            f"ssmdecode.compat.vllm: {name} has {indices.shape[0]} rows; expected "
            f"at least the {batch} requests"
        )
    return indices[:batch]


def selective_state_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    dt_bias: torch.Tensor,
    z: torch.Tensor | None = None,
    dt_softplus: bool = False,
    state_batch_indices: torch.Tensor | None = None,
    dst_state_batch_indices: torch.Tensor | None = None,
    null_block_id: int = NULL_BLOCK_ID,
    out: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    is_blackwell: bool = False,
    enable_stochastic_rounding: bool = False,
    cache_philox_rounds: int = 0,
    *,
    config: LaunchConfig | None = None,
) -> None:
    """One decode or verify step with vLLM's arguments; updates `state` and writes `out` in
    place.

    Shapes (B requests, H heads, P head dim, N state dim, G groups, S pool slots, K >= 1):
        state [S, H, P, N] or [S, P, N]; x, dt, z, out [B, H, P] or [B, P], or with
        cu_seqlens [total_tokens, H, P] or [total_tokens, P]; A [H, P, N] or [P, N];
        B, C [B, G, N] or [B, N] (with cu_seqlens [total_tokens, ...]); D, dt_bias [H, P] or
        [P]; state_batch_indices, dst_state_batch_indices int32/int64 [>=B] or [>=B, K];
        num_accepted_tokens int32/int64 [B]; cu_seqlens int32/int64 [B + 1].

    Null rows (state_batch_indices[b, ...] == null_block_id) read and write no slot, as in
    vLLM; their out rows hold zeros (vLLM's kernel writes the output of a zero state there;
    both are discarded by the engine). Without num_accepted_tokens, a row whose destination is
    null_block_id writes no slot here, where vLLM's kernel would write into the null block.
    """
    del is_blackwell  # a launch-config hint of vLLM's fallback table; see the module docstring
    out = require_out(_ENGINE, out)
    require_tensors(
        _ENGINE,
        _OPTIONAL,
        state=state,
        x=x,
        dt=dt,
        A=A,
        B=B,
        C=C,
        D=D,
        dt_bias=dt_bias,
        z=z,
        state_batch_indices=state_batch_indices,
        dst_state_batch_indices=dst_state_batch_indices,
        num_accepted_tokens=num_accepted_tokens,
        cu_seqlens=cu_seqlens,
    )
    if type(null_block_id) is not int:
        raise TypeError(
            f"ssmdecode.compat.vllm: null_block_id must be an int, got "
            f"{type(null_block_id).__name__} {null_block_id!r}"
        )
    require_supported_state(_ENGINE, state)
    rand_seed, philox_rounds = stochastic_rounding(
        _ENGINE, state, enable_stochastic_rounding, cache_philox_rounds
    )
    if num_accepted_tokens is not None:
        rand_seed = None  # vLLM's speculative path rounds every store to nearest
    batch = x.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    src = _rows("state_batch_indices", state_batch_indices, batch)
    dst = _rows("dst_state_batch_indices", dst_state_batch_indices, batch)
    if num_accepted_tokens is not None:
        if src is None:
            raise ValueError(
                "ssmdecode.compat.vllm: num_accepted_tokens needs "
                "state_batch_indices [B, K] (the slots of each request's tokens)"
            )
        dst = src if dst is None else dst  # token t's state to dst[b, t]
    else:  # column 0 is read, and the final state is written to dst column 0
        src = None if src is None else src[:, 0]
        dst = None if dst is None else dst[:, 0]
    with engine_names(_ENGINE, _NAMES):
        _selective_state_update(
            state,
            x,
            dt,
            A,
            B,
            C,
            D=D,
            z=z,
            dt_bias=dt_bias,
            dt_softplus=dt_softplus,
            state_batch_indices=src,
            dst_state_batch_indices=dst,
            pad_slot_id=null_block_id,
            out=out,
            config=config,
            cu_seqlens=cu_seqlens,
            num_accepted_tokens=num_accepted_tokens,
            fast_exp=True,
            rand_seed=rand_seed,
            philox_rounds=philox_rounds,
        )
