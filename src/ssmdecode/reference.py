"""PyTorch reference of selective_state_update, in float64 by default.

Same arguments and semantics as ssmdecode.selective_state_update (see its module docstring
for the recurrence and the shapes), but pure: it modifies nothing and returns the output and
the whole state pool after the update. Tests, benchmarks and `ssmdecode verify --tolerance`
all import this one function, so they never drift apart.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["selective_state_update_reference"]


def selective_state_update_reference(
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
    dst_state_batch_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
    disable_state_update: bool = False,
    compute_dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (out, new_state): out with x's shape and new_state with state's shape, both in
    compute_dtype. Padded rows (state_batch_indices == pad_slot_id) get out = 0 and touch no
    slot; slots no row writes keep their values."""
    mamba1 = state.dim() == 3
    if mamba1:  # as Mamba2 with one head and one group
        state, x, dt, A, B, C = (state.unsqueeze(1), x.unsqueeze(1), dt.unsqueeze(1),
                                 A.unsqueeze(0), B.unsqueeze(1), C.unsqueeze(1))
        D = None if D is None else D.unsqueeze(0)
        z = None if z is None else z.unsqueeze(1)
        dt_bias = None if dt_bias is None else dt_bias.unsqueeze(0)
    f = compute_dtype
    batch, nheads, _ = x.shape
    heads_per_group = nheads // B.shape[1]

    src = (torch.arange(batch) if state_batch_indices is None
           else state_batch_indices.detach().cpu().long())
    dst = src if dst_state_batch_indices is None else dst_state_batch_indices.detach().cpu().long()
    valid = src != pad_slot_id
    rows = valid.nonzero().flatten().tolist()

    new_state = state.detach().to(f).clone()
    dt = dt.to(f)
    if dt_bias is not None:
        dt = dt + dt_bias.to(f)
    if dt_softplus:
        dt = torch.where(dt <= 20.0, F.softplus(dt), dt)
    Bh = B.to(f).repeat_interleave(heads_per_group, dim=1)  # [B, H, N]
    Ch = C.to(f).repeat_interleave(heads_per_group, dim=1)
    out = torch.zeros(x.shape, dtype=f, device=x.device)
    for b in rows:
        s = state[src[b]].to(f)  # [H, P, N], read before any row writes (rows are independent)
        dA = torch.exp(A.to(f) * dt[b][..., None])
        s = s * dA + (dt[b][..., None] * Bh[b][:, None, :]) * x[b].to(f)[..., None]
        y = (s * Ch[b][:, None, :]).sum(-1)
        if D is not None:
            y = y + D.to(f) * x[b].to(f)
        if z is not None:
            zb = z[b].to(f)
            y = y * zb * torch.sigmoid(zb)
        out[b] = y
        if not disable_state_update and dst[b] != pad_slot_id:
            new_state[dst[b]] = s
    if mamba1:
        out, new_state = out.squeeze(1), new_state.squeeze(1)
    return out, new_state
