"""vLLM's calling convention for selective_state_update, run by ssmdecode's kernel.

Mirrors `selective_state_update` of vLLM's vllm/model_executor/layers/mamba/ops/mamba_ssm.py as
it stands after vLLM PR #35431 (block 0 is the null block; docs/compat.md maps each argument and
records the versions read):

- D and dt_bias are required and come before z;
- rows whose state_batch_indices entry is null_block_id (0, vLLM's NULL_BLOCK_ID) read and
  write no slot; state_batch_indices and dst_state_batch_indices may be [B] or [B, K] (the
  first column is the slot of single-token decode) and may have more rows than the batch;
- dst_state_batch_indices names the slot each row writes (default: the slot it reads);
- out is required and written in place; the function returns None;
- num_accepted_tokens and cu_seqlens (speculative decoding), enable_stochastic_rounding and
  cache_philox_rounds (randomly rounded fp16 state) are not supported yet;
- is_blackwell only picks vLLM's fallback launch config; ssmdecode picks its own from
  `config` or the device's table, which is keyed by the device's name, so it is accepted and
  has no effect.

`config` is ssmdecode's own keyword-only addition: a LaunchConfig to force, None for the
device's table. vLLM never passes it.
"""

from __future__ import annotations

import torch

from ssmdecode.compat import require_out, unsupported
from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update import selective_state_update as _selective_state_update

__all__ = ["NULL_BLOCK_ID", "selective_state_update"]

NULL_BLOCK_ID = 0
"""vLLM's reserved null block: the state slot index that marks a padded row."""

_ENGINE = "vllm"


def _decode_slots(name: str, indices: torch.Tensor | None, batch: int) -> torch.Tensor | None:
    """vLLM's slot indices, [B'] or [B', K] with B' >= B, as the [B] contiguous slots of
    single-token decode: the first column, first B rows (the kernel reads one index per row)."""
    if indices is None:
        return None
    if indices.dim() == 2:
        indices = indices[:, 0]
    elif indices.dim() != 1:
        raise ValueError(f"{name} has shape {tuple(indices.shape)}; expected [B] or [B, K]")
    if indices.shape[0] < batch:
        raise ValueError(f"{name} has {indices.shape[0]} rows; expected at least batch = {batch}")
    return indices[:batch].contiguous()


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
    """One decode step with vLLM's arguments; updates `state` and writes `out` in place.

    Shapes (B batch, H heads, P head dim, N state dim, G groups, S pool slots, K >= 1):
        state [S, H, P, N] or [S, P, N]; x, dt, z, out [B, H, P] or [B, P];
        A [H, P, N] or [P, N]; B, C [B, G, N] or [B, N]; D, dt_bias [H, P] or [P];
        state_batch_indices, dst_state_batch_indices int32/int64 [>=B] or [>=B, K].

    Null rows (state_batch_indices[b] == null_block_id) read and write no slot, as in vLLM;
    their out rows hold zeros (vLLM's kernel writes the output of a zero state there; both are
    discarded by the engine). A row whose dst entry is null_block_id writes no slot here, where
    vLLM's kernel would write into the reserved null block.
    """
    del is_blackwell  # a launch-config hint of vLLM's fallback table; see the module docstring
    out = require_out(_ENGINE, out)
    if num_accepted_tokens is not None:
        raise unsupported(_ENGINE, "num_accepted_tokens", "speculative decoding: initial state "
                          "from the last accepted token")
    if cu_seqlens is not None:
        raise unsupported(_ENGINE, "cu_seqlens", "variable-length multi-token decode")
    if enable_stochastic_rounding:
        raise unsupported(_ENGINE, "enable_stochastic_rounding", "stochastic rounding of an "
                          "fp16 state")
    if cache_philox_rounds:
        raise unsupported(_ENGINE, "cache_philox_rounds", "Philox rounds of stochastic rounding")
    batch = x.shape[0]
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
        state_batch_indices=_decode_slots("state_batch_indices", state_batch_indices, batch),
        dst_state_batch_indices=_decode_slots(
            "dst_state_batch_indices", dst_state_batch_indices, batch
        ),
        pad_slot_id=null_block_id,
        out=out,
        config=config,
    )
