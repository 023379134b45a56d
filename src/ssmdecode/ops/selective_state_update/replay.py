r"""Replay: speculative decoding's verify step without writing a state per draft token.

The multi-token kernel (verify.py) writes every draft token's state so that the engine can keep
the accepted one: 1 + T state-sizes of traffic a request, then the engine's copy. Replay keeps,
beside each state slot, a ring of the small inputs of the tokens since the slot's state was
last written (its checkpoint): x, B and the processed dt' = softplus(dt + dt_bias), a few KiB
a request against the state's 256 KiB (headline shape). One call, per request:

1. read the checkpoint state[slot];
2. replay the num_cached[slot] accepted tokens of the ring (state only), in order, exactly as
   they first ran: the same dt', the same x and B, so the same float32 operations and bits;
3. if the ring would overflow (num_cached + 2 T > R, R the ring's length; packed, each
   request's own draft count in place of one T), write the state
   after the replay back: the new checkpoint (the engine then advances ring_start by
   num_cached: replay_advance);
4. run the T draft tokens from there (out for each, in registers; no state written) and append
   their inputs to the ring at positions ring_start + num_cached + t (mod R).

After the verify step the engine knows how many drafts were accepted and calls replay_advance
once per step (not per layer: every layer shares the bookkeeping): num_cached becomes (0 if the
call flushed, else num_cached) + accepted. The state the engine means is always the checkpoint
plus its num_cached ring tokens; nobody copies a state.

Shapes (B requests, T drafts, H heads, P head dim, N state dim, G groups, S slots, R ring):

    state      [S, H, P, N]        x_cache    [S, H, R, P]  (x's dtype)
    ring_start [S] int32           B_cache    [S, G, R, N]  (B's dtype)
    num_cached [S] int32           dt_cache   [S, H, R]     float32, dt' after bias/softplus
    x, dt, z, out [B, T, H, P]     B, C [B, T, G, N]        (or packed with cu_seqlens)

This is flashinfer's checkpointing_ssu ring layout and flush rule (R = window + T), so its
callers can switch (ssmdecode.compat.flashinfer). dt, A and dt_bias must be tied over the head
dim (one dt' a head, as every Mamba2 model has them): the ring holds one dt' a head.

Bits: with a float32 state, each draft's out and the state after the accepted drafts are the
multi-token kernel's and T single-token calls' bits (tests/test_replay.py); a 16-bit state is
rounded once a flush here, once a token there (docs/performance.md measures the difference).

Engines (docs/usage.md's replay call; docs/architecture.md): after prefill, write the prefill's final state into the slot and set
num_cached = 0 (ring_start anywhere in [0, R)); before a slot is preempted, swapped out or
reused, materialize its state with replay_flush (the checkpoint plus its cached tokens).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

from ssmdecode.config import LaunchConfig, lookup_config
from ssmdecode.ops._gdc import gdc_wait
from ssmdecode.ops.selective_state_update.checks import (
    DEFAULT_PHILOX_ROUNDS,
    FLOAT_DTYPES,
    INDEX_DTYPES,
    MAX_BATCH,
    check_flags,
    check_rounding,
    check_state_dtype,
    expect,
    expect_type,
    interpreted,
    ties_head_dim,
    validate_cu_seqlens,
    validate_slots,
    validation_on,
)
from ssmdecode.ops.selective_state_update.common import (
    STREAM_STATE,
    both,
    cols,
    exp_dA,
    gated_out,
    live_mask,
    load,
    load_state,
    row_sums,
    rows,
    slot_index,
    softplus,
    start_program,
    store_state,
    stored,
    tile_addressing,
    tile_mask,
    tile_offsets,
    token_span,
    unless,
    wait_prior,
    wrap,
)
from ssmdecode.ops.selective_state_update.launch import (
    HEURISTICS,
    Launch,
    ReplayCall,
    check_ordered_sum,
    given,
    run_on,
)
from ssmdecode.ops.selective_state_update.replay_fast import fast_launch

__all__ = ["prepare", "replay_advance", "replay_flush", "selective_state_replay"]

_HEURISTICS = {**HEURISTICS, **given(VARLEN="p_cu_seqlens")}


class _DraftRows(NamedTuple):
    """Of each of the drafts' inputs a request row's pointers (x and z: this program's rows of
    its head, B and C: its group's columns, dt: its head), or their strides over the tokens."""

    x: Any
    dt: Any
    B: Any
    C: Any
    z: Any


# fmt: off
@triton.jit
def _draft_inputs(p, s, tok, m_tv, m_tn, m_t, b_dt_bias, HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
                  HAS_Z: tl.constexpr):
    """Draft tok's inputs from the rows p at the strides s (_DraftRows): x and z (their dtype;
    x again without z), dt' (float32), B (its dtype), C (float32). m_tv and m_tn mask the rows
    and the columns, m_t a packed request's missing drafts (each None where nothing is
    masked)."""
    b_x = load(p.x + tok * s.x, m_tv)
    b_dt = load(p.dt + tok * s.dt, m_t).to(tl.float32)
    if HAS_DT_BIAS:
        b_dt += b_dt_bias
    if DT_SOFTPLUS:
        b_dt = softplus(b_dt)
    b_B = load(p.B + tok * s.B, m_tn)
    b_C = load(p.C + tok * s.C, m_tn).to(tl.float32)
    b_z = b_x
    if HAS_Z:
        b_z = load(p.z + tok * s.z, m_tv)
    return b_x, b_dt, b_B, b_C, b_z


# fmt: on


# fmt: off
@triton.heuristics(_HEURISTICS)
@triton.jit
def _selective_state_replay_kernel(
    # pointers
    p_state, p_x_cache, p_B_cache, p_dt_cache, p_ring_start, p_cached,
    p_x, p_dt, p_dt_bias, p_A, p_B, p_C, p_D, p_z, p_out, p_src_idx, p_cu_seqlens, p_seed,
    # sizes
    headdim, dstate, pad_slot_id, total_tokens, ring,
    # strides, stride_<tensor>_<dim>
    stride_state_s, stride_state_h, stride_state_p, stride_state_n,
    stride_xc_s, stride_xc_h, stride_xc_r, stride_xc_p,
    stride_Bc_s, stride_Bc_g, stride_Bc_r, stride_Bc_n,
    stride_dtc_s, stride_dtc_h, stride_dtc_r,
    stride_x_b, stride_x_t, stride_x_h, stride_x_p,
    stride_dt_b, stride_dt_t, stride_dt_h,
    stride_dt_bias_h, stride_A_h,
    stride_B_b, stride_B_t, stride_B_g, stride_B_n,
    stride_C_b, stride_C_t, stride_C_g, stride_C_n,
    stride_D_h, stride_D_p,
    stride_z_b, stride_z_t, stride_z_h, stride_z_p,
    stride_out_b, stride_out_t, stride_out_h, stride_out_p,
    stride_src_idx,
    # flags
    T: tl.constexpr,  # drafts a request (the most, with cu_seqlens)
    WINDOW: tl.constexpr,  # the most cached tokens a request replays: R - T
    FLUSH: tl.constexpr,  # 0: by the rule num_cached + 2 T > R; 1: always (replay_flush)
    HEADS_PER_GROUP: tl.constexpr,
    DT_SOFTPLUS: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_SRC_IDX: tl.constexpr,
    VARLEN: tl.constexpr,
    EVEN_M: tl.constexpr,
    EVEN_N: tl.constexpr,
    PACKED_ROWS: tl.constexpr,
    FAST_EXP: tl.constexpr,
    STOCHASTIC: tl.constexpr,  # a 16-bit checkpoint stored with stochastic rounding (common.py)
    PHILOX_ROUNDS: tl.constexpr,
    # launch knobs
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SLOT_MAJOR: tl.constexpr,
    EVICT_FIRST: tl.constexpr,
    ORDERED_SUM: tl.constexpr,
    PDL: tl.constexpr,
):
    # One program: BLOCK_M rows of one (request, head), all N columns: the checkpoint, the
    # cached tokens, the drafts.
    i_m, i_b, i_h = start_program(SLOT_MAJOR, PDL)
    i_g = i_h // HEADS_PER_GROUP

    t0, n_tok, i_xb = token_span(p_cu_seqlens, i_b, total_tokens, T, VARLEN, True)
    if VARLEN:
        if n_tok == 0:  # a request of no drafts is left alone: no replay, no flush (flashinfer's)
            return
    i_slot = slot_index(p_src_idx, i_b * stride_src_idx, i_b.to(tl.int64), HAS_SRC_IDX, EVICT_FIRST)
    m_live = live_mask(i_slot, pad_slot_id, HAS_SRC_IDX)
    i_ring = i_slot
    if HAS_SRC_IDX:
        i_ring = tl.where(m_live, i_slot, 0)  # a pad request reads no bookkeeping
    # Bookkeeping of the slot: where its ring starts, how many accepted tokens it holds; both
    # read-only here (replay_advance updates them once per step, for every layer).
    if HAS_SRC_IDX:
        start = tl.load(p_ring_start + i_ring, mask=m_live, other=0).to(tl.int32)
        n_old = tl.load(p_cached + i_ring, mask=m_live, other=0).to(tl.int32)
    else:
        start = tl.load(p_ring_start + i_ring).to(tl.int32)
        n_old = tl.load(p_cached + i_ring).to(tl.int32)
    n_old = tl.minimum(tl.maximum(n_old, 0), WINDOW)  # never past the ring's old rows
    start = tl.minimum(tl.maximum(start, 0), ring - 1)  # never outside the ring
    # The flush rule: the cached tokens and this call's drafts overflow the window R - T (with
    # T drafts a request: num_cached + 2 T > R; packed, each request's own count).
    if FLUSH:
        m_flush = n_old >= 0
    else:
        m_flush = n_old + n_tok + T > ring

    o_m, o_n, m_m, m_n = tile_offsets(i_m, headdim, dstate, BLOCK_M, BLOCK_N, ORDERED_SUM)
    m_vm = unless(EVEN_M, m_m)
    m_vn = unless(EVEN_N, m_n)
    m_read = both(tile_mask(m_m, m_n, EVEN_M, EVEN_N, ORDERED_SUM), m_live)
    o_base, o_tile = tile_addressing(0, i_h, i_m, o_m, o_n, stride_state_h, stride_state_p, stride_state_n,
                                     PACKED_ROWS, BLOCK_M, BLOCK_N, ORDERED_SUM)
    p_tile = (p_state + (i_slot * stride_state_s + o_base)) + o_tile
    b_state = load_state(p_tile, m_read, EVICT_FIRST)
    wait_prior(PDL)

    # The ring rows of this program: x of its head's rows, B of its group, dt' of its head.
    p_xc = p_x_cache + i_ring * stride_xc_s + i_h * stride_xc_h + o_m * stride_xc_p
    p_Bc = p_B_cache + i_ring * stride_Bc_s + i_g * stride_Bc_g + o_n * stride_Bc_n
    p_dtc = p_dt_cache + i_ring * stride_dtc_s + i_h * stride_dtc_h
    b_A = tl.load(p_A + i_h * stride_A_h).to(tl.float32)

    # The drafts' inputs: x and z of this program's rows, B and C of its group, dt' of its head.
    b_dt_bias = 0.0
    if HAS_DT_BIAS:
        b_dt_bias = tl.load(p_dt_bias + i_h * stride_dt_bias_h).to(tl.float32)
    p_xt = p_x + i_xb * stride_x_b + i_h * stride_x_h + o_m * stride_x_p
    p_dtt = p_dt + i_xb * stride_dt_b + i_h * stride_dt_h
    p_Bt = p_B + i_xb * stride_B_b + i_g * stride_B_g + o_n * stride_B_n
    p_Ct = p_C + i_xb * stride_C_b + i_g * stride_C_g + o_n * stride_C_n
    p_zt = p_xt  # unread without z
    if HAS_Z:
        p_zt = p_z + i_xb * stride_z_b + i_h * stride_z_h + o_m * stride_z_p
    # Every draft's loads issued here, before any store: no load can be moved above a store (they
    # may alias), so loaded in their loop each draft's inputs waited a memory latency behind the
    # previous draft's stores (run 66: 1.08-1.29x at T 4 and 8; docs/performance.md).
    drafts = ()
    for t in tl.static_range(T):
        m_t = None
        if VARLEN:
            m_t = t < n_tok
        m_tv = both(m_vm, m_t)
        m_tn = both(m_vn, m_t)
        drafts = drafts + (_draft_inputs(  # noqa: RUF005 (a Triton tuple)
            _DraftRows(x=p_xt, dt=p_dtt, B=p_Bt, C=p_Ct, z=p_zt),
            _DraftRows(x=stride_x_t, dt=stride_dt_t, B=stride_B_t, C=stride_C_t, z=stride_z_t),
            t0 + t, m_tv, m_tn, m_t, b_dt_bias, HAS_DT_BIAS, DT_SOFTPLUS, HAS_Z),)

    # 2. the cached tokens, state only, in order; a request skips those past its cached count.
    # (ptxas sinks each token's loads into its branch, so each waits a latency; issuing a
    # window's loads together, with the tokens past the count as the identity, was no faster:
    # run 66, docs/performance.md.)
    for k in tl.static_range(WINDOW):
        if k < n_old:
            m_k = k < n_old
            if HAS_SRC_IDX:
                m_k = m_k & m_live
            pos = wrap(start + k, ring)
            b_xk = tl.load(p_xc + pos * stride_xc_r, mask=both(m_vm, m_k), other=0.0).to(tl.float32)
            b_Bk = tl.load(p_Bc + pos * stride_Bc_r, mask=both(m_vn, m_k), other=0.0).to(tl.float32)
            b_dtk = tl.load(p_dtc + pos * stride_dtc_r, mask=m_k, other=0.0)
            # The fma the recurrence's s * dA + dB * x becomes, written out for every config:
            # inside this branch LLVM fused the other product where the tile's layout sums
            # rows by itself ((4,4) on the H200: a few ULPs off the first run of the token).
            b_state = tl.fma(b_state, exp_dA(b_A * b_dtk, FAST_EXP),
                             cols(b_Bk * b_dtk, ORDERED_SUM) * rows(b_xk, ORDERED_SUM))

    # 3. the new checkpoint, where the ring would overflow
    m_write = both(m_read, m_flush)
    if STOCHASTIC:
        b_store = stored(b_state, p_state.dtype.element_ty, tl.load(p_seed),
                         i_slot * stride_state_s + i_h * stride_state_h + o_m * stride_state_p,
                         STREAM_STATE, True, PHILOX_ROUNDS, BLOCK_N, ORDERED_SUM)
    else:
        b_store = b_state.to(p_state.dtype.element_ty)
    store_state(p_tile, b_store, m_write, EVICT_FIRST)

    # 4. the drafts: out for each, their inputs appended to the ring
    b_D = 0.0
    if HAS_D:
        b_D = load(p_D + i_h * stride_D_h + o_m * stride_D_p, m_vm).to(tl.float32)
    for t in tl.static_range(T):
        m_t = None
        if VARLEN:
            m_t = t < n_tok
        m_tv = both(m_vm, m_t)
        tok = t0 + t
        b_x, b_dt, b_B, b_C, b_z = drafts[t]
        b_xf = b_x.to(tl.float32)
        # s * dA + dB * x as the fma upstream's layouts fuse it, written out for every config:
        # with the drafts' loads hoisted, LLVM fused the other product where the layout sums
        # rows by itself ((4,1), (8,1), (4,4): PTX, and the tuner's bit gate on the H200, run 67).
        b_state = tl.fma(b_state, exp_dA(b_A * b_dt, FAST_EXP),
                         cols(b_B.to(tl.float32) * b_dt, ORDERED_SUM) * rows(b_xf, ORDERED_SUM))
        b_out = gated_out(row_sums(b_state, b_C, BLOCK_M, BLOCK_N, ORDERED_SUM), b_xf, b_z, b_D, m_live,
                          HAS_D, HAS_Z, HAS_SRC_IDX)
        tl.store(p_out + i_xb * stride_out_b + tok * stride_out_t + i_h * stride_out_h
                 + o_m * stride_out_p, b_out, mask=m_tv)
        # append: the same values the replay of a later call reads back
        pos = wrap(start + n_old + t, ring)
        m_app = both(m_live, m_t)
        m_appv = both(m_vm, m_app)
        tl.store(p_xc + pos * stride_xc_r, b_x, mask=m_appv)
        if i_m == 0:
            tl.store(p_dtc + pos * stride_dtc_r, b_dt, mask=m_app)
            if i_h % HEADS_PER_GROUP == 0:
                m_appn = both(m_vn, m_app)
                tl.store(p_Bc + pos * stride_Bc_r, b_B, mask=m_appn)
# fmt: on


def _check_route(exact: object, host_flush: object, flush_drafts: bool, cursors_by_request: bool) -> None:
    """exact a bool, and the fast route's engine conventions (the host's flush flags, flushing
    drafts, cursors a request) only with exact=False."""
    if type(exact) is not bool:
        raise TypeError(f"exact must be a bool, got {type(exact).__name__} {exact!r}")
    if exact and (host_flush is not None or flush_drafts or cursors_by_request):
        raise ValueError("the host's flush flags, flushing drafts and cursors a request are the fast route's")


def _check_layout(
    state: object, x: object, B: object, cu_seqlens: object, max_seqlen: object
) -> tuple[int, int, tuple[int, ...]]:
    """The state [S, H, P, N] (a dtype the kernels store), B's groups dividing its heads, and
    how x holds the drafts (_replay_tokens); returns (requests, the most drafts a request, x's
    leading dims)."""
    if not isinstance(state, torch.Tensor):
        raise TypeError(f"state must be a torch.Tensor, got {type(state).__name__}")
    check_state_dtype("state", state)
    if state.dim() != 4:
        raise ValueError(f"state has shape {tuple(state.shape)}; expected [S, H, P, N]")
    nheads = state.shape[1]
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not isinstance(B, torch.Tensor):
        raise TypeError(f"B must be a torch.Tensor, got {type(B).__name__}")
    ngroups = B.shape[-2] if B.dim() >= 2 else 0
    if ngroups < 1 or nheads % ngroups:
        raise ValueError(
            f"B has shape {tuple(B.shape)}: its {ngroups} groups do not divide the {nheads} heads of state"
        )
    batch, tokens, lead = _replay_tokens(x, cu_seqlens, max_seqlen, state.device)
    if batch > MAX_BATCH:
        raise ValueError(f"x has {batch} requests; one call takes at most {MAX_BATCH}")
    return batch, tokens, lead


def _replay_tokens(
    x: torch.Tensor, cu_seqlens: object, max_seqlen: object, device: torch.device
) -> tuple[int, int, tuple[int, ...]]:
    """How x holds the drafts: (requests, the most drafts a request, x's leading dims): dense
    [B, T, H, P], or packed [total_tokens, H, P] by cu_seqlens [B + 1] with max_seqlen."""
    if cu_seqlens is not None:
        if x.dim() != 3:
            raise ValueError(
                f"x has shape {tuple(x.shape)}: with cu_seqlens, x packs the drafts "
                "of every request ([total_tokens, H, P])"
            )
        if type(max_seqlen) is not int or max_seqlen < 1:
            raise ValueError(
                f"cu_seqlens needs max_seqlen, the most drafts a request (an int "
                f">= 1; the ring is window + max_seqlen long), got {max_seqlen!r}"
            )
        if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 1:
            raise ValueError("cu_seqlens must be a tensor [B + 1] of token offsets")
        batch, tokens = cu_seqlens.shape[0] - 1, max_seqlen
        expect("cu_seqlens", cu_seqlens, (batch + 1,), INDEX_DTYPES, device, "[B + 1]")
        if x.shape[0] > batch * max_seqlen:
            raise ValueError(
                f"x packs {x.shape[0]} drafts, more than {batch} requests (cu_seqlens) of at "
                f"most max_seqlen = {max_seqlen}"
            )
        lead = (x.shape[0],)
    else:
        if x.dim() != 4:
            raise ValueError(
                f"x has shape {tuple(x.shape)}; expected [B, T, H, P] (T drafts a "
                "request), or [total_tokens, H, P] with cu_seqlens"
            )
        if max_seqlen is not None:
            raise ValueError("max_seqlen goes with cu_seqlens only; the dense T is x.shape[1]")
        batch, tokens = x.shape[0], x.shape[1]
        lead = (batch, tokens)
    return batch, tokens, lead


def _check_tensors(
    state: torch.Tensor,
    lead: tuple[int, ...],
    x: torch.Tensor,
    dt: object,
    A: object,
    B: torch.Tensor,
    C: object,
    D: object,
    z: object,
    dt_bias: object,
    out: object,
) -> tuple[int, ...]:
    """The drafts' tensors against the state (lead: x's leading dims, [B, T] or [total_tokens]),
    and dt, A, dt_bias tied over the head dim; returns x's shape."""
    nheads, headdim, dstate = state.shape[1:]
    ngroups, device = B.shape[-2], state.device
    xs, bs = (*lead, nheads, headdim), (*lead, ngroups, dstate)
    expect("x", x, xs, FLOAT_DTYPES, device, "(requests, drafts, heads, head dim of state)")
    for name, t in (("dt", dt), ("z", z), ("out", out)):
        if t is not None or name == "dt":
            expect(name, t, xs, FLOAT_DTYPES, device, "(the shape of x)")
    expect("A", A, (nheads, headdim, dstate), FLOAT_DTYPES, device, "(heads, head dim, state dim)")
    expect("B", B, bs, FLOAT_DTYPES, device, "(the leading dims of x, groups, state dim)")
    expect("C", C, bs, FLOAT_DTYPES, device, "(the shape of B)")
    for name, t in (("D", D), ("dt_bias", dt_bias)):
        if t is not None:
            expect(name, t, (nheads, headdim), FLOAT_DTYPES, device, "(heads, head dim)")
    if not ties_head_dim(dt, A, dt_bias):
        raise ValueError(
            "replay takes dt, A and dt_bias tied over the head dim (stride 0 over P, "
            "and N for A: one dt' a head, as Mamba2 models pass them): the ring holds "
            "one dt' a head"
        )
    return xs


def _check_rings(
    x_cache: object,
    B_cache: object,
    dt_cache: object,
    ring_start: object,
    num_cached: object,
    state: torch.Tensor,
    x: torch.Tensor,
    B: torch.Tensor,
    batch: int,
    tokens: int,
    cursors_by_request: bool,
) -> int:
    """The rings (x's, B's dtypes; dt' float32), long enough for T = tokens drafts (R >= 2 T),
    and the cursors (a slot's, or with cursors_by_request a request's num_cached and no
    ring_start); returns R."""
    slots, nheads, headdim, dstate = state.shape
    ngroups, device = B.shape[-2], state.device
    if not isinstance(x_cache, torch.Tensor) or x_cache.dim() != 4:
        raise ValueError(
            f"x_cache must be a tensor [S, H, R, P]; got "
            f"{tuple(x_cache.shape) if isinstance(x_cache, torch.Tensor) else type(x_cache).__name__}"
        )
    ring = x_cache.shape[2]
    expect(
        "x_cache",
        x_cache,
        (slots, nheads, ring, headdim),
        (x.dtype,),
        device,
        "(slots, heads, ring, head dim), in x's dtype",
    )
    expect(
        "B_cache",
        B_cache,
        (slots, ngroups, ring, dstate),
        (B.dtype,),
        device,
        "(slots, groups, ring, state dim), in B's dtype",
    )
    expect(
        "dt_cache", dt_cache, (slots, nheads, ring), (torch.float32,), device, "(slots, heads, ring), float32"
    )
    if cursors_by_request:
        if ring_start is not None:
            raise ValueError("with cursors kept a request, ring_start must be None (rings start at row 0)")
        expect("num_cached", num_cached, (batch,), (torch.int32,), device, "(one int32 a request)")
    else:
        for name, t in (("ring_start", ring_start), ("num_cached", num_cached)):
            expect(name, t, (slots,), (torch.int32,), device, "(one int32 a slot)")
    _check_ring_length(ring, tokens, f"x_cache holds a ring of {ring} tokens")
    return ring


def _check_slots(state_batch_indices: object, state: torch.Tensor, batch: int) -> None:
    """Each request's slot, int32/int64 [B]; without them request b uses slot b, so the pool
    needs batch slots."""
    slots = state.shape[0]
    if state_batch_indices is not None:
        expect(
            "state_batch_indices",
            state_batch_indices,
            (batch,),
            INDEX_DTYPES,
            state.device,
            "(one slot a request)",
        )
    elif slots < batch:
        raise ValueError(
            f"state has {slots} slots but {batch} requests; without state_batch_indices request b uses slot b"
        )


def prepare(
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
    out: torch.Tensor | None = None,
    config: LaunchConfig | None = None,
    *,
    cu_seqlens: torch.Tensor | None = None,
    max_seqlen: int | None = None,
    fast_exp: bool = False,
    validate_indices: bool | None = None,
    pdl: bool = False,
    rand_seed: torch.Tensor | None = None,
    philox_rounds: int = DEFAULT_PHILOX_ROUNDS,
    exact: bool = True,
    _flush: bool = False,
    _host_flush: torch.Tensor | None = None,
    _flush_drafts: bool = False,
    _cursors_by_request: bool = False,
) -> tuple[torch.Tensor, Launch | None]:
    """selective_state_replay's arguments checked and its launch prepared, not run: (out,
    the launch, or None for an empty batch). What benchmarks/ptx_snapshot.py compiles.
    exact=False: the fast route's kernel (replay_fast.py). _flush (replay_flush): every
    request's checkpoint written, whatever the flush rule says. The fast route's engine
    conventions (compat.vllm): _host_flush, the flush flag a request (int8 or bool [B]);
    _flush_drafts, a flush absorbs the drafts and appends nothing; _cursors_by_request,
    num_cached [B] and ring_start None (replay_fast.py's docstring). The checks, one concern a
    function, run in this order: the route, the flags, the layout, the tensors, the rings, the
    slots, the host's flush flags, the rounding, then under validation the index values; none
    writes (out, when None, is allocated here; the launch writes)."""
    _check_route(exact, _host_flush, _flush_drafts, _cursors_by_request)
    check_flags(dt_softplus, False, fast_exp, pdl, pad_slot_id, config)  # the doors' one flag check
    batch, tokens, lead = _check_layout(state, x, B, cu_seqlens, max_seqlen)
    device = state.device
    xs = _check_tensors(state, lead, x, dt, A, B, C, D, z, dt_bias, out)
    ring = _check_rings(
        x_cache, B_cache, dt_cache, ring_start, num_cached, state, x, B, batch, tokens, _cursors_by_request
    )
    _check_slots(state_batch_indices, state, batch)
    if out is None:
        out = torch.empty(xs, dtype=x.dtype, device=device)
    if _host_flush is not None:
        expect("is_flush", _host_flush, (batch,), (torch.int8, torch.bool), device, "(one flag a request)")
    check_rounding(rand_seed, philox_rounds, device, (state,))
    if validation_on(validate_indices) and not _cursors_by_request:
        _validate(
            state, ring_start, num_cached, state_batch_indices, pad_slot_id, ring, tokens, batch,
            cu_seqlens, x.shape[0],
        )  # fmt: skip
    result = out
    if cu_seqlens is not None:  # the packed drafts as one row of the dense layout
        x, dt, B, C, out, z = (t if t is None else t.unsqueeze(0) for t in (x, dt, B, C, out, z))
    if batch == 0:
        return result, None
    config = _replay_config(config, state, batch, tokens, exact, rand_seed is not None)
    pdl = _check_pdl(pdl, device)
    call = ReplayCall(
        state,
        x_cache,
        B_cache,
        dt_cache,
        ring_start,
        num_cached,
        x,
        dt,
        A,
        B,
        C,
        D,
        z,
        dt_bias,
        out,
        state_batch_indices,
        cu_seqlens,
        rand_seed,
        pad_slot_id,
        tokens,
        ring,
        dt_softplus,
        fast_exp,
        philox_rounds,
        config,
        pdl,
        flush=_flush,
    )
    if exact:
        return result, exact_launch(call)
    return result, fast_launch(
        call, host_flush=_host_flush, flush_drafts=_flush_drafts, cursor_by_request=_cursors_by_request
    )


def _replay_config(
    config: LaunchConfig | None, state: torch.Tensor, batch: int, tokens: int, exact: bool, stochastic: bool
) -> LaunchConfig:
    """The launch config: the caller's, else this device's table (mode "replay", or
    "replay-fast" for the fast route), else the built-in default."""
    if config is not None:
        return config
    headdim, dstate = state.shape[-2:]
    return lookup_config(
        headdim,
        dstate,
        state.dtype,
        batch,
        state.device,
        mode="replay" if exact else "replay-fast",
        tokens=tokens,
        stochastic=stochastic,
    )


def _check_pdl(pdl: bool, device: torch.device) -> bool:
    """Whether the launch is programmatic-dependent: pdl on a CUDA device (on the CPU, the
    interpreter's, it is dropped), which needs Triton >= 3.3."""
    pdl = pdl and device.type == "cuda"
    if pdl and gdc_wait is None:
        raise ValueError(f"pdl=True needs Triton >= 3.3; got Triton {triton.__version__}")
    return pdl


def exact_launch(call: ReplayCall) -> Launch:
    """The exact route's launch of a checked call (shaped as replay_fast.fast_launch)."""
    dstate = call.state.shape[-1]
    check_ordered_sum(call.config, triton.next_power_of_2(dstate), dstate)
    return call.launch(_selective_state_replay_kernel, {}, {"ORDERED_SUM": call.config.ordered_sum})


def _check_ring_length(ring: int, tokens: int, what: str) -> None:
    """R = window + T with window >= T, so R >= 2 T: the kernel replays up to R - T cached
    tokens and appends the T drafts behind them, and the flush rule (num_cached + 2 T > R) keeps
    num_cached <= R - T only if a flushed ring's T accepted drafts fit the window."""
    if ring < 2 * tokens:
        raise ValueError(
            f"{what}; T = {tokens} drafts need at least 2 T = {2 * tokens} (a window of at "
            "least T cached tokens, then the T drafts)"
        )


def _validate(
    state: torch.Tensor,
    ring_start: torch.Tensor,
    num_cached: torch.Tensor,
    slots_idx: torch.Tensor | None,
    pad_slot_id: int,
    ring: int,
    tokens: int,
    batch: int,
    cu_seqlens: torch.Tensor | None,
    total: int,
) -> None:
    """Value checks (synchronize; only on request): slots inside the pool, each slot's
    bookkeeping inside its ring, the packed offsets (from 0, non-decreasing, ending at the
    drafts of x, none longer than max_seqlen)."""
    slots = state.shape[0]
    if slots_idx is not None:
        validate_slots("state_batch_indices", slots_idx, slots, pad_slot_id)
    if cu_seqlens is not None:
        validate_cu_seqlens(
            cu_seqlens,
            total,
            tokens,
            f"max_seqlen is {tokens}, the most drafts a request (the T of the ring)",
        )
    used = torch.arange(batch) if slots_idx is None else slots_idx.cpu().long()
    _validate_bookkeeping(ring_start, num_cached, used[used != pad_slot_id], ring, tokens)


def _validate_bookkeeping(
    ring_start: torch.Tensor, num_cached: torch.Tensor, live: torch.Tensor, ring: int, tokens: int
) -> None:
    """The live slots' ring_start inside the ring [0, R) and num_cached inside its window
    [0, R - T] (synchronizes)."""
    start, cached = ring_start.cpu()[live], num_cached.cpu()[live]
    for name, values, high in (("ring_start", start, ring - 1), ("num_cached", cached, ring - tokens)):
        bad = (values < 0) | (values > high)
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"{name}[{int(live[i])}] = {int(values[i])} is outside [0, {high}] "
                f"(a ring of {ring} tokens, T = {tokens} drafts)"
            )


def selective_state_replay(
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
    out: torch.Tensor | None = None,
    config: LaunchConfig | None = None,
    *,
    cu_seqlens: torch.Tensor | None = None,
    max_seqlen: int | None = None,
    fast_exp: bool = False,
    validate_indices: bool | None = None,
    pdl: bool = False,
    rand_seed: torch.Tensor | None = None,
    philox_rounds: int = DEFAULT_PHILOX_ROUNDS,
    exact: bool = True,
) -> torch.Tensor:
    """A verify step of T draft tokens a request by replay (see the module docstring): the
    checkpoint state[slot] and its num_cached[slot] ring tokens replayed, the state written back
    only where the ring would overflow, the drafts' out computed and their inputs appended.

    Args:
        state: [S, H, P, N], the checkpoints; float32, bfloat16 or float16. Written in place
            for the requests that flush.
        x_cache, B_cache, dt_cache: the rings, [S, H, R, P] in x's dtype, [S, G, R, N] in B's
            dtype, [S, H, R] float32 (dt after dt_bias and softplus); R >= 2 T. The drafts'
            entries are written in place.
        ring_start, num_cached: int32 [S], each slot's oldest ring position and its accepted
            tokens since the checkpoint (read only; replay_advance updates them).
        x, dt, z, out: [B, T, H, P] (or [total_tokens, H, P] with cu_seqlens); dt tied over P.
        A: [H, P, N] tied over P and N. B, C: [B, T, G, N]. D, dt_bias: [H, P] (dt_bias tied).
        dt_softplus: softplus on dt + dt_bias (the ring holds the result).
        state_batch_indices: int32/int64 [B], each request's slot (default: slot b);
            pad_slot_id marks a padded request: no slot or ring read or written, out 0.
        out: preallocated like x; default new, x's dtype.
        config: force a LaunchConfig; default: this device's table (mode "replay"), else the
            built-in default.
        cu_seqlens, max_seqlen: the packed layout (int32/int64 [B + 1]) and the most drafts a
            request, the T of the flush rule.
        fast_exp: dA as exp2(log2(e) * A * dt'), vLLM's rounding (see selective_state_update).
        validate_indices: check index values (synchronizes; also the environment variable
            SSMDECODE_VALIDATE_INDICES=1): slots inside [0, S) or pad_slot_id, each used
            slot's ring_start inside [0, R) and num_cached inside [0, R - T], and cu_seqlens
            from 0, non-decreasing, ending at the drafts of x, none past max_seqlen. Types and
            shapes are checked always (with cu_seqlens, x may pack at most B * max_seqlen
            drafts).
        pdl: programmatic dependent launch, as selective_state_update's.
        rand_seed, philox_rounds: a 16-bit checkpoint written with stochastic rounding, as
            selective_state_update's (refresh the seed every step).
        exact: True (default), the recurrence's bits (this module's kernel); False, the fast
            route (replay_fast.py): the same semantics, ring, flush rule and cursors, out
            fp32-accurate from the checkpoint and the ring without building the state, a
            flushed checkpoint within 1e-5 max|state| of float64 (replay_fast.dual_flush says
            when it is the exact route's bits). T = 1 is the decode step.

    Returns:
        out.
    """
    result, launch = prepare(
        state,
        x_cache,
        B_cache,
        dt_cache,
        ring_start,
        num_cached,
        x,
        dt,
        A,
        B,
        C,
        D,
        z,
        dt_bias,
        dt_softplus,
        state_batch_indices,
        pad_slot_id,
        out,
        config,
        cu_seqlens=cu_seqlens,
        max_seqlen=max_seqlen,
        fast_exp=fast_exp,
        validate_indices=validate_indices,
        pdl=pdl,
        rand_seed=rand_seed,
        philox_rounds=philox_rounds,
        exact=exact,
    )
    run_on(state.device, launch)
    return result


# fmt: off
@triton.jit
def _advance_kernel(p_start, p_cached, p_accepted, p_slots, p_cu_seqlens, n, tokens, ring, pad_slot_id,
                    HAS_SLOTS: tl.constexpr, VARLEN: tl.constexpr, FLUSHED: tl.constexpr,
                    BLOCK: tl.constexpr):
    # Request b's slot: flushed when cached + its drafts + T > R (the kernel's rule) or
    # FLUSHED; then the ring starts past the cached tokens and holds the accepted drafts; else
    # it holds more. A packed request of no drafts was left alone.
    o_b = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_b = o_b < n
    if HAS_SLOTS:
        i_slot = tl.load(p_slots + o_b, mask=m_b, other=pad_slot_id).to(tl.int64)
        m_b = m_b & (i_slot != pad_slot_id)
    else:
        i_slot = o_b.to(tl.int64)
    start = tl.load(p_start + i_slot, mask=m_b, other=0)
    cached = tl.load(p_cached + i_slot, mask=m_b, other=0)
    accepted = tl.load(p_accepted + o_b, mask=m_b, other=0).to(tl.int32)
    if VARLEN:
        drafts = (tl.load(p_cu_seqlens + o_b + 1, mask=m_b, other=0)
                  - tl.load(p_cu_seqlens + o_b, mask=m_b, other=0)).to(tl.int32)
        drafts = tl.minimum(tl.maximum(drafts, 0), tokens)
        m_b = m_b & ((drafts > 0) | FLUSHED)
    else:
        drafts = tokens
    if FLUSHED:
        flush = cached >= 0
    else:
        flush = cached + drafts + tokens > ring
    tl.store(p_start + i_slot, tl.where(flush, (start + cached) % ring, start), mask=m_b)
    tl.store(p_cached + i_slot, tl.where(flush, 0, cached) + accepted, mask=m_b)
# fmt: on


_ADVANCE_BLOCK = 1024


def replay_advance(
    ring_start: torch.Tensor,
    num_cached: torch.Tensor,
    num_accepted: torch.Tensor,
    tokens: int,
    ring: int,
    state_batch_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
    flushed: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    *,
    validate_indices: bool | None = None,
) -> None:
    """The bookkeeping after a verify step, once for all layers (they share it): a request's
    slot flushed when num_cached + its drafts + T > R (num_cached + 2 T > R with T drafts a
    request), as the kernel decided; then ring_start advances by num_cached (mod R) and
    num_cached becomes num_accepted; otherwise num_cached grows by num_accepted. flushed=True:
    every slot flushed (after replay_flush). One small kernel on the device tensors, in place,
    no synchronization (CUDA-graph safe).

    Args:
        ring_start, num_cached: int32 [S], each slot's bookkeeping (updated in place).
        num_accepted: int32/int64 [B], the drafts each request accepted (0 to its drafts).
        tokens: T, an int: the drafts a request (max_seqlen with cu_seqlens).
        ring: R, an int: the rings' length, at least 2 T (R = window + T, window >= T).
        state_batch_indices: int32/int64 [B], each request's slot (default: slot b, S >= B);
            pad_slot_id marks a request whose slot is left alone.
        flushed: every request's slot was flushed (replay_flush ran).
        cu_seqlens: int32/int64 [B + 1], packed calls' offsets: a request's own draft count
            enters the flush rule, and a request of no drafts is left alone.
        validate_indices: check the values (synchronizes; also the environment variable
            SSMDECODE_VALIDATE_INDICES=1): slots inside [0, S) or pad_slot_id, cu_seqlens from
            0 and non-decreasing with no request past T, num_accepted inside [0, the request's
            drafts], each used slot's ring_start inside [0, R) and num_cached inside the
            window [0, R - T]. Given those, the rule keeps num_cached inside the window: a
            slot that does not flush had num_cached + drafts <= R - T, and one that flushes
            restarts at num_accepted <= T <= R - T. Types and shapes are checked always.
    """
    slots, n = _check_advance(
        ring_start, num_cached, num_accepted, tokens, ring, state_batch_indices, pad_slot_id, flushed, cu_seqlens
    )  # fmt: skip
    if validation_on(validate_indices):
        _validate_advance(
            ring_start, num_cached, num_accepted, tokens, ring, state_batch_indices, pad_slot_id, cu_seqlens,
            slots,
        )  # fmt: skip
    if n == 0:
        return
    device = ring_start.device
    if device.type != "cuda" and not interpreted():
        raise ValueError(f"ring_start is on {device}: CPU tensors run only under Triton's interpreter")
    grid = (triton.cdiv(n, _ADVANCE_BLOCK),)
    launch = Launch(
        _advance_kernel,
        grid,
        (
            ring_start,
            num_cached,
            num_accepted.contiguous(),
            None if state_batch_indices is None else state_batch_indices.contiguous(),
            cu_seqlens,
            n,
            tokens,
            ring,
            pad_slot_id,
        ),
        dict(
            HAS_SLOTS=state_batch_indices is not None,
            VARLEN=cu_seqlens is not None,
            FLUSHED=flushed,
            BLOCK=_ADVANCE_BLOCK,
            num_warps=4,
        ),
    )
    run_on(device, launch)


def _check_advance(
    ring_start: object,
    num_cached: object,
    num_accepted: object,
    tokens: object,
    ring: object,
    state_batch_indices: object,
    pad_slot_id: object,
    flushed: object,
    cu_seqlens: object,
) -> tuple[int, int]:
    """replay_advance's types and shapes (no value read); returns (S slots, B requests)."""
    if not isinstance(ring_start, torch.Tensor):
        raise TypeError(f"ring_start must be a torch.Tensor (int32 [S]), got {type(ring_start).__name__}")
    if ring_start.dim() != 1:
        raise ValueError(f"ring_start has shape {tuple(ring_start.shape)}; expected [S], one int32 a slot")
    slots, device = ring_start.shape[0], ring_start.device
    expect("ring_start", ring_start, (slots,), (torch.int32,), device, "(one int32 a slot)")
    expect("num_cached", num_cached, (slots,), (torch.int32,), device, "(one int32 a slot, as ring_start)")
    if not isinstance(num_accepted, torch.Tensor):
        raise TypeError(f"num_accepted must be a torch.Tensor (int [B]), got {type(num_accepted).__name__}")
    if num_accepted.dim() != 1:
        raise ValueError(
            f"num_accepted has shape {tuple(num_accepted.shape)}; expected [B], one count a request"
        )
    n = num_accepted.shape[0]
    expect("num_accepted", num_accepted, (n,), INDEX_DTYPES, device, "(the drafts each request accepted)")
    expect_type("tokens", tokens, int, "an int (T, the drafts a request; max_seqlen with cu_seqlens)")
    if tokens < 1:
        raise ValueError(f"tokens is {tokens}; expected T >= 1, the drafts a request")
    expect_type("ring", ring, int, "an int (R, the rings' length: x_cache.shape[2])")
    _check_ring_length(ring, tokens, f"ring is {ring}")
    expect_type("pad_slot_id", pad_slot_id, int, "an int (the slot index that marks a padded row)")
    expect_type("flushed", flushed, bool, "a bool")
    if state_batch_indices is not None:
        expect(
            "state_batch_indices",
            state_batch_indices,
            (n,),
            INDEX_DTYPES,
            device,
            "(one slot a request of num_accepted)",
        )
    elif n > slots:
        raise ValueError(
            f"num_accepted has {n} requests but ring_start {slots} slots; without "
            "state_batch_indices request b uses slot b"
        )
    if cu_seqlens is not None:
        expect("cu_seqlens", cu_seqlens, (n + 1,), INDEX_DTYPES, device, "(B + 1 offsets, B of num_accepted)")
    return slots, n


def _validate_advance(
    ring_start: torch.Tensor,
    num_cached: torch.Tensor,
    num_accepted: torch.Tensor,
    tokens: int,
    ring: int,
    state_batch_indices: torch.Tensor | None,
    pad_slot_id: int,
    cu_seqlens: torch.Tensor | None,
    slots: int,
) -> None:
    """replay_advance's value checks (synchronize; only on request): see its docstring."""
    n = num_accepted.shape[0]
    if state_batch_indices is not None:
        validate_slots("state_batch_indices", state_batch_indices, slots, pad_slot_id)
        used = state_batch_indices.cpu().long()
    else:
        used = torch.arange(n)
    if cu_seqlens is not None:
        drafts = validate_cu_seqlens(cu_seqlens, None, tokens, f"tokens (max_seqlen) is {tokens}")
    else:
        drafts = torch.full((n,), tokens)
    live = used != pad_slot_id
    _validate_accepted(num_accepted, drafts, live)
    _validate_bookkeeping(ring_start, num_cached, used[live], ring, tokens)


def _validate_accepted(num_accepted: torch.Tensor, drafts: torch.Tensor, live: torch.Tensor) -> None:
    """Each live request accepted 0 to its drafts (synchronizes)."""
    accepted = num_accepted.cpu().long()
    bad = live & ((accepted < 0) | (accepted > drafts))
    if bool(bad.any()):
        b = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"num_accepted[{b}] = {int(accepted[b])} is outside [0, {int(drafts[b])}], the drafts "
            f"of request {b}"
        )


def replay_flush(
    state: torch.Tensor,
    x_cache: torch.Tensor,
    B_cache: torch.Tensor,
    dt_cache: torch.Tensor,
    ring_start: torch.Tensor,
    num_cached: torch.Tensor,
    A: torch.Tensor,
    state_batch_indices: torch.Tensor,
    pad_slot_id: int = -1,
    config: LaunchConfig | None = None,
    *,
    fast_exp: bool = False,
    rand_seed: torch.Tensor | None = None,
    philox_rounds: int = DEFAULT_PHILOX_ROUNDS,
) -> None:
    """Materialize the slots' states of one layer (before preemption, swap-out or slot reuse):
    each checkpoint plus its cached tokens replayed and written to state[slot]. Call it for
    every layer, then replay_advance(..., num_accepted=zeros, flushed=True) once, which moves
    each ring past the tokens now in the state. The bookkeeping is only read here. rand_seed,
    philox_rounds: a 16-bit state written with stochastic rounding (selective_state_update's)."""
    nheads, headdim, dstate = state.shape[1:]
    batch = state_batch_indices.shape[0]
    ngroups = B_cache.shape[1]
    device = state.device
    # One dummy draft a request through the same kernel with the flush forced: its out is
    # discarded, and its ring entry lands past the cached tokens, where later drafts go.
    x = torch.zeros(batch, 1, nheads, headdim, dtype=x_cache.dtype, device=device)
    dt = torch.zeros(batch, 1, nheads, 1, dtype=torch.float32, device=device).expand(
        batch, 1, nheads, headdim
    )
    Bz = torch.zeros(batch, 1, ngroups, dstate, dtype=B_cache.dtype, device=device)
    _, launch = prepare(
        state,
        x_cache,
        B_cache,
        dt_cache,
        ring_start,
        num_cached,
        x,
        dt,
        A,
        Bz,
        Bz,
        state_batch_indices=state_batch_indices,
        pad_slot_id=pad_slot_id,
        config=config,
        fast_exp=fast_exp,
        rand_seed=rand_seed,
        philox_rounds=philox_rounds,
        _flush=True,
    )
    run_on(device, launch)
