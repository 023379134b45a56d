"""sglang's calling convention for selective_state_update, run by ssmdecode's kernel.

Mirrors `selective_state_update` of sglang's python/sglang/srt/layers/attention/mamba/ops/
mamba_ssm.py (read at commit 05f4e1676f82; docs/compat.md maps each argument):

- D, z, dt_bias optional and in that order; pad rows are marked by pad_slot_id, -1 by default;
- out is required and written in place; the function returns None;
- x, dt, z, out may carry a token dim ([B, T, H, P]) and B, C one too ([B, T, G, N]): T = 1 is
  single-token decode and is accepted; T > 1 (MTP / EAGLE verify) is not supported yet;
- disable_state_update computes out without writing the state (speculative verify);
- intermediate_states_buffer, cache_steps, retrieve_parent_token, intermediate_state_indices
  (the verify-time state caches and EAGLE tree) are not supported yet.

`config` is ssmdecode's own keyword-only addition: a LaunchConfig to force, None for the
device's table. sglang never passes it.
"""

from __future__ import annotations

import torch

from ssmdecode.compat import require_out, unsupported
from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update import selective_state_update as _selective_state_update

__all__ = ["PAD_SLOT_ID", "selective_state_update"]

PAD_SLOT_ID = -1
"""sglang's sentinel in state_batch_indices for a row that reads and writes no state slot."""

_ENGINE = "sglang"


def _single_token(name: str, t: torch.Tensor | None) -> torch.Tensor | None:
    """Drop the token dim of a [B, T, ...] tensor when T = 1 (sglang's multi-token layout is the
    only one with 4 dims); tensors without it pass through."""
    if t is None or t.dim() != 4:
        return t
    if t.shape[1] != 1:
        raise unsupported(
            _ENGINE, name, f"multi-token decode with T={t.shape[1]} tokens per request"
        )
    return t.squeeze(1)


def selective_state_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    state_batch_indices: torch.Tensor | None = None,
    pad_slot_id: int = PAD_SLOT_ID,
    out: torch.Tensor | None = None,
    disable_state_update: bool = False,
    intermediate_states_buffer: torch.Tensor | None = None,
    cache_steps: int | None = None,
    retrieve_parent_token: torch.Tensor | None = None,
    intermediate_state_indices: torch.Tensor | None = None,
    *,
    config: LaunchConfig | None = None,
) -> None:
    """One decode step with sglang's arguments; updates `state` and writes `out` in place.

    Shapes (B batch, T tokens, H heads, P head dim, N state dim, G groups, S pool slots):
        state [S, H, P, N] or [S, P, N]; x, dt, z, out [B, H, P], [B, 1, H, P] or [B, P];
        A [H, P, N] or [P, N]; B, C [B, G, N], [B, 1, G, N] or [B, N]; D, dt_bias [H, P] or [P];
        state_batch_indices int32/int64 [B].

    Pad rows (state_batch_indices[b] == pad_slot_id) read and write no slot, as in sglang; their
    out rows hold zeros (sglang's kernel writes the output of a zero state there; both are
    discarded by the engine).
    """
    out = require_out(_ENGINE, out)
    for name, value, feature in (
        ("intermediate_states_buffer", intermediate_states_buffer,
         "per-step state cache of speculative verify"),
        ("cache_steps", cache_steps, "length of the per-step state cache"),
        ("retrieve_parent_token", retrieve_parent_token, "EAGLE tree parents"),
        ("intermediate_state_indices", intermediate_state_indices,
         "slots of the per-step state cache"),
    ):
        if value is not None:
            raise unsupported(_ENGINE, name, feature)
    _selective_state_update(
        state,
        _single_token("x", x),
        _single_token("dt", dt),
        A,
        _single_token("B", B),
        _single_token("C", C),
        D=D,
        z=_single_token("z", z),
        dt_bias=dt_bias,
        dt_softplus=dt_softplus,
        state_batch_indices=state_batch_indices,
        pad_slot_id=pad_slot_id,
        out=_single_token("out", out),
        disable_state_update=disable_state_update,
        config=config,
    )
