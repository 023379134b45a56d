"""The PyTorch reference of selective_state_update, in float64 by default, for every mode.

Same arguments and semantics as ssmdecode.selective_state_update (decode.py's docstring has the
recurrence, the shapes and the multi-token conventions), but pure: it modifies nothing and
returns the output and the whole state pool after the call (and the intermediate-state buffer
after it, when one is given). Tests, tools and `ssmdecode verify --tolerance` all import this
one function, so they never drift apart. A loop over requests and tokens, written for reading,
not speed.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ssmdecode.ops.selective_state_update.checks import DEFAULT_PHILOX_ROUNDS

__all__ = [
    "philox2x32",
    "random_bits",
    "row_offsets",
    "selective_state_replay_reference",
    "selective_state_update_reference",
    "stochastic_round",
]


def _slot(idx: torch.Tensor | None, b: int, column: int = 0) -> int:
    if idx is None:
        return b
    return int(idx[b] if idx.dim() == 1 else idx[b, column])


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
    *,
    cu_seqlens: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    intermediate_states: torch.Tensor | None = None,
    intermediate_state_indices: torch.Tensor | None = None,
    parent_token_indices: torch.Tensor | None = None,
) -> tuple[torch.Tensor, ...]:
    """Returns (out, new_state): out with x's shape and new_state with state's shape, both in
    compute_dtype; with intermediate_states also the buffer after the call (compute_dtype,
    each token's state rounded to the buffer's dtype first, as the kernel stores it and as an
    EAGLE parent reads it back). Padded requests (read slot == pad_slot_id) get out = 0 and
    touch no slot; slots and buffer rows nobody writes keep their values."""
    f = compute_dtype
    mamba1 = state.dim() == 3
    token_dim = x.dim() == state.dim()
    varlen = cu_seqlens is not None
    if mamba1:  # as Mamba2 with one head and one group
        head = -2 if token_dim or varlen else 1
        state, A = state.unsqueeze(1), A.unsqueeze(0)
        x, dt, B, C = x.unsqueeze(head), dt.unsqueeze(head), B.unsqueeze(head), C.unsqueeze(head)
        D = None if D is None else D.unsqueeze(0)
        z = None if z is None else z.unsqueeze(head)
        dt_bias = None if dt_bias is None else dt_bias.unsqueeze(0)
    if not token_dim and not varlen:  # one token a request: T = 1
        x, dt, B, C = x.unsqueeze(1), dt.unsqueeze(1), B.unsqueeze(1), C.unsqueeze(1)
        z = None if z is None else z.unsqueeze(1)
    if varlen:
        cu = cu_seqlens.detach().cpu().long()
        spans = [(0, int(cu[b]), int(cu[b + 1]) - int(cu[b])) for b in range(len(cu) - 1)]
        x, dt, B, C = x.unsqueeze(0), dt.unsqueeze(0), B.unsqueeze(0), C.unsqueeze(0)
        z = None if z is None else z.unsqueeze(0)
    else:
        spans = [(b, 0, x.shape[1]) for b in range(x.shape[0])]
    nheads = x.shape[-2]
    heads_per_group = nheads // B.shape[-2]

    def cpu(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.detach().cpu().long()

    src, dst = cpu(state_batch_indices), cpu(dst_state_batch_indices)
    accepted, buf_idx, parents = (
        cpu(num_accepted_tokens),
        cpu(intermediate_state_indices),
        cpu(parent_token_indices),
    )
    per_token = dst is not None and dst.dim() == 2

    dt = dt.to(f)
    if dt_bias is not None:
        dt = dt + dt_bias.to(f)
    if dt_softplus:
        dt = torch.where(dt <= 20.0, F.softplus(dt), dt)
    Bh = B.to(f).repeat_interleave(heads_per_group, dim=-2)  # [.., T, H, N]
    Ch = C.to(f).repeat_interleave(heads_per_group, dim=-2)
    Af = A.to(f)
    new_state = state.detach().to(f).clone()
    new_buffer = None if intermediate_states is None else intermediate_states.detach().to(f).clone()
    out = torch.zeros(x.shape, dtype=f, device=x.device)
    for b, (row, start, count) in enumerate(spans):
        column = 0
        if accepted is not None:
            column = max(int(accepted[b]) - 1, 0)
        slot = _slot(src, b, column)
        if src is not None and slot == pad_slot_id:
            continue
        buf_row = int(buf_idx[b]) if buf_idx is not None else slot
        s = state[slot].to(f)  # [H, P, N], read before any request writes (they are independent)
        for t in range(count):
            k = start + t
            if parents is not None and t > 0 and buf_row != pad_slot_id:
                parent = int(parents[b, t])
                if 0 <= parent < x.shape[1]:
                    s = new_buffer[buf_row, parent].clone()
            dA = torch.exp(Af * dt[row, k][..., None])
            s = s * dA + (dt[row, k][..., None] * Bh[row, k][:, None, :]) * x[row, k].to(f)[..., None]
            y = (s * Ch[row, k][:, None, :]).sum(-1)
            if D is not None:
                y = y + D.to(f) * x[row, k].to(f)
            if z is not None:
                zk = z[row, k].to(f)
                y = y * zk * torch.sigmoid(zk)
            out[row, k] = y
            if per_token and int(dst[b, t]) != pad_slot_id:
                new_state[int(dst[b, t])] = s
            if new_buffer is not None and buf_row != pad_slot_id:
                new_buffer[buf_row, t] = s.to(intermediate_states.dtype).to(f)
        final = _slot(dst, b) if dst is not None and not per_token else slot
        if count and not per_token and not disable_state_update and final != pad_slot_id:
            new_state[final] = s
    if varlen:
        out = out.squeeze(0)
    elif not token_dim:
        out = out.squeeze(1)
    if mamba1:
        out, new_state = out.squeeze(-2), new_state.squeeze(1)
    if new_buffer is not None:
        return out, new_state, new_buffer
    return out, new_state


def selective_state_replay_reference(
    state: torch.Tensor,
    x_cache: torch.Tensor,
    B_cache: torch.Tensor,
    dt_cache: torch.Tensor,
    ring_start: torch.Tensor,
    num_cached: torch.Tensor,
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
    pad_slot_id: int = -1,
    compute_dtype: torch.dtype = torch.float64,
    *,
    cu_seqlens: torch.Tensor | None = None,
    max_seqlen: int | None = None,
    flush: bool | None = None,
) -> tuple[torch.Tensor, ...]:
    """The reference of selective_state_replay (replay.py's docstring): returns (out, state,
    x_cache, B_cache, dt_cache) after the call, out and state in compute_dtype, the rings in
    their own dtypes. flush=True forces the flush (replay_flush), None applies the rule
    num_cached + drafts + T > R (num_cached + 2 T > R with T drafts a request). Pure:
    modifies nothing."""
    f = compute_dtype
    ring = x_cache.shape[2]
    heads_per_group = state.shape[1] // B.shape[-2]
    if cu_seqlens is not None:
        cu = cu_seqlens.detach().cpu().long()
        spans = [(int(cu[b]), int(cu[b + 1]) - int(cu[b])) for b in range(len(cu) - 1)]
        tokens = max_seqlen
        x, dt, B, C = x.unsqueeze(0), dt.unsqueeze(0), B.unsqueeze(0), C.unsqueeze(0)
        z = None if z is None else z.unsqueeze(0)
        rows = [0] * len(spans)
    else:
        tokens = x.shape[1]
        spans = [(0, tokens)] * x.shape[0]
        rows = list(range(x.shape[0]))
    new_state = state.detach().to(f).clone()
    xc, Bc, dtc = x_cache.clone(), B_cache.clone(), dt_cache.clone()
    dtp = dt[..., 0].to(torch.float32)  # [.., T, H]: tied over P
    if dt_bias is not None:
        dtp = dtp + dt_bias[:, 0].to(torch.float32)
    if dt_softplus:
        dtp = torch.where(dtp <= 20.0, F.softplus(dtp), dtp)
    Af = A[:, 0, 0].to(f)
    out = torch.zeros(x.shape, dtype=f, device=x.device)
    idx = None if state_batch_indices is None else state_batch_indices.detach().cpu().long()
    for b, ((start_tok, count), row) in enumerate(zip(spans, rows, strict=True)):
        slot = b if idx is None else int(idx[b])
        if slot == pad_slot_id:
            continue
        start, cached = int(ring_start[slot]), int(num_cached[slot])
        s = state[slot].to(f)  # [H, P, N]
        for k in range(cached):  # the cached tokens, as they first ran
            pos = (start + k) % ring
            d = dt_cache[slot, :, pos].to(f)  # [H]
            Bk = B_cache[slot, :, pos].to(f).repeat_interleave(heads_per_group, 0)  # [H, N]
            s = (
                s * torch.exp(Af * d)[:, None, None]
                + (d[:, None] * Bk)[:, None, :] * x_cache[slot, :, pos].to(f)[..., None]
            )
        if cu_seqlens is not None and count == 0:
            continue  # a packed request of no drafts is left alone
        if (cached + count + tokens > ring) if flush is None else flush:
            new_state[slot] = s
        for t in range(count):
            k = start_tok + t
            d = dtp[row, k].to(f)
            Bt = B[row, k].to(f).repeat_interleave(heads_per_group, 0)
            Ct = C[row, k].to(f).repeat_interleave(heads_per_group, 0)
            xt = x[row, k].to(f)
            s = s * torch.exp(Af * d)[:, None, None] + (d[:, None] * Bt)[:, None, :] * xt[..., None]
            y = (s * Ct[:, None, :]).sum(-1)
            if D is not None:
                y = y + D.to(f) * xt
            if z is not None:
                zt = z[row, k].to(f)
                y = y * zt * torch.sigmoid(zt)
            out[row, k] = y
            pos = (start + cached + t) % ring
            xc[slot, :, pos] = x[row, k]
            Bc[slot, :, pos] = B[row, k]
            dtc[slot, :, pos] = dtp[row, k]
    if cu_seqlens is not None:
        out = out.squeeze(0)
    return out, new_state, xc, Bc, dtc


# Stochastic rounding, bit for bit as the kernels do it (common.py, "Stochastic rounding").

_M32 = 0xFFFFFFFF


def philox2x32(seed: int, c0: np.ndarray, c1: np.ndarray, rounds: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Philox2x32 with `rounds` rounds (Salmon et al., 2011; Random123's philox2x32_R), key the
    two 32-bit halves of the 64-bit seed XORed together, counter (c0, c1) (uint32 arrays that
    broadcast together): the kernels' generator."""
    c0, c1 = (np.asarray(v, dtype=np.uint64) & _M32 for v in np.broadcast_arrays(c0, c1))
    seed &= 0xFFFFFFFFFFFFFFFF
    key = (seed ^ (seed >> 32)) & _M32
    for _ in range(rounds):
        p = np.uint64(0xD256D193) * c0  # a product of two 32-bit words: exact in uint64
        c0, c1 = (p >> 32) ^ c1 ^ np.uint64(key), p & _M32
        key = (key + 0x9E3779B9) & _M32
    return c0.astype(np.uint32), c1.astype(np.uint32)


# The random bits an element of each 16-bit state dtype takes: bf16 cuts 16 bits of fp32, fp16 13.
_RANDOM_BITS = {torch.bfloat16: 16, torch.float16: 13}


def random_bits(
    seed: int,
    rows: np.ndarray,
    columns: int,
    stream: int,
    dtype: torch.dtype,
    rounds: int = DEFAULT_PHILOX_ROUNDS,
) -> np.ndarray:
    """The random bits (uint32) that a store into dtype (bfloat16: 16, float16: 13) gives each
    element of rows x columns: one Philox2x32 call per row (its offset, int64 array) and
    group g of 4 columns, counter (offset's low word, its next 16 bits | g << 16 | stream <<
    31); column 4g + k takes word k // 2 of the call, bits 0-15 of it for an even k and 16-31
    for an odd one (bfloat16), bits 0-12 and 19-31 (float16)."""
    if dtype not in _RANDOM_BITS:
        raise ValueError(f"stochastic rounding is defined for float16 and bfloat16, not {dtype}")
    o = np.asarray(rows, dtype=np.int64).astype(np.uint64)[..., None]
    g = np.arange((columns + 3) // 4, dtype=np.uint64)
    c1 = ((o >> 32) & 0xFFFF) | (g << 16) | np.uint64(stream << 31)
    w0, w1 = philox2x32(seed, o & _M32, c1, rounds)
    bits = _RANDOM_BITS[dtype]
    low, high = np.uint32((1 << bits) - 1), np.uint32(32 - bits)  # an even column's, an odd one's
    r = np.stack([w0 & low, w0 >> high, w1 & low, w1 >> high], axis=-1)  # [..., G, 4]
    return r.reshape(*r.shape[:-2], -1)[..., :columns].astype(np.uint32)


def stochastic_round(v: torch.Tensor, r: np.ndarray | torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The float32 tensor v rounded to dtype (float16 or bfloat16) with the random bits r of
    each element (random_bits: 16 for bfloat16, 13 for float16); float32 returns v. NaN, the
    infinities and magnitudes from dtype's largest finite value up are converted toward zero
    (themselves, or that largest value)."""
    if dtype == torch.float32:
        return v.clone()
    if dtype not in _RANDOM_BITS:
        raise ValueError(f"stochastic rounding is defined for float16 and bfloat16, not {dtype}")
    x = v.detach().cpu().to(torch.float32).numpy()
    u = x.view(np.uint32).astype(np.uint64)
    r = np.asarray(r, dtype=np.uint64)
    if r.size and int(r.max()) >> _RANDOM_BITS[dtype]:
        raise ValueError(
            f"r holds more than the {_RANDOM_BITS[dtype]} random bits an element a {dtype} store "
            f"takes (its largest value is {int(r.max()):#x}); draw it with random_bits"
        )
    if dtype == torch.bfloat16:
        big = ~(np.abs(x) < np.float32(3.3895313892515355e38))
        q = ((u + r) & 0xFFFF0000).astype(np.uint32).view(np.float32)
        top = np.float32(3.3895313892515355e38)
    elif dtype == torch.float16:
        # |v| * 2^-112 holds fp16's value bits where fp32 holds a number's (its subnormals
        # too): the 13 random bits added and 13 cut there, the scale undone (exact)
        big = ~(np.abs(x) < np.float32(65504.0))
        w = (x * np.float32(2.0**-112)).astype(np.float32).view(np.uint32).astype(np.uint64)
        q = ((w + r) & 0xFFFFE000).astype(np.uint32).view(np.float32) * np.float32(2.0**112)
        top = np.float32(65504.0)
    with np.errstate(invalid="ignore"):
        clamped = np.where(np.isfinite(x), np.clip(x, -top, top), x)  # toward zero from the top
    out = np.where(big, clamped, q).astype(np.float32)
    return torch.from_numpy(np.ascontiguousarray(out)).to(dtype).to(v.device)


def row_offsets(t: torch.Tensor, lead: torch.Tensor | tuple[torch.Tensor, ...]) -> np.ndarray:
    """The offsets of the rows t[i, ..., p, :] (the last dim the columns) for the leading
    indices `lead` (one index tensor per dim before the last two, broadcast together), over
    every row p: the keys of an element's random bits."""
    lead = (lead,) if isinstance(lead, torch.Tensor) else lead
    idx = [np.asarray(i.cpu(), dtype=np.int64) for i in lead]
    off = sum(i * t.stride(d) for d, i in enumerate(np.broadcast_arrays(*idx)))
    p = np.arange(t.shape[-2], dtype=np.int64) * t.stride(-2)
    return np.asarray(off)[..., None] + p
