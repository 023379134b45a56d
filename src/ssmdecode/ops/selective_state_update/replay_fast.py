r"""Replay's fast route: the verify step (T >= 2) and the decode step (T = 1) by replay without
materialising the state, fp32-accurate but not the recurrence's bits.

selective_state_replay(..., exact=False) runs this kernel: the same arguments, ring, flush rule,
cursors and replay_advance as the exact route (replay.py's docstring), so either route reads
the rings and checkpoints the other wrote. A request's program decides, as the exact kernel
does, whether this call flushes (num_cached + n + T > R, n its drafts; always in replay_flush):

- out is computed in the dual form, never from a materialised state. With the k cached
  tokens j = 0 .. k - 1 in age order (ring row (ring_start + j) mod R), their dt'_j,
  S = sum_j dt'_j, w_j = dt'_j exp(A r_j) (r_j = dt'_{j+1} + .. + dt'_{k-1}, summed from the
  newest token back: the decay from token j to the last cached one), and for draft t its
  drafts' cumulative d_t = dt'_0 + .. + dt'_t:

      y_t = exp(A d_t) [exp(A S) (h0 . C_t) + sum_j w_j (C_t . B_j) x_j]
            + sum_{u <= t} exp(A (d_t - d_u)) dt'_u (C_t . B_u) x_u + D x_t,

  then the z gate. The checkpoint h0 is read once; the ring is gathered at once in age order
  (x, B and dt' of RP rows, RP = max(16, the window's next power of 2), masked past
  num_cached). The Grams C_t . B_j are computed once a (request, group) by _gram_kernel from
  GRAM_MIN_REQUESTS requests on (launched first; the main kernel, programmatic-dependent on
  it, issues its state loads before it waits, or with LATE_WAIT all it reads but the Grams),
  else by each program. Decode (T = 1) works on
  vectors: h0 . C one row sum over N, the weighted sum over the ring one over RP. Verify
  (T >= 2) either takes the drafts one by one (a row sum h0 . C_t and two short sums a draft,
  out stored a draft at a time) or as tiles of TD = max(16, next power of 2 of T) drafts on
  the tensor cores (_tiles decides by T and the batch): h0 C^T with h0 split in three bf16
  parts, x_ring W and x_drafts L with the float32 weights split likewise (_dot_split: 24 bits,
  float32's mantissa, every product exact, float32 sums);
- a flush (the cached tokens and the drafts overflow the window, every R - T tokens or so;
  always in replay_flush) also stores the new checkpoint, h0 with the k cached tokens absorbed.
  Where dual_flush allows (tiles of 16 rows or more) in the dual form,
  exp(A S) h0 + x_ring (w B_ring), one matmul of K = RP (_dot_split; in the tiles' kernels and
  the flush programs, and in decode, onto the decayed tile, (x_ring w) B_ring: _absorb_mma, with
  no accumulator beside the tile, so at any tile of 16 rows or more); else token by token with
  the exact kernel's operations (s = fma(s, exp(A dt'_k), (B_k dt'_k) x_k)), which then
  stores the exact route's bits (a 16-bit state: the same stochastic rounding either way).
  A decode flush's out comes from that state with the token added by the recurrence (under
  FLUSH_DRAFTS the token is absorbed into the stored state too). Where the flushes run
  depends on the batch (fast_launch): in the programs of the flushing requests below
  FLUSH_PROGRAMS_MIN_REQUESTS requests; from there up to SIDE_DECODE_MIN_REQUESTS in flush
  programs that come first in the main kernel's grid and take those requests' whole steps
  (ROLE 4, _decode_flushes), PROGRAMS_TAKE requests each at most, the requests past those
  flushing in their own programs (_own_flush); from SIDE_DECODE_MIN_REQUESTS on in flush
  programs alone (ROLE 6), a few on a stream of their own beside the Grams and the main
  kernel (ROLE 5, which leaves those requests) and the rest in a kernel after it, whose
  programs pipeline their requests (_side_flush, _decode_flushes_ahead). Without that route,
  from SPLIT_DECODE_MIN_REQUESTS on in a kernel of their own after the main kernel, which then
  stores no state (ROLE 1 and 2).
  The verify step gives its flushing requests whole to flush programs on a stream of their
  own beside the Grams and the main kernel from BESIDE_MIN_REQUESTS requests on (ROLE 7 beside
  ROLE 5, _flush_beside): each flushes first, on the state tile it holds, the ring absorbed as
  one matmul onto the tile (_absorb_mma), and computes out from the new checkpoint with nothing
  cached, so h0 is read once (beside the tiles' main kernel from BESIDE_TILES_MIN_REQUESTS on,
  tiles too, the tile read and flushed in passes of columns: _tiles_cols' FIRST). With fewer
  requests the main kernel keeps them (the tiles' flush then pass by pass too, from
  TILES_COLS_MIN_REQUESTS requests: _tiles_cols). The draft-by-draft step can split them off
  into a kernel after the main kernel instead, as decode does (_split_flush, SPLIT_FLUSH: from
  SPLIT_FROM_TOKENS drafts and SPLIT_MIN_REQUESTS requests, where the flush programs beside are
  off).

Either way the drafts' x, B and dt' are appended to the ring at rows ring_start + num_cached +
t, as the exact kernel does (the same values), and nothing else is written; no atomics, so the
same inputs give the same bits.

Accuracy (docs/numerics.md): every term is float32 from the stored inputs, as the recurrence's;
the dual form re-associates the sums and replaces products of exps by an exp of a sum, a few
float32 ulps, far below the bf16 rounding of out (tests/test_replay_fast.py holds out to 1 bf16
ulp of the float64 recurrence, floored at float32's summation floor (numerics.out_resolution),
and the flushed state to 1e-5 max|state|).

Decode (T = 1): the engine calls the fast route every step with one token a request and
replay_advance(..., num_accepted=1, tokens=1, ring=R) after it; prefill writes its final state
into the slot as the checkpoint with num_cached = 0. With R = 16 a slot's state is written once
every 15 steps instead of every step (docs/compat.md, "Replay decode").

Engine conventions (compat.vllm's ReplaySSM adapter) use three private options of the launch,
each a constexpr: the flush decided by the host (one int8 a request, HOST_FLUSH), a flush that
absorbs the drafts too and appends nothing (FLUSH_DRAFTS, vLLM's ring restart), and cursors
kept a request rather than a slot with the ring starting at row 0 (CURSOR_BY_REQUEST,
HAS_RING_START).

Shapes as replay.py's (B requests, T drafts, H heads, P head dim, N state dim, G groups, S
slots, R ring).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

from ssmdecode.config import LaunchConfig
from ssmdecode.ops._gdc import gdc_launch_dependents, gdc_wait
from ssmdecode.ops.selective_state_update.common import (
    _INTERPRETED,
    STREAM_STATE,
    both,
    exp_dA,
    gated_out,
    live_mask,
    load,
    load_state,
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
    given,
)

__all__ = ["fast_launch"]

_HEURISTICS = {
    **HEURISTICS,
    **given(VARLEN="p_cu_seqlens", HOST_FLUSH="p_flush", HAS_RING_START="p_ring_start", GRAM="p_gram"),
}
_GRAM_HEURISTICS = given(
    HAS_SRC_IDX="p_src_idx",
    VARLEN="p_cu_seqlens",
    HAS_RING_START="p_ring_start",
    HAS_DT_BIAS="p_dt_bias",
    HOST_FLUSH="p_flush",
)


# fmt: off
@triton.jit
def _mma(a, b, acc):
    """acc + a @ b for 16-bit tiles of one dtype, float32 accumulation, on the tensor cores.
    (Triton 3.6's interpreter multiplies 16-bit tiles wrongly: there, as float32; the values
    and so the exact products are the same.)"""
    if _INTERPRETED:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee", out_dtype=tl.float32)
    else:
        return tl.dot(a, b, acc, out_dtype=tl.float32)


@triton.jit
def _dot_exact(a, b, MMA16: tl.constexpr):
    """a @ b in float32 where the products are exact: 16-bit a and b of one dtype on the tensor
    cores (their products fit float32's mantissa; float32 accumulation), else float32 FMAs."""
    if MMA16:
        return _mma(a, b, None)
    else:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee", out_dtype=tl.float32)


@triton.jit
def _dot_split(a, b, X16: tl.constexpr):
    """a @ b for a bf16 tile a and a float32 tile b, float32-accurate: b split into three
    bf16 parts (b = b1 + b2 + b3 to float32's 24 bits), each product exact on the tensor cores,
    the small parts first; without X16 (a not bf16), float32 FMAs."""
    if X16:
        b1 = b.to(tl.bfloat16)
        r1 = b - b1.to(tl.float32)
        b2 = r1.to(tl.bfloat16)
        b3 = (r1 - b2.to(tl.float32)).to(tl.bfloat16)
        acc = _mma(a, b3, None)
        acc = _mma(a, b2, acc)
        return _mma(a, b1, acc)
    else:
        return tl.dot(a.to(tl.float32), b, input_precision="ieee", out_dtype=tl.float32)


@triton.jit
def _dot_split_a(a, b, B16: tl.constexpr, acc=None):
    """(acc +) a @ b for a float32 tile a and a bf16 tile b, float32-accurate: a split into three
    bf16 parts, each product exact on the tensor cores, the small parts first; without B16 (b not
    bf16), float32 FMAs."""
    if B16:
        a1 = a.to(tl.bfloat16)
        r1 = a - a1.to(tl.float32)
        a2 = r1.to(tl.bfloat16)
        a3 = (r1 - a2.to(tl.float32)).to(tl.bfloat16)
        acc = _mma(a3, b, acc)
        acc = _mma(a2, b, acc)
        return _mma(a1, b, acc)
    else:
        return tl.dot(a, b.to(tl.float32), acc, input_precision="ieee", out_dtype=tl.float32)


class _Ring(NamedTuple):
    """A request's ring as this program reads it: the pointers of its x rows (this program's
    rows of the head dim), B rows (its group's columns) and dt' (its head), their strides over
    the ring, where it starts and how many cached tokens it holds, its length; the masks of the
    program's rows and columns (None: none masked) and of the live request (None without
    indices)."""

    p_x: Any
    p_B: Any
    p_dt: Any
    stride_x: Any
    stride_B: Any
    stride_dt: Any
    start: Any
    n_old: Any
    ring: Any
    m_vm: Any
    m_vn: Any
    m_live: Any


class _Checkpoint(NamedTuple):
    """Where the request's new checkpoint goes: the tile's pointers and mask (None: unmasked),
    the seed's pointer, and the slot, head and rows with the pool's strides, which give the
    rows' offsets that key the random bits."""

    p_tile: Any
    m_tile: Any
    p_seed: Any
    i_slot: Any
    i_h: Any
    o_m: Any
    stride_s: Any
    stride_h: Any
    stride_p: Any


@triton.jit
def _cursors(p_src_idx, p_cached, p_ring_start, i_b, stride_src_idx, pad_slot_id, ring, WINDOW: tl.constexpr,
             CURSOR_BY_REQUEST: tl.constexpr, HAS_SRC_IDX: tl.constexpr, HAS_RING_START: tl.constexpr,
             EVICT_FIRST: tl.constexpr):
    """Request i_b's slot and ring cursors, the one reading of them the main and the Gram
    kernels share: (i_slot, m_live, i_ring, n_old, start), the ring's slot 0 for a pad request
    (which reads no bookkeeping: its cursors 0), num_cached clamped to the window and
    ring_start into the ring (0 without ring_start), keyed by request with CURSOR_BY_REQUEST."""
    i_slot = slot_index(p_src_idx, i_b * stride_src_idx, i_b.to(tl.int64), HAS_SRC_IDX, EVICT_FIRST)
    m_live = live_mask(i_slot, pad_slot_id, HAS_SRC_IDX)
    i_ring = i_slot
    if HAS_SRC_IDX:
        i_ring = tl.where(m_live, i_slot, 0)  # a pad request reads no bookkeeping
    i_cur = i_b.to(tl.int64) if CURSOR_BY_REQUEST else i_ring
    if HAS_SRC_IDX:
        n_old = tl.load(p_cached + i_cur, mask=m_live, other=0).to(tl.int32)
    else:
        n_old = tl.load(p_cached + i_cur).to(tl.int32)
    n_old = tl.minimum(tl.maximum(n_old, 0), WINDOW)  # never past the ring's old rows
    if HAS_RING_START:
        if HAS_SRC_IDX:
            start = tl.load(p_ring_start + i_cur, mask=m_live, other=0).to(tl.int32)
        else:
            start = tl.load(p_ring_start + i_cur).to(tl.int32)
        start = tl.minimum(tl.maximum(start, 0), ring - 1)  # never outside the ring
    else:
        start = 0
    return i_slot, m_live, i_ring, n_old, start


@triton.jit
def _replay_cached(b_state, rg, b_A, WINDOW: tl.constexpr, FAST_EXP: tl.constexpr, HAS_SRC_IDX: tl.constexpr):
    """The checkpoint b_state [BLOCK_M, BLOCK_N] with the rg.n_old cached tokens of its ring rg
    (_Ring) replayed in order, with the exact kernel's operations (replay.py):
    s = fma(s, exp(A dt'), (B dt') x)."""
    # A loop of n_old tokens (Triton's interpreter takes no runtime trip count: there the
    # window, each token past the count skipped); the same operations either way.
    for k in range(0, WINDOW if _INTERPRETED else rg.n_old):
        if k < rg.n_old:
            m_k = k < rg.n_old
            if HAS_SRC_IDX:
                m_k = m_k & rg.m_live
            pos = wrap(rg.start + k, rg.ring)
            b_xk = tl.load(rg.p_x + pos * rg.stride_x, mask=both(rg.m_vm, m_k), other=0.0).to(tl.float32)
            b_Bk = tl.load(rg.p_B + pos * rg.stride_B, mask=both(rg.m_vn, m_k), other=0.0).to(tl.float32)
            b_dtk = tl.load(rg.p_dt + pos * rg.stride_dt, mask=m_k, other=0.0)
            b_state = tl.fma(b_state, exp_dA(b_A * b_dtk, FAST_EXP), (b_Bk * b_dtk)[None, :] * b_xk[:, None])
    return b_state


@triton.jit
def _absorb_mma(b_state, rg, pos_r, m_r, b_S, b_w, b_A, B16: tl.constexpr, FAST_EXP: tl.constexpr, b_xr=None,
                b_Br=None):
    """The checkpoint b_state [BLOCK_M, BLOCK_N] with the cached tokens of its ring rg (_Ring,
    gathered at pos_r, m_r: _ring_positions') absorbed in the dual form on the tile itself:
    exp(A S) h0 + (x_ring w) B_ring, one matmul of K = RP accumulating onto the decayed tile
    (_dot_split_a: the float32 x_j w_j split in three bf16 parts against the ring's bf16 B rows,
    every product exact; B16 off, float32 FMAs): no pass over the tile a token, no accumulator
    beside it. The ring's x and B rows as gathered (_ring_x's, _ring_B's) are loaded here where
    b_xr, b_Br are None."""
    if b_Br is None:
        b_Br = _ring_B(rg, pos_r, m_r)
    if b_xr is None:
        b_xr = _ring_x(rg, pos_r, m_r)
    b_xw = b_xr.to(tl.float32) * b_w[None, :]
    return _dot_split_a(b_xw, b_Br, B16, exp_dA(b_A * b_S, FAST_EXP) * b_state)


@triton.jit
def _ring_x(rg, pos_r, m_r):
    """The ring's x rows of this program's head rows, gathered at pos_r as [BLOCK_M, RP] (a
    column a cached token, 0 where m_r is off), in the ring's dtype."""
    m_xr = m_r[None, :] if rg.m_vm is None else rg.m_vm[:, None] & m_r[None, :]
    return tl.load(rg.p_x[:, None] + pos_r[None, :] * rg.stride_x, mask=m_xr, other=0.0)


@triton.jit
def _ring_B(rg, pos_r, m_r):
    """The ring's B rows of this program's columns, gathered at pos_r as [RP, BLOCK_N] (a row a
    cached token, 0 where m_r is off), in the ring's dtype."""
    m_Br = m_r[:, None] if rg.m_vn is None else m_r[:, None] & rg.m_vn[None, :]
    return tl.load(rg.p_B[None, :] + pos_r[:, None] * rg.stride_B, mask=m_Br, other=0.0)


@triton.jit
def _dual_absorb(b_h0, b_xr, b_Br, b_S, b_w, b_A, X16: tl.constexpr, FAST_EXP: tl.constexpr):
    """The checkpoint b_h0 with the ring absorbed in the dual form: exp(A S) h0 + x_ring (w B_ring),
    b_xr [BLOCK_M, RP] and b_Br [RP, BLOCK_N] (float32) the ring's rows (_ring_x, _ring_B), b_S
    and b_w _ring_weights'."""
    return exp_dA(b_A * b_S, FAST_EXP) * b_h0 + _dot_split(b_xr, b_w[:, None] * b_Br, X16)


@triton.jit
def _flushed_state(b_h0, rg, b_xr, pos_r, m_r, b_S, b_w, b_A, DUAL: tl.constexpr, X16: tl.constexpr,
                   WINDOW: tl.constexpr, FAST_EXP: tl.constexpr, HAS_SRC_IDX: tl.constexpr, b_Br=None):
    """The checkpoint b_h0 [BLOCK_M, BLOCK_N] with the rg.n_old cached tokens of its ring rg
    (_Ring) absorbed. DUAL: in the dual form, exp(A S) h0 + x_ring (w B_ring), with b_xr the
    ring's x rows as gathered [BLOCK_M, RP] (0 past n_old, in their dtype), B_ring b_Br (_ring_B's,
    loaded here where None) and b_w, b_S _ring_weights'; one matmul of K = RP on the tensor cores (_dot_split: every product exact,
    float32 sums) instead of n_old passes over the tile; DUAL 2 (_flush_form) onto the
    decayed tile, (x_ring w) B_ring (_absorb_mma). Else the exact kernel's operations
    (_replay_cached), token by token."""
    if DUAL == 2:
        B16: tl.constexpr = rg.p_B.dtype.element_ty == tl.bfloat16
        b_state = _absorb_mma(b_h0, rg, pos_r, m_r, b_S, b_w, b_A, B16, FAST_EXP, b_xr, b_Br)
    elif DUAL:
        if b_Br is None:
            b_Br = _ring_B(rg, pos_r, m_r)
        b_state = _dual_absorb(b_h0, b_xr, b_Br.to(tl.float32), b_S, b_w, b_A, X16, FAST_EXP)
    else:
        b_state = _replay_cached(b_h0, rg, b_A, WINDOW, FAST_EXP, HAS_SRC_IDX)
    return b_state


@triton.jit
def _ring_weights(b_dtr, rg, o_r, b_A, HAS_SRC_IDX: tl.constexpr, FAST_EXP: tl.constexpr):
    """The decay weights of the ring rg (_Ring): S = the cached tokens' dt' summed, and
    w_j = dt'_j exp(A r_j) [RP] with r_j = dt'_{j+1} + .. + dt'_{n_old-1} (zero past n_old), the decay from cached token
    j (age order, dt'_j = b_dtr[j]) to the newest. Each r_j is summed from the newest token back
    over the ring's dt' loaded one row further on (the same cache lines), a sum of positive terms
    with float32's error of its own size; the difference S - c_j of inclusive prefix sums
    carries the error of S, |A| eps S relative in the newest tokens' weights, the largest. On
    the GPU the two gave the same worst out error (the float32 floor of near-cancelling
    outputs dominates: docs/numerics.md) and a mean error as low or lower."""
    return _ring_decay(b_dtr, _ring_dt_next(rg, o_r, HAS_SRC_IDX), b_A, FAST_EXP)


@triton.jit
def _ring_dt_next(rg, o_r, HAS_SRC_IDX: tl.constexpr):
    """The ring's dt' one row further on in age order [RP] (cached token j + 1 at j, 0 from
    n_old - 1 on)."""
    m_r1 = (o_r + 1) < rg.n_old
    if HAS_SRC_IDX:
        m_r1 = m_r1 & rg.m_live
    pos_r1 = tl.where(m_r1, wrap(rg.start + o_r + 1, rg.ring), 0)
    return tl.load(rg.p_dt + pos_r1 * rg.stride_dt, mask=m_r1, other=0.0)


@triton.jit
def _ring_decay(b_dtr, b_dtr1, b_A, FAST_EXP: tl.constexpr, AXIS: tl.constexpr = 0):
    """(S, w) of _ring_weights from the ring's dt' b_dtr and the same one row on, b_dtr1, over
    their axis AXIS (1: a row a head, b_A [heads, 1])."""
    b_r = tl.cumsum(b_dtr1, axis=AXIS, reverse=True)
    b_w = b_dtr * exp_dA(b_A * b_r, FAST_EXP)  # b_dtr is 0 past n_old: so is w
    return tl.sum(b_dtr, axis=AXIS), b_w


@triton.jit
def _ring_pointers(p_x_cache, p_B_cache, p_dt_cache, i_ring, i_h, i_g, o_m, o_n, stride_xc_s, stride_xc_h,
                   stride_xc_p, stride_Bc_s, stride_Bc_g, stride_Bc_n, stride_dtc_s, stride_dtc_h):
    """The ring of slot i_ring as this program reads it: the pointers of the x rows of its
    head's rows o_m, the B rows of its group's columns o_n and the dt' of its head (row 0)."""
    p_xc = p_x_cache + i_ring * stride_xc_s + i_h * stride_xc_h + o_m * stride_xc_p
    p_Bc = p_B_cache + i_ring * stride_Bc_s + i_g * stride_Bc_g + o_n * stride_Bc_n
    p_dtc = p_dt_cache + i_ring * stride_dtc_s + i_h * stride_dtc_h
    return p_xc, p_Bc, p_dtc


@triton.jit
def _ring_positions(n_old, start, ring, m_live, RP: tl.constexpr, HAS_SRC_IDX: tl.constexpr):
    """A ring of n_old cached tokens from row start in age order: (o_r, m_r, pos_r) [RP], the
    rows, their mask (off past n_old and for a pad request) and their rows in the ring (0 where
    off)."""
    o_r = tl.arange(0, RP)
    m_r = o_r < n_old
    if HAS_SRC_IDX:
        m_r = m_r & m_live
    return o_r, m_r, tl.where(m_r, wrap(start + o_r, ring), 0)


@triton.jit
def _flushes(p_flush, i_b, n_old, n_tok, ring, T: tl.constexpr, FLUSH: tl.constexpr, HOST_FLUSH: tl.constexpr):
    """Whether request i_b's call flushes: always (FLUSH, replay_flush), by the host's flag
    (HOST_FLUSH), else by the exact route's rule, its cached tokens and drafts overflowing the ring."""
    if FLUSH:
        return n_old >= 0
    elif HOST_FLUSH:
        return tl.load(p_flush + i_b) != 0
    else:
        return n_old + n_tok + T > ring


@triton.jit
def _ring_decays(rg, o_r, m_r, pos_r, b_A, HAS_SRC_IDX: tl.constexpr, FAST_EXP: tl.constexpr):
    """(S, w) of the ring rg (_Ring) at its rows pos_r (_ring_positions'): _ring_weights' from
    its dt'."""
    b_dtr = tl.load(rg.p_dt + pos_r * rg.stride_dt, mask=m_r, other=0.0)
    return _ring_weights(b_dtr, rg, o_r, b_A, HAS_SRC_IDX, FAST_EXP)


@triton.jit
def _ring_rows(rg, b_A, RP: tl.constexpr, HAS_SRC_IDX: tl.constexpr, FAST_EXP: tl.constexpr):
    """The ring rg (_Ring) gathered in age order, masked past its n_old cached tokens: (o_r,
    m_r, pos_r, S, w) [RP], the rows, their mask and ring positions, and _ring_weights'."""
    o_r, m_r, pos_r = _ring_positions(rg.n_old, rg.start, rg.ring, rg.m_live, RP, HAS_SRC_IDX)
    b_S, b_w = _ring_decays(rg, o_r, m_r, pos_r, b_A, HAS_SRC_IDX, FAST_EXP)
    return o_r, m_r, pos_r, b_S, b_w


@triton.jit
def _append_token(rg, pos, b_x, b_dt, b_B, m_app, i_m, i_h, HEADS_PER_GROUP: tl.constexpr,
                  X_ONLY: tl.constexpr = False):
    """The decode token appended to the ring rg (_Ring) at row pos, as the exact kernel appends
    it: x by each program of its rows, dt' by the head's first, B by the group's first head's
    (m_app: whether the request appends, None: it does); X_ONLY: x alone (the Grams' kernel
    appends dt' and B with WEIGHTS)."""
    tl.store(rg.p_x + pos * rg.stride_x, b_x, mask=both(rg.m_vm, m_app))
    if i_m == 0 and not X_ONLY:
        if m_app is None:
            tl.store(rg.p_dt + pos * rg.stride_dt, b_dt)
        else:
            tl.store(rg.p_dt + pos * rg.stride_dt, b_dt, mask=m_app)
        if i_h % HEADS_PER_GROUP == 0:
            tl.store(rg.p_B + pos * rg.stride_B, b_B, mask=both(rg.m_vn, m_app))


@triton.jit
def _chunked_tile(i_h, o_m, m_m, dstate, m_live, stride_h, stride_p, stride_n, PACKED_ROWS: tl.constexpr,
                  EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  CHUNK: tl.constexpr):
    """(o_tile, m_tile): tile_addressing's offsets of the state tile (after its o_base) and the
    tile's mask, shaped [BLOCK_M, BLOCK_N / CHUNK, CHUNK] (column c CHUNK + k at [:, c, k]). Triton
    lays a load's threads over its last, contiguous, dimension first and then over the rows, so a
    thread holds BLOCK_N / CHUNK chunks of a row: a row sum over N then adds in registers and
    shuffles over CHUNK / 4 lanes, not BLOCK_N / 4 (the loaded tile is reshaped to [BLOCK_M,
    BLOCK_N], which moves no data). A warp's 16-byte access still covers whole 32-byte sectors."""
    o_n = (tl.arange(0, BLOCK_N // CHUNK)[:, None] * CHUNK + tl.arange(0, CHUNK)[None, :])[None, :, :]
    if PACKED_ROWS:
        o_tile = tl.arange(0, BLOCK_M)[:, None, None] * BLOCK_N + o_n
    else:
        o_tile = i_h * stride_h + o_m[:, None, None] * stride_p + o_n * stride_n
    m_tile = None
    if not EVEN_M:
        m_tile = m_m[:, None, None]
    if not EVEN_N:
        m_tile = both(m_tile, o_n < dstate)
    return o_tile, both(m_tile, m_live)


@triton.jit
def _store_state(b_state, ck, STOCHASTIC: tl.constexpr, PHILOX_ROUNDS: tl.constexpr, BLOCK_N: tl.constexpr,
                 EVICT_FIRST: tl.constexpr):
    """The new checkpoint b_state stored where ck (_Checkpoint) says, as the exact kernel
    stores it (its stochastic rounding for a 16-bit state with a seed)."""
    if STOCHASTIC:
        o_row = ck.i_slot * ck.stride_s + ck.i_h * ck.stride_h + ck.o_m * ck.stride_p
        b_store = stored(b_state, ck.p_tile.dtype.element_ty, tl.load(ck.p_seed), o_row, STREAM_STATE, True,
                         PHILOX_ROUNDS, BLOCK_N, False)
    else:
        b_store = b_state.to(ck.p_tile.dtype.element_ty)
    if len(ck.p_tile.shape) == 3:  # the chunked tile's addressing (_chunked_tile)
        b_store = tl.reshape(b_store, ck.p_tile.shape)
    store_state(ck.p_tile, b_store, ck.m_tile, EVICT_FIRST)
# fmt: on


class _Token(NamedTuple):
    """The decode token's inputs and its out, as a flush program reads and writes them: the
    pointers (None where not given), the total tokens of a packed call (cu_seqlens), and the
    strides."""

    p_x: Any
    p_dt: Any
    p_dt_bias: Any
    p_B: Any
    p_C: Any
    p_D: Any
    p_z: Any
    p_out: Any
    p_cu_seqlens: Any
    total_tokens: Any
    stride_x_b: Any
    stride_x_t: Any
    stride_x_h: Any
    stride_x_p: Any
    stride_dt_b: Any
    stride_dt_t: Any
    stride_dt_h: Any
    stride_dt_bias_h: Any
    stride_B_b: Any
    stride_B_t: Any
    stride_B_g: Any
    stride_B_n: Any
    stride_C_b: Any
    stride_C_t: Any
    stride_C_g: Any
    stride_C_n: Any
    stride_D_h: Any
    stride_D_p: Any
    stride_z_b: Any
    stride_z_t: Any
    stride_z_h: Any
    stride_z_p: Any
    stride_out_b: Any
    stride_out_t: Any
    stride_out_h: Any
    stride_out_p: Any


class _Step(NamedTuple):
    """A verify program's values that its out (_drafts_out) reads: the ring's gathered x, the
    drafts' x, B and dt', A and D; the ring (_Ring) and its rows (_ring_positions'), the drafts'
    offsets, the drafts' inputs and out (_Token), the request's token span, the program's
    request, head, group, rows and columns with their masks, and the Grams."""

    b_xr: Any
    b_xd: Any
    b_Bd: Any
    b_dtd: Any
    b_A: Any
    b_D: Any
    rg: Any
    pos_r: Any
    o_r: Any
    m_r: Any
    o_t: Any
    tok: Any
    i_xb: Any
    t0: Any
    n_tok: Any
    i_b: Any
    i_h: Any
    i_g: Any
    o_m: Any
    o_n: Any
    m_vm: Any
    m_vn: Any
    m_live: Any
    p_gram: Any
    stride_gram_b: Any
    stride_gram_g: Any


class _Pool(NamedTuple):
    """The state pool, its rings and cursors as the decode flush programs read and write them:
    the pointers (None where not given), the sizes, and the strides."""

    p_state: Any
    p_x_cache: Any
    p_B_cache: Any
    p_dt_cache: Any
    p_ring_start: Any
    p_cached: Any
    p_src_idx: Any
    p_seed: Any
    p_A: Any
    headdim: Any
    dstate: Any
    pad_slot_id: Any
    ring: Any
    stride_state_s: Any
    stride_state_h: Any
    stride_state_p: Any
    stride_state_n: Any
    stride_xc_s: Any
    stride_xc_h: Any
    stride_xc_r: Any
    stride_xc_p: Any
    stride_Bc_s: Any
    stride_Bc_g: Any
    stride_Bc_r: Any
    stride_Bc_n: Any
    stride_dtc_s: Any
    stride_dtc_h: Any
    stride_dtc_r: Any
    stride_A_h: Any
    stride_src_idx: Any


# fmt: off
@triton.jit
def _decode_flush(i_b, i_m, i_h, pool, tok,
                  WINDOW: tl.constexpr, RP: tl.constexpr, X16: tl.constexpr, DUAL_FLUSH: tl.constexpr,
                  FLUSH_DRAFTS: tl.constexpr, CURSOR_BY_REQUEST: tl.constexpr, HEADS_PER_GROUP: tl.constexpr,
                  DT_SOFTPLUS: tl.constexpr, HAS_DT_BIAS: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr,
                  HAS_SRC_IDX: tl.constexpr, HAS_RING_START: tl.constexpr, VARLEN: tl.constexpr,
                  EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, PACKED_ROWS: tl.constexpr, FAST_EXP: tl.constexpr,
                  STOCHASTIC: tl.constexpr, PHILOX_ROUNDS: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, EVICT_FIRST: tl.constexpr, PDL: tl.constexpr, OUT: tl.constexpr):
    """The decode flush of request i_b (one that flushes), rows i_m of head i_h: its new
    checkpoint, h0 with its cached tokens absorbed (_flushed_state; under FLUSH_DRAFTS the
    token too, with the main kernel's operations), stored after the wait (PDL). OUT: all of
    the request's step, as the main kernel's flush does it (ROLE 0): out from the checkpoint
    with the token, and the token appended (none under FLUSH_DRAFTS); else the checkpoint
    only, the main kernel's reads of h0 being the one thing its wait orders. pool: _Pool, tok:
    _Token."""
    i_g = i_h // HEADS_PER_GROUP
    i_slot, m_live, i_ring, n_old, start = _cursors(
        pool.p_src_idx, pool.p_cached, pool.p_ring_start, i_b, pool.stride_src_idx, pool.pad_slot_id, pool.ring,
        WINDOW, CURSOR_BY_REQUEST, HAS_SRC_IDX, HAS_RING_START, EVICT_FIRST)
    o_m, o_n, m_m, m_n = tile_offsets(i_m, pool.headdim, pool.dstate, BLOCK_M, BLOCK_N, False)
    m_vm = unless(EVEN_M, m_m)
    m_vn = unless(EVEN_N, m_n)
    p_tile = _flush_tile(i_slot, i_m, i_h, pool, PACKED_ROWS, BLOCK_M, BLOCK_N)
    m_read = _flush_tile_mask(m_live, i_m, pool, EVEN_M, EVEN_N, BLOCK_M, BLOCK_N)
    b_h0 = load_state(p_tile, m_read, EVICT_FIRST)
    rg = _Ring(*_ring_pointers(pool.p_x_cache, pool.p_B_cache, pool.p_dt_cache, i_ring, i_h, i_g,
                              o_m, o_n, pool.stride_xc_s, pool.stride_xc_h, pool.stride_xc_p, pool.stride_Bc_s,
                              pool.stride_Bc_g, pool.stride_Bc_n, pool.stride_dtc_s, pool.stride_dtc_h),
             pool.stride_xc_r, pool.stride_Bc_r, pool.stride_dtc_r, start, n_old, pool.ring, m_vm, m_vn, m_live)
    b_A = tl.load(pool.p_A + i_h * pool.stride_A_h).to(tl.float32)
    ck = _Checkpoint(p_tile=p_tile, m_tile=m_read, p_seed=pool.p_seed, i_slot=i_slot, i_h=i_h, o_m=o_m,
                     stride_s=pool.stride_state_s, stride_h=pool.stride_state_h, stride_p=pool.stride_state_p)
    _, m_r, pos_r, b_S, b_w = _ring_rows(rg, b_A, RP, HAS_SRC_IDX, FAST_EXP)
    b_xrm = _ring_x(rg, pos_r, m_r) if DUAL_FLUSH else None
    b_state = _flushed_state(b_h0, rg, b_xrm, pos_r, m_r, b_S, b_w, b_A, DUAL_FLUSH, X16, WINDOW, FAST_EXP,
                             HAS_SRC_IDX)
    wait_prior(PDL)  # (the kernel before may write the token's inputs: read after it)
    if not FLUSH_DRAFTS:  # the checkpoint: the cached tokens absorbed (the token goes to the ring)
        _store_state(b_state, ck, STOCHASTIC, PHILOX_ROUNDS, BLOCK_N, EVICT_FIRST)
    if FLUSH_DRAFTS or OUT:
        t0, i_xb, b_x, b_dt, b_B = _flush_token(i_b, i_h, o_m, o_n, m_vm, m_vn, tok, HEADS_PER_GROUP, DT_SOFTPLUS,
                                                HAS_DT_BIAS, VARLEN)
        b_C = b_B
        b_z = b_x
        b_D = 0.0
        if OUT:
            b_C, b_z = _flush_token_out(t0, i_xb, b_x, i_h, o_m, o_n, m_vm, m_vn, tok, HEADS_PER_GROUP, HAS_Z)
            if HAS_D:
                b_D = _head_D(i_h, o_m, m_vm, tok)
        _flush_tail(b_state, ck, rg, tok, t0, i_xb, i_m, i_h, o_m, m_vm, m_live, b_x, b_dt, b_B, b_C, b_z, b_D, b_A,
                    FLUSH_DRAFTS, HEADS_PER_GROUP, HAS_D, HAS_Z, HAS_SRC_IDX, FAST_EXP, STOCHASTIC, PHILOX_ROUNDS,
                    BLOCK_N, EVICT_FIRST, OUT)


@triton.jit(noinline=True)
def _own_flush(i_b, i_m, i_h, pool, tok,
               WINDOW: tl.constexpr, RP: tl.constexpr, X16: tl.constexpr, DUAL_FLUSH: tl.constexpr,
               FLUSH_DRAFTS: tl.constexpr, CURSOR_BY_REQUEST: tl.constexpr, HEADS_PER_GROUP: tl.constexpr,
               DT_SOFTPLUS: tl.constexpr, HAS_DT_BIAS: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr,
               HAS_SRC_IDX: tl.constexpr, HAS_RING_START: tl.constexpr, VARLEN: tl.constexpr,
               EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, PACKED_ROWS: tl.constexpr, FAST_EXP: tl.constexpr,
               STOCHASTIC: tl.constexpr, PHILOX_ROUNDS: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, EVICT_FIRST: tl.constexpr, PDL: tl.constexpr, ALIGNED: tl.constexpr):
    """_decode_flush with OUT for a request flushing in its own program (TAKE), as a function of
    its own: inlined, its code changed the schedule of the whole kernel, which cost the model's
    step in every program (PROGRAMS_TAKE). A called function does not inherit the kernel's
    divisibility specialization; ALIGNED (checked by the host, _aligned16) restates the state's
    and the rings' 16-byte alignment and unit innermost strides, so that their loads stay
    vectors."""
    if ALIGNED:
        pool = _Pool(
            tl.multiple_of(pool.p_state, 16), tl.multiple_of(pool.p_x_cache, 16),
            tl.multiple_of(pool.p_B_cache, 16), pool.p_dt_cache,
            pool.p_ring_start, pool.p_cached, pool.p_src_idx, pool.p_seed, pool.p_A,
            pool.headdim, pool.dstate, pool.pad_slot_id, pool.ring,
            tl.multiple_of(pool.stride_state_s, 16), tl.multiple_of(pool.stride_state_h, 16),
            tl.multiple_of(pool.stride_state_p, 16), 1,
            tl.multiple_of(pool.stride_xc_s, 16), tl.multiple_of(pool.stride_xc_h, 16),
            tl.multiple_of(pool.stride_xc_r, 16), 1,
            tl.multiple_of(pool.stride_Bc_s, 16), tl.multiple_of(pool.stride_Bc_g, 16),
            tl.multiple_of(pool.stride_Bc_r, 16), 1,
            pool.stride_dtc_s, pool.stride_dtc_h, 1,
            pool.stride_A_h, pool.stride_src_idx,
        )
    _decode_flush(i_b, i_m, i_h, pool, tok, WINDOW, RP, X16, DUAL_FLUSH, FLUSH_DRAFTS, CURSOR_BY_REQUEST,
                  HEADS_PER_GROUP, DT_SOFTPLUS, HAS_DT_BIAS, HAS_D, HAS_Z, HAS_SRC_IDX, HAS_RING_START, VARLEN,
                  EVEN_M, EVEN_N, PACKED_ROWS, FAST_EXP, STOCHASTIC, PHILOX_ROUNDS, BLOCK_M, BLOCK_N, EVICT_FIRST,
                  PDL, True)


@triton.jit
def _drafts_B_at(tok, i_xb, i_g, o_tok, o_n):
    """The addresses of the drafts' B [DW, BLOCK_N] (request i_xb's tokens o_tok, group i_g)."""
    return (tok.p_B + i_xb * tok.stride_B_b + i_g * tok.stride_B_g + o_tok[:, None] * tok.stride_B_t
            + o_n[None, :] * tok.stride_B_n)


@triton.jit
def _drafts_B(p_Bd, m_t, m_vn):
    """The drafts' B [DW, BLOCK_N] at p_Bd (_drafts_B_at; the first n_tok rows of DW live: m_t),
    0 elsewhere."""
    m_nd = m_t[:, None] if m_vn is None else m_t[:, None] & m_vn[None, :]
    return tl.load(p_Bd, mask=m_nd, other=0.0)


@triton.jit
def _drafts(tok, i_xb, t0, n_tok, i_h, i_g, o_m, o_n, m_vm, m_vn, b_dt_bias, DW: tl.constexpr,
            HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr, LOAD_B: tl.constexpr = True):
    """A verify program's drafts (tok, _Token; the first n_tok of DW live), all loaded before any
    store: (o_t, m_t, o_tok, m_md, x [BLOCK_M, DW] a column a draft, dt' [DW] with the bias and
    softplus, 0 past n_tok, B [DW, BLOCK_N])."""
    o_t = tl.arange(0, DW)
    m_t = o_t < n_tok
    o_tok = t0 + o_t
    m_md = m_t[None, :] if m_vm is None else m_vm[:, None] & m_t[None, :]
    b_xd = tl.load(tok.p_x + i_xb * tok.stride_x_b + i_h * tok.stride_x_h + o_m[:, None] * tok.stride_x_p
                   + o_tok[None, :] * tok.stride_x_t, mask=m_md, other=0.0)
    b_dtd = tl.load(tok.p_dt + i_xb * tok.stride_dt_b + i_h * tok.stride_dt_h + o_tok * tok.stride_dt_t, mask=m_t,
                    other=0.0).to(tl.float32)
    if HAS_DT_BIAS:
        b_dtd += b_dt_bias
    if DT_SOFTPLUS:
        b_dtd = softplus(b_dtd)  # the exact kernel's operations: the same dt' bits in the ring
    b_dtd = tl.where(m_t, b_dtd, 0.0)  # no draft past n_tok in the cumulative sums
    b_Bd = 0.0  # (LOAD_B off: the append loads it, _append_drafts' late)
    if LOAD_B:
        b_Bd = _drafts_B(_drafts_B_at(tok, i_xb, i_g, o_tok, o_n), m_t, m_vn)
    return o_t, m_t, o_tok, m_md, b_xd, b_dtd, b_Bd


@triton.jit
def _append_drafts(rg, o_t, m_t, b_xd, b_dtd, b_Bd, i_m, i_h, HEADS_PER_GROUP: tl.constexpr,
                   HAS_SRC_IDX: tl.constexpr, DT_B: tl.constexpr, p_Bl=None):
    """The drafts (m_t live) appended to the ring rg (_Ring) at the exact kernel's positions, with
    its values: x by every program, dt' and B (DT_B; with WEIGHTS the Grams' kernel appends them)
    by the first rows' programs, B by the group's first head (from p_Bl, _drafts_B_at's: loaded
    here, by that program alone, instead of b_Bd)."""
    m_app = m_t
    if HAS_SRC_IDX:
        m_app = m_app & rg.m_live
    pos_t = wrap(rg.start + rg.n_old + o_t, rg.ring)
    m_appv = m_app[None, :] if rg.m_vm is None else rg.m_vm[:, None] & m_app[None, :]
    tl.store(rg.p_x[:, None] + pos_t[None, :] * rg.stride_x, b_xd, mask=m_appv)
    if i_m == 0 and DT_B:
        tl.store(rg.p_dt + pos_t * rg.stride_dt, b_dtd, mask=m_app)
        if i_h % HEADS_PER_GROUP == 0:
            m_appn = m_app[:, None] if rg.m_vn is None else m_app[:, None] & rg.m_vn[None, :]
            if p_Bl is not None:
                b_Ba = _drafts_B(p_Bl, m_t, rg.m_vn)
            else:
                b_Ba = b_Bd
            tl.store(rg.p_B[None, :] + pos_t[:, None] * rg.stride_B, b_Ba, mask=m_appn)


@triton.jit
def _flush_tile(i_slot, i_m, i_h, pool, PACKED_ROWS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Slot i_slot's state tile as a decode flush program, rows i_m of head i_h, reads and
    stores it (pool: _Pool): its pointers; its mask (m_live in it) is _flush_tile_mask's."""
    o_m, o_n, _, _ = tile_offsets(i_m, pool.headdim, pool.dstate, BLOCK_M, BLOCK_N, False)
    o_base, o_tile = tile_addressing(0, i_h, i_m, o_m, o_n, pool.stride_state_h, pool.stride_state_p,
                                     pool.stride_state_n, PACKED_ROWS, BLOCK_M, BLOCK_N, False)
    return (pool.p_state + (i_slot * pool.stride_state_s + o_base)) + o_tile


@triton.jit
def _flush_tile_mask(m_live, i_m, pool, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr):
    """The mask of _flush_tile's tile (None: unmasked)."""
    _, _, m_m, m_n = tile_offsets(i_m, pool.headdim, pool.dstate, BLOCK_M, BLOCK_N, False)
    return both(tile_mask(m_m, m_n, EVEN_M, EVEN_N, False), m_live)


@triton.jit
def _flush_token(i_b, i_h, o_m, o_n, m_vm, m_vn, tok, HEADS_PER_GROUP: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
                 HAS_DT_BIAS: tl.constexpr, VARLEN: tl.constexpr):
    """The decode token's inputs as a flush program of request i_b, rows o_m of head i_h,
    reads them (tok: _Token): (t0, i_xb, x, dt', B), dt' with the bias and softplus, and its
    x's place in the token tensors (t0, i_xb)."""
    i_g = i_h // HEADS_PER_GROUP
    t0, _, i_xb = token_span(tok.p_cu_seqlens, i_b, tok.total_tokens, 1, VARLEN, True)
    b_x = load(tok.p_x + i_xb * tok.stride_x_b + t0 * tok.stride_x_t + i_h * tok.stride_x_h
               + o_m * tok.stride_x_p, m_vm)
    b_dt = tl.load(tok.p_dt + i_xb * tok.stride_dt_b + t0 * tok.stride_dt_t + i_h * tok.stride_dt_h).to(tl.float32)
    if HAS_DT_BIAS:
        b_dt += tl.load(tok.p_dt_bias + i_h * tok.stride_dt_bias_h).to(tl.float32)
    if DT_SOFTPLUS:
        b_dt = softplus(b_dt)
    b_B = load(tok.p_B + i_xb * tok.stride_B_b + t0 * tok.stride_B_t + i_g * tok.stride_B_g
               + o_n * tok.stride_B_n, m_vn)
    return t0, i_xb, b_x, b_dt, b_B


@triton.jit
def _flush_token_out(t0, i_xb, b_x, i_h, o_m, o_n, m_vm, m_vn, tok, HEADS_PER_GROUP: tl.constexpr,
                     HAS_Z: tl.constexpr):
    """The decode token's inputs of its out (_flush_token's t0, i_xb and x): (C as float32, z;
    x without z)."""
    b_C = load(tok.p_C + i_xb * tok.stride_C_b + t0 * tok.stride_C_t + (i_h // HEADS_PER_GROUP) * tok.stride_C_g
               + o_n * tok.stride_C_n, m_vn).to(tl.float32)
    b_z = b_x
    if HAS_Z:
        b_z = load(tok.p_z + i_xb * tok.stride_z_b + t0 * tok.stride_z_t + i_h * tok.stride_z_h
                   + o_m * tok.stride_z_p, m_vm)
    return b_C, b_z


@triton.jit
def _head_D(i_h, o_m, m_vm, tok):
    """D of head i_h's rows o_m as float32."""
    return load(tok.p_D + i_h * tok.stride_D_h + o_m * tok.stride_D_p, m_vm).to(tl.float32)


@triton.jit
def _flush_tail(b_state, ck, rg, tok, t0, i_xb, i_m, i_h, o_m, m_vm, m_live, b_x, b_dt, b_B, b_C, b_z, b_D, b_A,
                FLUSH_DRAFTS: tl.constexpr, HEADS_PER_GROUP: tl.constexpr, HAS_D: tl.constexpr,
                HAS_Z: tl.constexpr, HAS_SRC_IDX: tl.constexpr, FAST_EXP: tl.constexpr, STOCHASTIC: tl.constexpr,
                PHILOX_ROUNDS: tl.constexpr, BLOCK_N: tl.constexpr, EVICT_FIRST: tl.constexpr, OUT: tl.constexpr):
    """A decode flush after its checkpoint (b_state, stored where ck says unless FLUSH_DRAFTS):
    the token absorbed by the recurrence; under FLUSH_DRAFTS that state stored (the ring
    restarts); with OUT the token's out from it, and the token appended to the ring rg (none
    under FLUSH_DRAFTS)."""
    b_state = tl.fma(b_state, exp_dA(b_A * b_dt, FAST_EXP), (b_B.to(tl.float32) * b_dt)[None, :] * b_x.to(tl.float32)[:, None])
    if FLUSH_DRAFTS:  # the ring restarts: the state holds the cached tokens and the token
        _store_state(b_state, ck, STOCHASTIC, PHILOX_ROUNDS, BLOCK_N, EVICT_FIRST)
    if OUT:
        b_y = gated_out(tl.sum(b_state * b_C[None, :], axis=1), b_x, b_z, b_D, m_live, HAS_D, HAS_Z, HAS_SRC_IDX)
        tl.store(tok.p_out + i_xb * tok.stride_out_b + t0 * tok.stride_out_t + i_h * tok.stride_out_h
                 + o_m * tok.stride_out_p, b_y, mask=m_vm)
        if not FLUSH_DRAFTS:  # append: the exact kernel's position and values
            _append_token(rg, wrap(rg.start + rg.n_old, rg.ring), b_x, b_dt, b_B, m_live, i_m, i_h, HEADS_PER_GROUP)


@triton.jit
def _decode_flush_share(p_src_idx, p_cached, p_flush, p_cu_seqlens, c, n_requests, stride_src_idx, pad_slot_id,
                        ring, total_tokens, WINDOW: tl.constexpr, CURSOR_BY_REQUEST: tl.constexpr,
                        HAS_SRC_IDX: tl.constexpr, HOST_FLUSH: tl.constexpr, VARLEN: tl.constexpr,
                        LIST_BLOCK: tl.constexpr, T: tl.constexpr = 1):
    """Requests c .. c + LIST_BLOCK - 1 (of n_requests): their indices [LIST_BLOCK] and whether
    each flushes this step of T drafts a request (a live request by the host's flag or the
    ring's rule, the main kernel's choice: _cursors' clamped num_cached, up to T drafts, none
    for a packed request of none)."""
    o_b = c + tl.arange(0, LIST_BLOCK)
    m_b = o_b < n_requests
    if HAS_SRC_IDX:
        i_slot = tl.load(p_src_idx + o_b.to(tl.int64) * stride_src_idx, mask=m_b, other=pad_slot_id).to(tl.int64)
        m_b = m_b & (i_slot != pad_slot_id)
    else:
        i_slot = o_b.to(tl.int64)
    if VARLEN:
        bos = tl.minimum(tl.maximum(tl.load(p_cu_seqlens + o_b, mask=m_b, other=0).to(tl.int64), 0), total_tokens)
        eos = tl.minimum(tl.maximum(tl.load(p_cu_seqlens + o_b + 1, mask=m_b, other=0).to(tl.int64), bos),
                         total_tokens)
        n_tok = tl.minimum(eos - bos, T).to(tl.int32)
        m_b = m_b & (n_tok > 0)
    else:
        n_tok = T
    if HOST_FLUSH:
        m_f = m_b & (tl.load(p_flush + o_b, mask=m_b, other=0) != 0)
    else:
        i_cur = o_b.to(tl.int64) if CURSOR_BY_REQUEST else i_slot
        n_old = tl.load(p_cached + i_cur, mask=m_b, other=0).to(tl.int32)
        n_old = tl.minimum(tl.maximum(n_old, 0), WINDOW)
        m_f = m_b & (n_old + n_tok + T > ring)
    return o_b, m_f


@triton.jit
def _kth(order, o_b, k):
    """The request of rank k in a program's share of a block of the flush list (order: each
    request's rank in the share, -1 outside it), 0 where there is none."""
    return tl.sum(tl.where(order == k, o_b, 0), 0)


@triton.jit
def _flush_rank(i_b, p_src_idx, p_cached, p_flush, p_cu_seqlens, n_requests, stride_src_idx, pad_slot_id, ring,
                total_tokens, WINDOW: tl.constexpr, CURSOR_BY_REQUEST: tl.constexpr, HAS_SRC_IDX: tl.constexpr,
                HOST_FLUSH: tl.constexpr, VARLEN: tl.constexpr, LIST_BLOCK: tl.constexpr):
    """The rank of request i_b among the step's flushing requests: how many of the requests
    before it flush, counted on the flush list as _decode_flushes ranks them, LIST_BLOCK
    requests a pass."""
    rank = 0
    # (Triton's interpreter takes no runtime trip count: there one block of LIST_BLOCK, every request)
    for c in range(0, LIST_BLOCK if _INTERPRETED else i_b, LIST_BLOCK):
        o_b, m_f = _decode_flush_share(p_src_idx, p_cached, p_flush, p_cu_seqlens, c, n_requests, stride_src_idx,
                                       pad_slot_id, ring, total_tokens, WINDOW, CURSOR_BY_REQUEST, HAS_SRC_IDX,
                                       HOST_FLUSH, VARLEN, LIST_BLOCK)
        rank += tl.sum((m_f & (o_b < i_b)).to(tl.int32), 0)
    return rank


@triton.jit
def _flush_reads(i_slot, n_old, start, on, i_m, i_h, pool, RP: tl.constexpr, HEADS_PER_GROUP: tl.constexpr,
                 HAS_SRC_IDX: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, PACKED_ROWS: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVICT_FIRST: tl.constexpr):
    """A pipelined decode flush's reads of its slot (_decode_flushes_ahead): (h0, the ring's dt'
    [RP] and the same one row on, its x rows [BLOCK_M, RP] and B rows [RP, BLOCK_N] in the ring's
    dtype, as _flushed_state takes them); nothing read where on is off (no request: the
    pipeline's end)."""
    m_live = both(live_mask(i_slot, pool.pad_slot_id, HAS_SRC_IDX), on)
    i_ring = tl.where(m_live, i_slot, 0)
    n_on = tl.where(on, n_old, 0)
    o_m, o_n, m_m, m_n = tile_offsets(i_m, pool.headdim, pool.dstate, BLOCK_M, BLOCK_N, False)
    m_vm = unless(EVEN_M, m_m)
    m_vn = unless(EVEN_N, m_n)
    p_tile = _flush_tile(i_slot, i_m, i_h, pool, PACKED_ROWS, BLOCK_M, BLOCK_N)
    b_h0 = load_state(p_tile, _flush_tile_mask(m_live, i_m, pool, EVEN_M, EVEN_N, BLOCK_M, BLOCK_N), EVICT_FIRST)
    rg = _Ring(*_ring_pointers(pool.p_x_cache, pool.p_B_cache, pool.p_dt_cache, i_ring, i_h, i_h // HEADS_PER_GROUP,
                              o_m, o_n, pool.stride_xc_s, pool.stride_xc_h, pool.stride_xc_p, pool.stride_Bc_s,
                              pool.stride_Bc_g, pool.stride_Bc_n, pool.stride_dtc_s, pool.stride_dtc_h),
             pool.stride_xc_r, pool.stride_Bc_r, pool.stride_dtc_r, start, n_on, pool.ring, m_vm, m_vn, m_live)
    o_r = tl.arange(0, RP)
    m_r = (o_r < n_on) & m_live
    pos_r = tl.where(m_r, wrap(start + o_r, pool.ring), 0)
    b_dtr = tl.load(rg.p_dt + pos_r * rg.stride_dt, mask=m_r, other=0.0)
    b_dtr1 = _ring_dt_next(rg, o_r, True)
    return b_h0, b_dtr, b_dtr1, _ring_x(rg, pos_r, m_r), _ring_B(rg, pos_r, m_r)


@triton.jit
def _decode_flushes_ahead(order, o_b, n_mine, i_m, i_h, pool, tok,
                          WINDOW: tl.constexpr, RP: tl.constexpr, X16: tl.constexpr, FLUSH_DRAFTS: tl.constexpr,
                          CURSOR_BY_REQUEST: tl.constexpr, HEADS_PER_GROUP: tl.constexpr,
                          DT_SOFTPLUS: tl.constexpr, HAS_DT_BIAS: tl.constexpr, HAS_D: tl.constexpr,
                          HAS_Z: tl.constexpr, HAS_SRC_IDX: tl.constexpr, HAS_RING_START: tl.constexpr,
                          VARLEN: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
                          PACKED_ROWS: tl.constexpr, FAST_EXP: tl.constexpr, STOCHASTIC: tl.constexpr,
                          PHILOX_ROUNDS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          EVICT_FIRST: tl.constexpr, PDL: tl.constexpr, LIST_BLOCK: tl.constexpr,
                          DUAL: tl.constexpr = 1):
    """A decode flush program's n_mine (> 0) requests of one block of the flush list, each
    request's whole step as _decode_flush's with OUT in the dual form (DUAL 2: onto the tile,
    _flushed_state's), software-pipelined: the
    cursors of request k + 2 and the reads of request k + 1 (its state tile, ring rows and
    token inputs) are issued before request k is computed and stored, so that a program taking
    many flushes (a step in which many requests flush) keeps two requests' loads in flight
    instead of waiting on a chain of three dependent loads for each. The same operations on the
    same values as _decode_flush: the same bits. The first request's state reads are issued
    before the wait (PDL), its token's after it."""
    k_last = n_mine - 1
    i_b0 = _kth(order, o_b, 0)
    s0, _live0, _ring0, n0, st0 = _cursors(pool.p_src_idx, pool.p_cached, pool.p_ring_start, i_b0,
                                               pool.stride_src_idx, pool.pad_slot_id, pool.ring, WINDOW,
                                               CURSOR_BY_REQUEST, HAS_SRC_IDX, HAS_RING_START, EVICT_FIRST)
    h0, dtr0, dtn0, xr0, Br0 = _flush_reads(s0, n0, st0, n_mine > 0, i_m, i_h, pool, RP, HEADS_PER_GROUP,
                                            HAS_SRC_IDX, EVEN_M, EVEN_N, PACKED_ROWS, BLOCK_M, BLOCK_N, EVICT_FIRST)
    wait_prior(PDL)  # (the kernel before may write the tokens' inputs: read after it)
    o_m, o_n, m_m, m_n = tile_offsets(i_m, pool.headdim, pool.dstate, BLOCK_M, BLOCK_N, False)
    m_vm = unless(EVEN_M, m_m)
    m_vn = unless(EVEN_N, m_n)
    u0, v0, x0, dt0, B0 = _flush_token(i_b0, i_h, o_m, o_n, m_vm, m_vn, tok, HEADS_PER_GROUP, DT_SOFTPLUS,
                                       HAS_DT_BIAS, VARLEN)
    C0, z0 = _flush_token_out(u0, v0, x0, i_h, o_m, o_n, m_vm, m_vn, tok, HEADS_PER_GROUP, HAS_Z)
    i_b1 = _kth(order, o_b, 1)
    s1, _live1, _ring1, n1, st1 = _cursors(pool.p_src_idx, pool.p_cached, pool.p_ring_start, i_b1,
                                               pool.stride_src_idx, pool.pad_slot_id, pool.ring, WINDOW,
                                               CURSOR_BY_REQUEST, HAS_SRC_IDX, HAS_RING_START, EVICT_FIRST)
    b_A = tl.load(pool.p_A + i_h * pool.stride_A_h).to(tl.float32)
    b_D = 0.0
    if HAS_D:
        b_D = _head_D(i_h, o_m, m_vm, tok)
    # (Triton's interpreter takes no runtime trip count: there the block, each rank past n_mine skipped)
    for k in range(0, LIST_BLOCK if _INTERPRETED else n_mine):
        if k <= k_last:
            # issue: the cursors of request k + 2, the reads of k + 1
            i_b2 = _kth(order, o_b, k + 2)
            s2, _live2, _ring2, n2, st2 = _cursors(pool.p_src_idx, pool.p_cached, pool.p_ring_start, i_b2,
                                                   pool.stride_src_idx, pool.pad_slot_id, pool.ring, WINDOW,
                                                   CURSOR_BY_REQUEST, HAS_SRC_IDX, HAS_RING_START, EVICT_FIRST)
            h1, dtr1, dtn1, xr1, Br1 = _flush_reads(s1, n1, st1, k < k_last, i_m, i_h, pool, RP, HEADS_PER_GROUP,
                                                    HAS_SRC_IDX, EVEN_M, EVEN_N, PACKED_ROWS, BLOCK_M, BLOCK_N,
                                                    EVICT_FIRST)
            u1, v1, x1, dt1, B1 = _flush_token(i_b1, i_h, o_m, o_n, m_vm, m_vn, tok, HEADS_PER_GROUP, DT_SOFTPLUS,
                                               HAS_DT_BIAS, VARLEN)
            C1, z1 = _flush_token_out(u1, v1, x1, i_h, o_m, o_n, m_vm, m_vn, tok, HEADS_PER_GROUP, HAS_Z)
            # compute and store request k
            m_live = live_mask(s0, pool.pad_slot_id, HAS_SRC_IDX)
            i_ring = s0
            if HAS_SRC_IDX:
                i_ring = tl.where(m_live, s0, 0)
            p_tile = _flush_tile(s0, i_m, i_h, pool, PACKED_ROWS, BLOCK_M, BLOCK_N)
            m_read = _flush_tile_mask(m_live, i_m, pool, EVEN_M, EVEN_N, BLOCK_M, BLOCK_N)
            rg = _Ring(*_ring_pointers(pool.p_x_cache, pool.p_B_cache, pool.p_dt_cache, i_ring, i_h, i_h // HEADS_PER_GROUP,
                                      o_m, o_n, pool.stride_xc_s, pool.stride_xc_h, pool.stride_xc_p, pool.stride_Bc_s,
                                      pool.stride_Bc_g, pool.stride_Bc_n, pool.stride_dtc_s, pool.stride_dtc_h),
                     pool.stride_xc_r, pool.stride_Bc_r, pool.stride_dtc_r, st0, n0, pool.ring, m_vm, m_vn, m_live)
            ck = _Checkpoint(p_tile=p_tile, m_tile=m_read, p_seed=pool.p_seed, i_slot=s0, i_h=i_h, o_m=o_m,
                             stride_s=pool.stride_state_s, stride_h=pool.stride_state_h, stride_p=pool.stride_state_p)
            b_S, b_w = _ring_decay(dtr0, dtn0, b_A, FAST_EXP)
            b_state = _flushed_state(h0, rg, xr0, None, None, b_S, b_w, b_A, DUAL, X16, WINDOW, FAST_EXP,
                                     HAS_SRC_IDX, Br0)
            if not FLUSH_DRAFTS:  # the checkpoint: the cached tokens absorbed (the token goes to the ring)
                _store_state(b_state, ck, STOCHASTIC, PHILOX_ROUNDS, BLOCK_N, EVICT_FIRST)
            t0, _n_tok0, i_xb = token_span(tok.p_cu_seqlens, i_b0, tok.total_tokens, 1, VARLEN, True)
            _flush_tail(b_state, ck, rg, tok, t0, i_xb, i_m, i_h, o_m, m_vm, m_live, x0, dt0, B0, C0, z0, b_D, b_A,
                        FLUSH_DRAFTS, HEADS_PER_GROUP, HAS_D, HAS_Z, HAS_SRC_IDX, FAST_EXP, STOCHASTIC,
                        PHILOX_ROUNDS, BLOCK_N, EVICT_FIRST, True)
            # the pipeline moves on
            i_b0, s0, n0, st0 = i_b1, s1, n1, st1
            h0, dtr0, dtn0, xr0, Br0 = h1, dtr1, dtn1, xr1, Br1
            x0, dt0, B0, C0, z0 = x1, dt1, B1, C1, z1
            i_b1, s1, n1, st1 = i_b2, s2, n2, st2


@triton.jit
def _decode_flushes(i_m, i_h, i_j, n_j, pool, tok, p_flush, n_requests,
                    WINDOW: tl.constexpr, RP: tl.constexpr, X16: tl.constexpr, DUAL_FLUSH: tl.constexpr,
                    FLUSH_DRAFTS: tl.constexpr, CURSOR_BY_REQUEST: tl.constexpr, HEADS_PER_GROUP: tl.constexpr,
                    DT_SOFTPLUS: tl.constexpr, HAS_DT_BIAS: tl.constexpr, HAS_D: tl.constexpr,
                    HAS_Z: tl.constexpr, HAS_SRC_IDX: tl.constexpr, HAS_RING_START: tl.constexpr,
                    HOST_FLUSH: tl.constexpr, VARLEN: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
                    PACKED_ROWS: tl.constexpr, FAST_EXP: tl.constexpr, STOCHASTIC: tl.constexpr,
                    PHILOX_ROUNDS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    EVICT_FIRST: tl.constexpr, PDL: tl.constexpr, OUT: tl.constexpr, LIST_BLOCK: tl.constexpr,
                    RANKS: tl.constexpr, CAP_SHARE: tl.constexpr, AHEAD: tl.constexpr = False,
                    T: tl.constexpr = 1, TAKE: tl.constexpr = 0):
    """A decode flush program, rows i_m of head i_h, program i_j of the n_j that share the
    (rows, head): the requests that flush, ranked in request order, go out rank r to program
    r mod n_j, each program taking its share one request after the other (_decode_flush, OUT
    its argument): n_j = the batch / FLUSH_SHARE (PROGRAMS_SHARE) programs, so that a step in
    which few requests flush runs few programs, not one a request that mostly finds nothing to
    store. RANKS (ROLE 6): 0, every flushing request; 1, the first cap of them in request order,
    cap = ceil(n_requests / CAP_SHARE) (the kernel beside the main kernel); 2, those after the
    first cap (the kernel after it). AHEAD (OUT, the dual form): a program's requests
    pipelined, the next one's reads and the one after's cursors issued before the request in
    hand is computed (_decode_flushes_ahead). TAKE (> 0, RANKS 0): the programs take the first
    n_j * TAKE flushing requests only, TAKE each at most; the others flush in their own programs
    of the main grid (ROLE 4, _flush_rank)."""
    tl.static_assert(not AHEAD or (OUT and DUAL_FLUSH > 0), "the pipelined flushes take whole steps in the dual form")
    tl.static_assert(not AHEAD or T == 1, "the pipelined flushes are decode's")
    if PDL:
        gdc_launch_dependents()
    p_src_idx, p_cached, stride_src_idx = pool.p_src_idx, pool.p_cached, pool.stride_src_idx
    pad_slot_id, ring = pool.pad_slot_id, pool.ring
    cap = tl.cdiv(n_requests, CAP_SHARE)
    base = 0  # the flushing requests of the blocks before
    if OUT:  # blocks of a request a thread (ROLE 4): the next block's loads issued a block ahead
        o_next, m_next = _decode_flush_share(p_src_idx, p_cached, p_flush, tok.p_cu_seqlens, 0, n_requests,
                                             stride_src_idx, pad_slot_id, ring, tok.total_tokens, WINDOW,
                                             CURSOR_BY_REQUEST, HAS_SRC_IDX, HOST_FLUSH, VARLEN, LIST_BLOCK, T)
    # (Triton's interpreter takes no runtime trip count: there one block, a loop of LIST_BLOCK)
    for c in range(0, LIST_BLOCK if _INTERPRETED else n_requests, LIST_BLOCK):
        if OUT:
            o_b, m_f = o_next, m_next
            o_next, m_next = _decode_flush_share(p_src_idx, p_cached, p_flush, tok.p_cu_seqlens, c + LIST_BLOCK,
                                                 n_requests, stride_src_idx, pad_slot_id, ring, tok.total_tokens,
                                                 WINDOW, CURSOR_BY_REQUEST, HAS_SRC_IDX, HOST_FLUSH, VARLEN,
                                                 LIST_BLOCK, T)
        else:  # one block of up to LIST_BLOCK requests (the flush kernel, ROLE 2): its loads now
            o_b, m_f = _decode_flush_share(p_src_idx, p_cached, p_flush, tok.p_cu_seqlens, c, n_requests,
                                           stride_src_idx, pad_slot_id, ring, tok.total_tokens, WINDOW,
                                           CURSOR_BY_REQUEST, HAS_SRC_IDX, HOST_FLUSH, VARLEN, LIST_BLOCK, T)
        f = m_f.to(tl.int32)
        rank = base + tl.cumsum(f, 0) - f
        if RANKS == 0:
            mine = (f != 0) & (rank % n_j == i_j)
            if TAKE > 0:
                mine = mine & (rank < n_j * TAKE)
        elif RANKS == 1:
            mine = (f != 0) & (rank < cap) & (rank % n_j == i_j)
        else:
            mine = (f != 0) & (rank >= cap) & ((rank - cap) % n_j == i_j)
        g = mine.to(tl.int32)
        n_mine = tl.sum(g, 0)
        order = tl.where(mine, tl.cumsum(g, 0) - g, -1)  # k for this program's k-th request, else -1
        if AHEAD:
            if n_mine > 0:
                _decode_flushes_ahead(order, o_b, n_mine, i_m, i_h, pool, tok, WINDOW, RP, X16, FLUSH_DRAFTS,
                                      CURSOR_BY_REQUEST, HEADS_PER_GROUP, DT_SOFTPLUS, HAS_DT_BIAS, HAS_D, HAS_Z,
                                      HAS_SRC_IDX, HAS_RING_START, VARLEN, EVEN_M, EVEN_N, PACKED_ROWS, FAST_EXP,
                                      STOCHASTIC, PHILOX_ROUNDS, BLOCK_M, BLOCK_N, EVICT_FIRST, PDL, LIST_BLOCK,
                                      DUAL_FLUSH)
        else:
            for k in range(0, LIST_BLOCK if _INTERPRETED else n_mine):
                if k < n_mine:
                    i_b = _kth(order, o_b, k)
                    _decode_flush(i_b, i_m, i_h, pool, tok, WINDOW, RP, X16, DUAL_FLUSH, FLUSH_DRAFTS,
                                  CURSOR_BY_REQUEST, HEADS_PER_GROUP, DT_SOFTPLUS, HAS_DT_BIAS, HAS_D, HAS_Z,
                                  HAS_SRC_IDX, HAS_RING_START, VARLEN, EVEN_M, EVEN_N, PACKED_ROWS, FAST_EXP,
                                  STOCHASTIC, PHILOX_ROUNDS, BLOCK_M, BLOCK_N, EVICT_FIRST, PDL, OUT)
        base += tl.sum(f, 0)
    # One program waits whether or not it stored anything (those that stored waited before):
    # the kernel then completes after the one it depends on, so that one waiting for it sees
    # both.
    if (i_m == 0) & (i_h == 0) & (i_j == 0):
        wait_prior(PDL)


@triton.jit
def _pass_tile(p_slot, c, i_h, i_m, o_m, m_m, m_live, dstate, stride_state_h, stride_state_p, stride_state_n,
               EVEN_M: tl.constexpr, PACKED_ROWS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               COLS: tl.constexpr):
    """Pass c of the tiles' passes over the state tile (_tiles_cols): (columns o_nc, their mask
    m_nc, the pass's pointers and mask, [BLOCK_M, COLS]); no column past the tile's is live (the
    columns are always masked: the pass after the last, which AHEAD loads, is all masked off)."""
    o_nc = c * COLS + tl.arange(0, COLS)
    m_nc = (o_nc < dstate) & (o_nc < BLOCK_N)
    _, o_tc = tile_addressing(0, i_h, i_m, o_m, o_nc, stride_state_h, stride_state_p, stride_state_n, PACKED_ROWS,
                              BLOCK_M, BLOCK_N, False)
    return o_nc, m_nc, p_slot + o_tc, both(tile_mask(m_m, m_nc, EVEN_M, False, False), m_live)


@triton.jit
def _pass_C(p_Cx, o_nc, m_cc, o_tok, stride_C_n, stride_C_t):
    """A pass's columns o_nc of the drafts' C^T [COLS, TD] (p_Cx: the request's group's C), 0
    where m_cc is off."""
    return tl.load(p_Cx + o_nc[:, None] * stride_C_n + o_tok[None, :] * stride_C_t, mask=m_cc, other=0.0)


@triton.jit
def _pass_B(p_Bc, pos_r, o_nc, m_Bc, stride_Bc_r, stride_Bc_n):
    """A pass's columns o_nc of the ring's B rows at pos_r [RP, COLS] (p_Bc: the slot's group's
    ring), 0 where m_Bc is off."""
    return tl.load(p_Bc + pos_r[:, None] * stride_Bc_r + o_nc[None, :] * stride_Bc_n, mask=m_Bc, other=0.0)


@triton.jit
def _pass_flush(b_h0c, b_xw, b_decS, p_Bc, pos_r, m_r, o_nc, m_nc, stride_Bc_r, stride_Bc_n, p_tc, m_tc,
                B16: tl.constexpr, EVEN_N: tl.constexpr, EVICT_FIRST: tl.constexpr, b_Brc=None):
    """One pass's columns of the new checkpoint (_tiles_cols), stored and returned: the pass's
    h0 columns b_h0c decayed by b_decS = exp(A S) plus (x_ring w) b_xw against the ring's B rows
    (at pos_r, m_r) of the pass's columns o_nc (b_Brc, loaded here where None), the x_j w_j
    split in three bf16 parts (_dot_split_a)."""
    if b_Brc is None:
        b_Brc = _pass_B(p_Bc, pos_r, o_nc, m_r[:, None] if EVEN_N else m_r[:, None] & m_nc[None, :], stride_Bc_r,
                        stride_Bc_n)
    b_h1c = _dot_split_a(b_xw, b_Brc, B16, b_decS * b_h0c)
    store_state(p_tc, b_h1c.to(p_tc.dtype.element_ty), m_tc, EVICT_FIRST)
    return b_h1c


@triton.jit
def _tiles_cols(p_slot, b_first, p_C, p_B_cache, rg, i_ring, i_xb, i_h, i_g, i_m, o_m, m_m, o_tok, m_t, m_r, pos_r,
                b_xr, b_S, b_w, b_A, m_flush, dstate, stride_state_h, stride_state_p, stride_state_n, stride_C_b,
                stride_C_t, stride_C_g, stride_C_n, stride_Bc_s, stride_Bc_g, stride_Bc_n, TD: tl.constexpr,
                C16: tl.constexpr, B16: tl.constexpr, FLUSHES: tl.constexpr, EVEN_M: tl.constexpr,
                EVEN_N: tl.constexpr, PACKED_ROWS: tl.constexpr, FAST_EXP: tl.constexpr, EVICT_FIRST: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, COLS: tl.constexpr, AHEAD: tl.constexpr,
                FIRST: tl.constexpr, IN_AHEAD: tl.constexpr = False):
    """The tiles' h0 C^T [BLOCK_M, TD] with the state tile (slot p_slot, rows o_m of head i_h)
    read COLS columns a pass, each pass's columns of h0 split in three bf16 parts against C's
    (_dot_split_a); where the kernel flushes (FLUSHES) and m_flush holds, each pass also stores
    its columns of the new checkpoint, exp(A S) h0 + (x_ring w) B_ring (_absorb_mma's form:
    x_j w_j split in three against the ring's B columns). A pass holds COLS columns of the tile
    where the whole tile's h0 held BLOCK_N (whose registers bound the tiles' occupancy: 255 a
    thread at (64,4), T = 8). AHEAD: pass 0's tile is b_first, loaded at the program's start
    (before its cursors' and ring's loads), and each pass issues the next one's loads before
    its matmuls; else Triton's pipelining of the loop. FIRST (a flush program beside the main
    kernel, ROLE 7, whose request flushes): each pass flushes first and the product is the new
    checkpoint's, h1 C^T. IN_AHEAD (with AHEAD): the next pass's columns of C (and with FIRST
    of the ring's B) loaded with its tile too, not after this pass's stores."""
    b_h0C = tl.zeros([BLOCK_M, TD], tl.float32)
    b_xw = b_xr.to(tl.float32) * b_w[None, :]  # [BLOCK_M, RP], 0 past n_old
    b_decS = exp_dA(b_A * b_S, FAST_EXP)
    p_Bc = p_B_cache + i_ring * stride_Bc_s + i_g * stride_Bc_g
    PASSES: tl.constexpr = BLOCK_N // COLS
    INA: tl.constexpr = AHEAD and IN_AHEAD
    p_Cx = p_C + i_xb * stride_C_b + i_g * stride_C_g
    if AHEAD:
        b_h0c = b_first
    if INA:  # pass 0's columns of C and of the ring's B
        o_n0, m_n0, _, _ = _pass_tile(p_slot, 0, i_h, i_m, o_m, m_m, rg.m_live, dstate, stride_state_h,
                                      stride_state_p, stride_state_n, EVEN_M, PACKED_ROWS, BLOCK_M, BLOCK_N, COLS)
        b_CcT = _pass_C(p_Cx, o_n0, m_n0[:, None] & m_t[None, :], o_tok, stride_C_n, stride_C_t)
        b_Brc = None
        if FIRST:
            b_Brc = _pass_B(p_Bc, pos_r, o_n0, m_r[:, None] & m_n0[None, :], rg.stride_B, stride_Bc_n)
    for c in tl.range(0, PASSES, num_stages=1 if AHEAD else None):
        o_nc, m_nc, p_tc, m_tc = _pass_tile(p_slot, c, i_h, i_m, o_m, m_m, rg.m_live, dstate, stride_state_h,
                                            stride_state_p, stride_state_n, EVEN_M, PACKED_ROWS, BLOCK_M, BLOCK_N,
                                            COLS)
        if AHEAD:  # the next pass's tile (none past the last: masked off)
            o_nn, m_nn, p_tn, m_tn = _pass_tile(p_slot, c + 1, i_h, i_m, o_m, m_m, rg.m_live, dstate,
                                                stride_state_h, stride_state_p, stride_state_n, EVEN_M, PACKED_ROWS,
                                                BLOCK_M, BLOCK_N, COLS)
            b_next = load_state(p_tn, m_tn, EVICT_FIRST)
            if INA:  # and its columns of C and of the ring's B
                b_CcT_next = _pass_C(p_Cx, o_nn, m_nn[:, None] & m_t[None, :], o_tok, stride_C_n, stride_C_t)
                if FIRST:
                    b_Brc_next = _pass_B(p_Bc, pos_r, o_nn, m_r[:, None] & m_nn[None, :], rg.stride_B, stride_Bc_n)
        else:
            b_h0c = load_state(p_tc, m_tc, EVICT_FIRST)
        if not INA:
            b_CcT = _pass_C(p_Cx, o_nc, m_t[None, :] if EVEN_N else m_nc[:, None] & m_t[None, :], o_tok, stride_C_n,
                            stride_C_t)
            b_Brc = None
        if FIRST:
            b_h1c = _pass_flush(b_h0c, b_xw, b_decS, p_Bc, pos_r, m_r, o_nc, m_nc, rg.stride_B, stride_Bc_n, p_tc,
                                m_tc, B16, EVEN_N, EVICT_FIRST, b_Brc)
            b_h0C = _dot_split_a(b_h1c, b_CcT, C16, b_h0C)
        else:
            b_h0C = _dot_split_a(b_h0c, b_CcT, C16, b_h0C)
        if FLUSHES:
            if m_flush:
                _pass_flush(b_h0c, b_xw, b_decS, p_Bc, pos_r, m_r, o_nc, m_nc, rg.stride_B, stride_Bc_n, p_tc, m_tc,
                            B16, EVEN_N, EVICT_FIRST)
        if AHEAD:
            b_h0c = b_next
            if INA:
                b_CcT = b_CcT_next
                if FIRST:
                    b_Brc = b_Brc_next
    return b_h0C


@triton.jit
def _draft_C(t: tl.constexpr, step, VARLEN: tl.constexpr):
    """Draft t's C_t [BLOCK_N] as stored (0 past a packed request's drafts)."""
    tok = step.tok
    m_tt = (t < step.n_tok) if VARLEN else None
    p_Ct = tok.p_C + step.i_xb * tok.stride_C_b + (step.t0 + t) * tok.stride_C_t + step.i_g * tok.stride_C_g
    return load(p_Ct + step.o_n * tok.stride_C_n, both(step.m_vn, m_tt))


@triton.jit
def _draft_grams(t: tl.constexpr, step, p_g, T: tl.constexpr, TP: tl.constexpr, RP: tl.constexpr,
                 GRAM: tl.constexpr, WEIGHTS: tl.constexpr):
    """Draft t's precomputed values at p_g: with WEIGHTS its weights of the ring's tokens [RP],
    of the drafts' [TP] and of h0 . C_t; with GRAM C_t . B_j of the ring's tokens [RP] and of
    the drafts' [TP], then 0.0; else three 0.0."""
    b_g0 = 0.0
    b_g1 = 0.0
    b_g2 = 0.0
    if WEIGHTS:
        b_g0 = tl.load(p_g + t * RP + step.o_r)
        b_g1 = tl.load(p_g + T * RP + t * TP + step.o_t)
        b_g2 = tl.load(p_g + T * (RP + TP) + t)
    elif GRAM:
        b_g0 = tl.load(p_g + t * RP + step.o_r)
        b_g1 = tl.load(p_g + T * RP + t * TP + step.o_t)
    return b_g0, b_g1, b_g2


@triton.jit
def _draft_xz(t: tl.constexpr, step, VARLEN: tl.constexpr, HAS_Z: tl.constexpr):
    """Draft t's x_t and z_t [BLOCK_M] (x_t again without z)."""
    tok = step.tok
    m_tt = (t < step.n_tok) if VARLEN else None
    o_xt = step.i_xb * tok.stride_x_b + (step.t0 + t) * tok.stride_x_t + step.i_h * tok.stride_x_h
    b_xt = load(tok.p_x + o_xt + step.o_m * tok.stride_x_p, both(step.m_vm, m_tt))
    b_zt = b_xt
    if HAS_Z:
        b_zt = load(tok.p_z + step.i_xb * tok.stride_z_b + (step.t0 + t) * tok.stride_z_t
                    + step.i_h * tok.stride_z_h + step.o_m * tok.stride_z_p, both(step.m_vm, m_tt))
    return b_xt, b_zt


@triton.jit
def _drafts_in(step, p_g, T: tl.constexpr, TP: tl.constexpr, RP: tl.constexpr, GRAM: tl.constexpr,
               WEIGHTS: tl.constexpr, LATE: tl.constexpr, PDL: tl.constexpr, VARLEN: tl.constexpr,
               HAS_Z: tl.constexpr):
    """Every draft's loads for _drafts_out's AHEAD, a tuple of T (C_t, its three _draft_grams,
    x_t, z_t): the drafts' C_t, x_t and z_t first, then (after the wait for the Grams' kernel,
    LATE) their Grams or weights."""
    tks = ()
    for t in tl.static_range(T):
        tks = tks + ((_draft_C(t, step, VARLEN), ) + _draft_xz(t, step, VARLEN, HAS_Z), )  # noqa: RUF005 (Triton's tuples)
    if GRAM and LATE:
        wait_prior(PDL)
    ins = ()
    for t in tl.static_range(T):
        b_g = _draft_grams(t, step, p_g, T, TP, RP, GRAM, WEIGHTS)
        ins = ins + ((tks[t][0], b_g[0], b_g[1], b_g[2], tks[t][1], tks[t][2]), )  # noqa: RUF005
    return ins


@triton.jit
def _tiles_grams(p_gram, i_b, i_g, o_t, o_r, stride_gram_b, stride_gram_g, T: tl.constexpr, TP: tl.constexpr,
                 RP: tl.constexpr, LATE: tl.constexpr, PDL: tl.constexpr):
    """The tiles' Grams of (request i_b, group i_g) from _gram_kernel, after the wait for it
    (LATE): (B_ring C^T [RP, TD], B_drafts C^T [TD (u), TD (t)]), 0 past the drafts."""
    if LATE:
        wait_prior(PDL)
    p_g = p_gram + i_b * stride_gram_b + i_g * stride_gram_g
    m_gt = o_t[None, :] < T
    b_GrT = tl.load(p_g + o_t[None, :] * RP + o_r[:, None], mask=m_gt, other=0.0)
    b_GdT = tl.load(p_g + T * RP + o_t[None, :] * TP + o_t[:, None], mask=m_gt & (o_t[:, None] < TP), other=0.0)
    return b_GrT, b_GdT


@triton.jit
def _drafts_out(b_h0, b_S, b_w, step, T: tl.constexpr, TP: tl.constexpr, RP: tl.constexpr,
                NO_RING: tl.constexpr, GRAM: tl.constexpr, WEIGHTS: tl.constexpr, LATE: tl.constexpr,
                PDL: tl.constexpr, VARLEN: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr,
                HAS_SRC_IDX: tl.constexpr, FAST_EXP: tl.constexpr, AHEAD: tl.constexpr = False):
    """The verify step's out draft by draft, stored: for each draft t, y_t [BLOCK_M] in the dual
    form (module docstring) from the checkpoint b_h0's h0 . C_t, the ring's x weighed by b_S and
    b_w (none with NO_RING: a state flushed first, nothing cached) and the earlier drafts' x by
    their Grams (from _gram_kernel with GRAM; with WEIGHTS its weights instead), then D and the
    z gate. step (_Step): the program's other values, its drafts' inputs and out (tok, _Token)
    and the ring's rows (rg, _Ring; pos_r, o_r, m_r, _ring_positions'). AHEAD: every draft's
    loads (C_t, its Grams or weights, x_t, z_t; _drafts_in) issued before the first draft's out,
    instead of each draft's after the one before it was stored (a load cannot pass a store that
    may alias it, nor a barrier, so each draft waited on its own round trip)."""
    b_xr = step.b_xr
    b_xd = step.b_xd
    b_Bd = step.b_Bd
    b_dtd = step.b_dtd
    b_A = step.b_A
    b_D = step.b_D
    rg = step.rg
    pos_r = step.pos_r
    m_r = step.m_r
    o_t = step.o_t
    tok = step.tok
    i_xb = step.i_xb
    t0 = step.t0
    n_tok = step.n_tok
    i_b = step.i_b
    i_h = step.i_h
    i_g = step.i_g
    o_m = step.o_m
    m_vm = step.m_vm
    m_live = step.m_live
    p_gram = step.p_gram
    stride_gram_b = step.stride_gram_b
    stride_gram_g = step.stride_gram_g
    # out in the dual form (module docstring), draft by draft: y_t [BLOCK_M] from the
    # checkpoint's h0 . C_t, the ring's and the earlier drafts' x weighted by their Grams.
    if not NO_RING:
        b_xrf = b_xr.to(tl.float32)
    b_xdf = b_xd.to(tl.float32)
    if not GRAM and not NO_RING:
        b_Br = _ring_B(rg, pos_r, m_r).to(tl.float32)
    if not WEIGHTS:
        b_d = tl.cumsum(b_dtd, axis=0)  # the drafts' cumulative dt'
        b_decay0 = exp_dA(b_A * b_S, FAST_EXP)
    p_g = p_gram
    if GRAM:
        if LATE and not AHEAD:
            wait_prior(PDL)
        if WEIGHTS:  # the head's, [T RP] then [T TP] then [T] (_gram_kernel)
            p_g = p_gram + i_b * stride_gram_b + i_h * stride_gram_g
        else:
            p_g = p_gram + i_b * stride_gram_b + i_g * stride_gram_g
    if AHEAD:  # every draft's loads first
        ins = _drafts_in(step, p_g, T, TP, RP, GRAM, WEIGHTS, LATE, PDL, VARLEN, HAS_Z)
    for t in tl.static_range(T):
        m_tt = (t < n_tok) if VARLEN else None  # packed: a request of fewer drafts
        if AHEAD:
            b_in = ins[t]
        else:
            b_in = (_draft_C(t, step, VARLEN), ) + _draft_grams(t, step, p_g, T, TP, RP, GRAM, WEIGHTS)  # noqa: RUF005
        b_Ct = b_in[0].to(tl.float32)
        if WEIGHTS:  # draft t's weights of the ring's tokens, of the drafts', of h0 . C_t
            b_cr = b_in[1]
            b_cd = b_in[2]
            b_sc = b_in[3]
        elif GRAM:  # C_t . B_j of the ring's tokens and the drafts', from _gram_kernel
            b_gr = b_in[1]
            b_gd = b_in[2]
        else:
            if not NO_RING:
                b_gr = tl.sum(b_Br * b_Ct[None, :], axis=1)  # [RP]
            b_gd = tl.sum(b_Bd.to(tl.float32) * b_Ct[None, :], axis=1)  # [TP]
        if not WEIGHTS:
            b_dt_t = tl.sum(tl.where(o_t == t, b_d, 0.0), axis=0)  # d_t
            b_e = exp_dA(b_A * b_dt_t, FAST_EXP)
            if not NO_RING:
                b_cr = b_w * b_gr * b_e  # the ring tokens' weights for draft t
            b_cd = tl.where(o_t <= t, exp_dA(b_A * (b_dt_t - b_d), FAST_EXP) * b_dtd * b_gd, 0.0)
            b_sc = b_decay0 * b_e
        b_y = b_sc * tl.sum(b_h0 * b_Ct[None, :], axis=1)
        if not NO_RING:  # (the sums in this order: the shipped kernel's bits)
            b_y = b_y + tl.sum(b_xrf * b_cr[None, :], axis=1)
        b_y = b_y + tl.sum(b_xdf * b_cd[None, :], axis=1)
        if AHEAD:
            b_xt = b_in[4]
            b_zt = b_in[5]
        else:
            b_xt, b_zt = _draft_xz(t, step, VARLEN, HAS_Z)
        b_y = gated_out(b_y, b_xt, b_zt, b_D, m_live, HAS_D, HAS_Z, HAS_SRC_IDX)
        p_yt = (tok.p_out + i_xb * tok.stride_out_b + (t0 + t) * tok.stride_out_t + i_h * tok.stride_out_h
                + o_m * tok.stride_out_p)
        m_yt = both(m_vm, m_tt)
        if m_yt is None:
            tl.store(p_yt, b_y)
        else:
            tl.store(p_yt, b_y, mask=m_yt)


@triton.heuristics(_HEURISTICS)
@triton.jit
def _selective_state_replay_fast_kernel(
    # pointers
    p_state, p_x_cache, p_B_cache, p_dt_cache, p_ring_start, p_cached, p_flush,
    p_x, p_dt, p_dt_bias, p_A, p_B, p_C, p_D, p_z, p_out, p_src_idx, p_cu_seqlens, p_seed, p_gram,
    # sizes
    headdim, dstate, pad_slot_id, total_tokens, ring, n_requests, n_shares,
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
    stride_src_idx, stride_gram_b, stride_gram_g,
    # flags
    T: tl.constexpr,  # drafts a request (the most, with cu_seqlens)
    WINDOW: tl.constexpr,  # the most cached tokens a request holds: R - T
    RP: tl.constexpr,  # max(16, next_power_of_2(WINDOW)): the rows of the gathered ring
    TP: tl.constexpr,  # next_power_of_2(T): the rows of the drafts' tiles
    TD: tl.constexpr,  # max(16, TP): the drafts' tiles with TILES
    TILES: tl.constexpr,  # T >= 2: out as tiles on the tensor cores, else draft by draft
    MMA16: tl.constexpr,  # B and C of one 16-bit dtype: their Grams on the tensor cores (TILES)
    C16: tl.constexpr,  # C bf16: h0 C^T on the tensor cores (TILES)
    X16: tl.constexpr,  # x bf16: a flush's matmul over the ring on the tensor cores (_dot_split)
    DUAL_FLUSH: tl.constexpr,  # a flush absorbs the ring in the dual form (_flushed_state)
    FLUSH: tl.constexpr,  # 0: by the rule (or the host's flag); 1: always (replay_flush)
    FLUSH_DRAFTS: tl.constexpr,  # a flush absorbs the drafts too and appends nothing (vLLM)
    CURSOR_BY_REQUEST: tl.constexpr,  # num_cached indexed by request, not slot (vLLM's write_pos)
    HEADS_PER_GROUP: tl.constexpr,
    DT_SOFTPLUS: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_SRC_IDX: tl.constexpr,
    HAS_RING_START: tl.constexpr,  # else every ring starts at row 0
    HOST_FLUSH: tl.constexpr,  # the flush flag a request given by the host (int8 [B])
    GRAM: tl.constexpr,  # the Grams C_t . B_j of each (request, group) precomputed (p_gram)
    ROLE: tl.constexpr,  # 0: everything; 1: out and appends, no state store; 2: the flushes' stores only;
    # 4 (T = 1), the flush programs first, then the requests that do not flush; 5, the requests
    # that do not flush; 6, the flush programs alone (run beside 5 on a stream of their own)
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
    PDL: tl.constexpr,
    CHUNK: tl.constexpr = 0,  # > 0: the state tile's threads laid over rows of CHUNK columns (_chunked_tile)
    LIST_BLOCK: tl.constexpr = 0,  # ROLE 2 (at T >= 2: > 0, the list), 4, 6: requests a block of the flush list
    RANKS: tl.constexpr = 0,  # ROLE 6: which of the flushing requests its programs take (_decode_flushes)
    CAP_SHARE: tl.constexpr = 8,  # ROLE 6: ceil(n_requests / CAP_SHARE) of them go to the programs beside
    AHEAD: tl.constexpr = False,  # ROLE 4 and 6: each program's flushes pipelined (_decode_flushes_ahead)
    TAKE: tl.constexpr = 0,  # ROLE 4, > 0: a flush program's most flushes; the later ranks' own programs flush
    RANK_BLOCK: tl.constexpr = 0,  # with TAKE: requests a pass of a flushing request's rank (_flush_rank)
    OWN_ALIGNED: tl.constexpr = False,  # with TAKE: the pool's alignment, as _own_flush restates it
    LATE_WAIT: tl.constexpr = False,  # with GRAM: the wait (PDL) just before the Grams are read
    WEIGHTS: tl.constexpr = False,  # with GRAM: p_gram holds the dual form's weights a (request, head) instead
    B16: tl.constexpr = False,  # ROLE 7, COLS: the ring's B bf16 (a flush's products on the tensor cores)
    COLS: tl.constexpr = 0,  # > 0, with TILES: the state tile read (and a flush stored) COLS columns a pass (_tiles_cols)
    COLS_AHEAD: tl.constexpr = False,  # with COLS: the first pass loaded at once, each pass the next's (_tiles_cols)
    COLS_IN_AHEAD: tl.constexpr = False,  # with COLS_AHEAD: the next pass's C and ring B columns too (_tiles_cols)
    B_REUSE: tl.constexpr = False,  # the whole tile's flush (ROLE 0, no GRAM): the ring's B rows its out loaded
    B_LATE: tl.constexpr = False,  # T >= 2 with GRAM: the drafts' B loaded by the program that appends them
    DRAFTS_AHEAD: tl.constexpr = False,  # draft by draft: every draft's loads before the first out (_drafts_out)
):
    # the requests' inputs and outs, as the helpers read and write them
    tok = _Token(p_x, p_dt, p_dt_bias, p_B, p_C, p_D, p_z, p_out, p_cu_seqlens, total_tokens,
                 stride_x_b, stride_x_t, stride_x_h, stride_x_p, stride_dt_b, stride_dt_t, stride_dt_h,
                 stride_dt_bias_h, stride_B_b, stride_B_t, stride_B_g, stride_B_n,
                 stride_C_b, stride_C_t, stride_C_g, stride_C_n, stride_D_h, stride_D_p,
                 stride_z_b, stride_z_t, stride_z_h, stride_z_p,
                 stride_out_b, stride_out_t, stride_out_h, stride_out_p)
    # the pool, its rings and cursors, as decode's flush programs (and TAKE's own flushes) read them
    pool = _Pool(p_state, p_x_cache, p_B_cache, p_dt_cache, p_ring_start, p_cached, p_src_idx, p_seed, p_A,
                 headdim, dstate, pad_slot_id, ring, stride_state_s, stride_state_h, stride_state_p,
                 stride_state_n, stride_xc_s, stride_xc_h, stride_xc_r, stride_xc_p, stride_Bc_s, stride_Bc_g,
                 stride_Bc_r, stride_Bc_n, stride_dtc_s, stride_dtc_h, stride_dtc_r, stride_A_h,
                 stride_src_idx)
    if (T == 1 or LIST_BLOCK > 0) and (ROLE == 2 or ROLE == 4 or ROLE == 6):
        # Decode's flush programs: a program a share of the flushing requests (_decode_flushes),
        # the flush kernel's grid (P blocks, H, J) for ROLE 2 and 6; for ROLE 4 the first J of
        # the grid's (P blocks, H, J + B). Those of ROLE 4 and 6 take all of a flushing request's step.
        # The verify step's flush kernel (ROLE 2 at T >= 2, VERIFY_FLUSH_LIST) takes its flushes from the same list.
        tl.static_assert(ROLE != 4 or SLOT_MAJOR, "the flush programs come first in a slot-major grid")
        tl.static_assert(T == 1 or ROLE != 4, "at T >= 2 the flush programs are a kernel's own (ROLE 2)")
        n_j = n_shares if ROLE == 4 else tl.num_programs(2)
        if tl.program_id(2) < n_j:
            _decode_flushes(tl.program_id(0), tl.program_id(1), tl.program_id(2), n_j, pool, tok, p_flush, n_requests,
                            WINDOW, RP, X16, DUAL_FLUSH, FLUSH_DRAFTS, CURSOR_BY_REQUEST, HEADS_PER_GROUP,
                            DT_SOFTPLUS, HAS_DT_BIAS, HAS_D, HAS_Z, HAS_SRC_IDX, HAS_RING_START, HOST_FLUSH,
                            VARLEN, EVEN_M, EVEN_N, PACKED_ROWS, FAST_EXP, STOCHASTIC, PHILOX_ROUNDS, BLOCK_M,
                            BLOCK_N, EVICT_FIRST, PDL, ROLE != 2, LIST_BLOCK, RANKS if ROLE == 6 else 0, CAP_SHARE,
                            AHEAD and ROLE != 2, T, TAKE if ROLE == 4 else 0)
            return
        if ROLE != 4:  # (every program of a flush kernel is a flush program: no other code)
            return
    # One program: BLOCK_M rows of one (request, head), all N columns.
    i_m, i_b, i_h = start_program(SLOT_MAJOR, PDL)
    if ROLE == 4:
        i_b -= n_shares  # after the flush programs
    i_g = i_h // HEADS_PER_GROUP

    t0, n_tok, i_xb = token_span(p_cu_seqlens, i_b, total_tokens, T, VARLEN, True)
    if VARLEN:
        if n_tok == 0:  # a request of no drafts is left alone: as in the exact route
            return
    i_slot, m_live, i_ring, n_old, start = _cursors(
        p_src_idx, p_cached, p_ring_start, i_b, stride_src_idx, pad_slot_id, ring, WINDOW, CURSOR_BY_REQUEST,
        HAS_SRC_IDX, HAS_RING_START, EVICT_FIRST)
    m_flush = _flushes(p_flush, i_b, n_old, n_tok, ring, T, FLUSH, HOST_FLUSH)
    if ROLE == 2:  # the flush kernel: a request that does not flush has nothing to store
        if m_flush == 0:
            return
    if ROLE == 4 or ROLE == 5:  # a live request that flushes is a flush program's (_decode_flushes; ROLE 7)
        if both(m_flush, m_live):
            # past the flush programs' n_shares * TAKE: its own program's (a rank is at most the index)
            if ROLE == 4 and TAKE > 0:
                if i_b >= n_shares * TAKE:
                    if _flush_rank(i_b, p_src_idx, p_cached, p_flush, p_cu_seqlens, n_requests, stride_src_idx,
                                   pad_slot_id, ring, total_tokens, WINDOW, CURSOR_BY_REQUEST, HAS_SRC_IDX, HOST_FLUSH,
                                   VARLEN, RANK_BLOCK) >= n_shares * TAKE:
                        _own_flush(i_b, i_m, i_h, pool, tok, WINDOW, RP, X16, DUAL_FLUSH, FLUSH_DRAFTS,
                                   CURSOR_BY_REQUEST, HEADS_PER_GROUP, DT_SOFTPLUS, HAS_DT_BIAS, HAS_D, HAS_Z,
                                   HAS_SRC_IDX, HAS_RING_START, VARLEN, EVEN_M, EVEN_N, PACKED_ROWS, FAST_EXP,
                                   STOCHASTIC, PHILOX_ROUNDS, BLOCK_M, BLOCK_N, EVICT_FIRST, PDL, OWN_ALIGNED)
            return
    if ROLE == 7:  # the verify step's flush programs beside the main kernel: the live flushing requests'
        if not both(m_flush, m_live):
            return

    o_m, o_n, m_m, m_n = tile_offsets(i_m, headdim, dstate, BLOCK_M, BLOCK_N, False)
    m_vm = unless(EVEN_M, m_m)
    m_vn = unless(EVEN_N, m_n)
    o_base, o_tile = tile_addressing(0, i_h, i_m, o_m, o_n, stride_state_h, stride_state_p, stride_state_n,
                                     PACKED_ROWS, BLOCK_M, BLOCK_N, False)
    if CHUNK > 0:  # the tile addressed [BLOCK_M, BLOCK_N / CHUNK, CHUNK] (_chunked_tile)
        o_tile, m_read = _chunked_tile(i_h, o_m, m_m, dstate, m_live, stride_state_h, stride_state_p,
                                       stride_state_n, PACKED_ROWS, EVEN_M, EVEN_N, BLOCK_M, BLOCK_N, CHUNK)
    else:
        m_read = both(tile_mask(m_m, m_n, EVEN_M, EVEN_N, False), m_live)
    p_slot = p_state + (i_slot * stride_state_s + o_base)  # the slot's tile at o_tile (or a pass's: _pass_tile)
    p_tile = p_slot + o_tile
    PASSES: tl.constexpr = TILES and COLS > 0  # the tile read in passes of COLS columns, in the tiles' branch
    tl.static_assert(not PASSES or ((ROLE == 0 or ROLE == 5 or ROLE == 7) and not STOCHASTIC and (DUAL_FLUSH > 0 or ROLE == 7) and CHUNK == 0),
                     "the tiles' passes over columns flush in the dual form, rounding to nearest, in one kernel")
    if not PASSES:
        b_h0 = load_state(p_tile, m_read, EVICT_FIRST)
    elif COLS_AHEAD:  # the first pass's tile, at once (_tiles_cols)
        _, _, p_t0, m_t0 = _pass_tile(p_slot, 0, i_h, i_m, o_m, m_m, m_live, dstate, stride_state_h, stride_state_p,
                                      stride_state_n, EVEN_M, PACKED_ROWS, BLOCK_M, BLOCK_N, COLS)
        b_h0 = load_state(p_t0, m_t0, EVICT_FIRST)
    else:
        b_h0 = None
    if CHUNK > 0:
        b_h0 = tl.reshape(b_h0, [BLOCK_M, BLOCK_N])
    # Launched programmatic-dependent on the Grams' kernel (GRAM), which writes the Grams and
    # nothing else this program reads and reads nothing it writes (and was itself launched after
    # everything before the call), a program waits just before it reads the Grams (LATE_WAIT,
    # fast_launch's); else here, before it reads anything but the slot and the state.
    LATE: tl.constexpr = GRAM and LATE_WAIT
    if not LATE:
        wait_prior(PDL)

    # The ring rows of this program: x of its head's rows, B of its group, dt' of its head.
    p_xc, p_Bc, p_dtc = _ring_pointers(p_x_cache, p_B_cache, p_dt_cache, i_ring, i_h, i_g, o_m, o_n, stride_xc_s,
                                       stride_xc_h, stride_xc_p, stride_Bc_s, stride_Bc_g, stride_Bc_n, stride_dtc_s,
                                       stride_dtc_h)
    b_A = tl.load(p_A + i_h * stride_A_h).to(tl.float32)
    rg = _Ring(p_x=p_xc, p_B=p_Bc, p_dt=p_dtc, stride_x=stride_xc_r, stride_B=stride_Bc_r, stride_dt=stride_dtc_r,
               start=start, n_old=n_old, ring=ring, m_vm=m_vm, m_vn=m_vn, m_live=m_live)
    ck = _Checkpoint(p_tile=p_tile, m_tile=m_read, p_seed=p_seed, i_slot=i_slot, i_h=i_h, o_m=o_m,
                     stride_s=stride_state_s, stride_h=stride_state_h, stride_p=stride_state_p)

    b_dt_bias = 0.0
    if HAS_DT_BIAS:
        b_dt_bias = tl.load(p_dt_bias + i_h * stride_dt_bias_h).to(tl.float32)
    b_D = 0.0
    if HAS_D:
        b_D = load(p_D + i_h * stride_D_h + o_m * stride_D_p, m_vm).to(tl.float32)
    if T == 1:
        # Decode: one token (a packed request of none returned above), its inputs as vectors.
        # (The tiles of the drafts below cost more instructions than they save at T = 1: 848
        # SASS instructions for the step that does not flush against 1320, sm_90, headline.)
        b_x = load(p_x + i_xb * stride_x_b + t0 * stride_x_t + i_h * stride_x_h + o_m * stride_x_p, m_vm)
        b_xf = b_x.to(tl.float32)
        b_dt = tl.load(p_dt + i_xb * stride_dt_b + t0 * stride_dt_t + i_h * stride_dt_h).to(tl.float32)
        if HAS_DT_BIAS:
            b_dt += b_dt_bias
        if DT_SOFTPLUS:
            b_dt = softplus(b_dt)  # the exact kernel's operations: the same dt' bits in the ring
        b_B = load(p_B + i_xb * stride_B_b + t0 * stride_B_t + i_g * stride_B_g + o_n * stride_B_n, m_vn)
        b_C = load(p_C + i_xb * stride_C_b + t0 * stride_C_t + i_g * stride_C_g + o_n * stride_C_n,
                   m_vn).to(tl.float32)
        b_z = b_x
        if HAS_Z:
            b_z = load(p_z + i_xb * stride_z_b + t0 * stride_z_t + i_h * stride_z_h + o_m * stride_z_p, m_vm)
        # The ring gathered in age order, masked past n_old: its rows (and, unless the Grams'
        # kernel weighed them, WEIGHTS, their dt' and weights).
        o_r, m_r, pos_r = _ring_positions(n_old, start, ring, m_live, RP, HAS_SRC_IDX)
        if not WEIGHTS:
            b_S, b_w = _ring_decays(rg, o_r, m_r, pos_r, b_A, HAS_SRC_IDX, FAST_EXP)
        # A flush's out comes from its new state, but for ROLE 1 (the flush kernel stores it):
        # there every request's out is the dual form's.
        if ROLE == 0:
            m_flush_out = m_flush
        else:
            m_flush_out = False
        if ROLE == 0 and m_flush_out:  # (ROLE == 0 first: the branch not compiled where no flush is)
            b_xrm = _ring_x(rg, pos_r, m_r) if DUAL_FLUSH else None
            if WEIGHTS:  # (out's were the Grams' kernel's)
                b_S, b_w = _ring_decays(rg, o_r, m_r, pos_r, b_A, HAS_SRC_IDX, FAST_EXP)
            b_state = _flushed_state(b_h0, rg, b_xrm, pos_r, m_r, b_S, b_w, b_A, DUAL_FLUSH, X16, WINDOW, FAST_EXP,
                                     HAS_SRC_IDX)
            if not FLUSH_DRAFTS:
                _store_state(b_state, ck, STOCHASTIC, PHILOX_ROUNDS, BLOCK_N, EVICT_FIRST)
            b_state = tl.fma(b_state, exp_dA(b_A * b_dt, FAST_EXP),
                             (b_B.to(tl.float32) * b_dt)[None, :] * b_xf[:, None])
            b_y = tl.sum(b_state * b_C[None, :], axis=1)
            if FLUSH_DRAFTS:  # the ring restarts: the state holds the cached tokens and the token
                _store_state(b_state, ck, STOCHASTIC, PHILOX_ROUNDS, BLOCK_N, EVICT_FIRST)
        else:
            # The dual form with one token.
            m_xr = m_r[:, None] if m_vm is None else m_r[:, None] & m_vm[None, :]
            b_xr = tl.load(p_xc[None, :] + pos_r[:, None] * stride_xc_r, mask=m_xr, other=0.0).to(tl.float32)
            if WEIGHTS:  # the head's weights from _gram_kernel: w_j C . B_j [RP], exp(A S), exp(A dt'), dt' C . B
                if LATE:
                    wait_prior(PDL)
                p_wt = p_gram + i_b * stride_gram_b + i_h * stride_gram_g
                b_acc = (tl.load(p_wt + RP) * tl.sum(b_h0 * b_C[None, :], axis=1)
                         + tl.sum(b_xr * tl.load(p_wt + o_r)[:, None], axis=0))
                b_y = tl.load(p_wt + RP + 1) * b_acc + tl.load(p_wt + RP + 2) * b_xf
            elif GRAM:  # the group's Grams, computed once for its heads by _gram_kernel
                if LATE:
                    wait_prior(PDL)
                p_g = p_gram + i_b * stride_gram_b + i_g * stride_gram_g
                b_gram = tl.load(p_g + o_r)  # [RP]: C . B_j, 0 past n_old
                b_bc = tl.load(p_g + RP)  # C . B of the token
            else:
                b_Br = _ring_B(rg, pos_r, m_r).to(tl.float32)
                b_gram = tl.sum(b_Br * b_C[None, :], axis=1)  # [RP]: C . B_j
                b_bc = tl.sum(b_B.to(tl.float32) * b_C, axis=0)
            if not WEIGHTS:
                b_acc = (exp_dA(b_A * b_S, FAST_EXP) * tl.sum(b_h0 * b_C[None, :], axis=1)
                         + tl.sum(b_xr * (b_w * b_gram)[:, None], axis=0))
                b_y = exp_dA(b_A * b_dt, FAST_EXP) * b_acc + (b_dt * b_bc) * b_xf
        b_y = gated_out(b_y, b_x, b_z, b_D, m_live, HAS_D, HAS_Z, HAS_SRC_IDX)
        tl.store(p_out + i_xb * stride_out_b + t0 * stride_out_t + i_h * stride_out_h + o_m * stride_out_p,
                 b_y, mask=m_vm)
        # append: the exact kernel's position and values (a flush of FLUSH_DRAFTS none)
        m_app = m_live
        if FLUSH_DRAFTS:
            m_app = both(m_app, m_flush == 0)
        _append_token(rg, wrap(start + n_old, ring), b_x, b_dt, b_B, m_app, i_m, i_h, HEADS_PER_GROUP, WEIGHTS)
    else:
        # Verify: the drafts' inputs as tiles of DW rows (the first n_tok live), all loaded
        # before any store: x [BLOCK_M, DW] (a column a draft), B [DW, BLOCK_N], dt' [DW]; DW
        # = TP draft by draft, TD (a matmul's least side) with TILES.
        tl.static_assert(not FLUSH_DRAFTS, "a flush that absorbs the drafts is for T = 1")
        DW: tl.constexpr = TD if TILES else TP
        # (B_LATE with the Grams: the drafts' B is the append's alone, loaded there, _append_drafts)
        B_ON_APPEND: tl.constexpr = B_LATE and GRAM and not WEIGHTS
        o_t, m_t, o_tok, m_md, b_xd, b_dtd, b_Bd = _drafts(tok, i_xb, t0, n_tok, i_h, i_g, o_m, o_n, m_vm, m_vn,
                                                           b_dt_bias, DW, HAS_DT_BIAS, DT_SOFTPLUS, not B_ON_APPEND)

        # The ring gathered in age order, masked past n_old: x [BLOCK_M, RP] (and, unless the
        # Grams' kernel weighed them, WEIGHTS, their dt' and weights).
        tl.static_assert(not (WEIGHTS and TILES), "the precomputed weights are the draft-by-draft step's")
        o_r, m_r, pos_r = _ring_positions(n_old, start, ring, m_live, RP, HAS_SRC_IDX)
        if WEIGHTS:  # (the Grams' kernel's, in the weights out reads; a flush computes its own)
            b_S = 0.0
            b_w = tl.zeros([RP], tl.float32)
        else:
            b_S, b_w = _ring_decays(rg, o_r, m_r, pos_r, b_A, HAS_SRC_IDX, FAST_EXP)
        tl.static_assert(ROLE != 7 or not (WEIGHTS or (TILES and not PASSES)),
                         "the flush programs beside: draft by draft, or tiles in passes (_tiles_cols' FIRST)")
        b_xr = _ring_x(rg, pos_r, m_r)

        if ROLE != 2:  # out (the flush kernel stores the checkpoint only)
            if TILES:
                # out in the dual form as tiles [BLOCK_M, TD] (a column a draft) on the tensor cores:
                # h0 C^T (h0 split in three bf16 parts), then the ring's and the drafts' x by their
                # weights W [RP, TD], L [TD, TD] (each split in three: _dot_split).
                if PASSES:  # h0 C^T (and a flush) COLS columns of the tile at a time
                    b_h0C_passes = _tiles_cols(p_slot, b_h0, p_C, p_B_cache,
                                               rg, i_ring, i_xb, i_h, i_g, i_m, o_m, m_m, o_tok, m_t, m_r, pos_r,
                                               b_xr, b_S, b_w, b_A, m_flush, dstate, stride_state_h, stride_state_p,
                                               stride_state_n, stride_C_b, stride_C_t, stride_C_g, stride_C_n,
                                               stride_Bc_s, stride_Bc_g, stride_Bc_n, TD, C16, B16, ROLE == 0,
                                               EVEN_M, EVEN_N, PACKED_ROWS, FAST_EXP, EVICT_FIRST, BLOCK_M, BLOCK_N,
                                               COLS, COLS_AHEAD, ROLE == 7, COLS_IN_AHEAD)
                m_cd = m_t[None, :] if m_vn is None else m_vn[:, None] & m_t[None, :]
                b_CdT = tl.load(p_C + i_xb * stride_C_b + i_g * stride_C_g + o_n[:, None] * stride_C_n
                                + o_tok[None, :] * stride_C_t, mask=m_cd, other=0.0)
                if GRAM:  # the group's Grams from _gram_kernel
                    b_GrT, b_GdT = _tiles_grams(p_gram, i_b, i_g, o_t, o_r, stride_gram_b, stride_gram_g, T, TP,
                                                RP, LATE, PDL)
                else:
                    if ROLE != 7:  # (a flush program's out: nothing cached)
                        b_Brt = _ring_B(rg, pos_r, m_r)
                        b_GrT = _dot_exact(b_Brt, b_CdT, MMA16)
                    b_GdT = _dot_exact(b_Bd, b_CdT, MMA16)
                b_d = tl.cumsum(b_dtd, axis=0)  # the drafts' cumulative dt'
                b_e = exp_dA(b_A * b_d, FAST_EXP)  # exp(A d_t)
                # (the ring's weights W and decay before L in the whole tile's kernels, after it in
                # the passes': the order each was measured in, runs 188 and 201-203; the same values)
                W_FIRST: tl.constexpr = ROLE != 7 and not PASSES
                if W_FIRST:
                    b_WrT = b_w[:, None] * b_GrT * b_e[None, :]
                b_LT = tl.where(o_t[:, None] <= o_t[None, :],
                                exp_dA(b_A * (b_d[None, :] - b_d[:, None]), FAST_EXP) * b_dtd[:, None] * b_GdT, 0.0)
                if W_FIRST:
                    b_dec = exp_dA(b_A * b_S, FAST_EXP) * b_e
                if PASSES:
                    b_h0C = b_h0C_passes
                else:
                    b_h0C = _dot_split_a(b_h0, b_CdT, C16)
                if ROLE == 7:  # from the new checkpoint (h1 C^T, _tiles_cols' FIRST), nothing cached
                    b_y = b_h0C * b_e[None, :] + _dot_split(b_xd, b_LT, X16)
                else:
                    if not W_FIRST:
                        b_WrT = b_w[:, None] * b_GrT * b_e[None, :]
                        b_dec = exp_dA(b_A * b_S, FAST_EXP) * b_e
                    b_y = b_h0C * b_dec[None, :] + _dot_split(b_xr, b_WrT, X16) + _dot_split(b_xd, b_LT, X16)
                b_zd = b_xd
                if HAS_Z:
                    b_zd = tl.load(p_z + i_xb * stride_z_b + i_h * stride_z_h + o_m[:, None] * stride_z_p
                                   + o_tok[None, :] * stride_z_t, mask=m_md, other=0.0)
                b_Dd = 0.0
                if HAS_D:
                    b_Dd = b_D[:, None]
                b_y = gated_out(b_y, b_xd, b_zd, b_Dd, m_live, HAS_D, HAS_Z, HAS_SRC_IDX)
                tl.store(p_out + i_xb * stride_out_b + i_h * stride_out_h + o_m[:, None] * stride_out_p
                         + o_tok[None, :] * stride_out_t, b_y, mask=m_md)
            else:
                # out in the dual form (module docstring), draft by draft (_drafts_out); a flush
                # program's (ROLE 7, every one of its requests flushes) from the request's new
                # checkpoint, flushed first on the tile, with nothing cached.
                step = _Step(b_xr, b_xd, b_Bd, b_dtd, b_A, b_D, rg, pos_r, o_r, m_r, o_t, tok, i_xb, t0, n_tok, i_b,
                             i_h, i_g, o_m, o_n, m_vm, m_vn, m_live, p_gram, stride_gram_b, stride_gram_g)
                if ROLE == 7:
                    # (m_flush holds in every program that gets here; the branch keeps the PTX of
                    # the kernel measured and GPU-tested in runs 173-182)
                    if m_flush:
                        b_h1 = _absorb_mma(b_h0, rg, pos_r, m_r, b_S, b_w, b_A, B16, FAST_EXP)
                        _store_state(b_h1, ck, STOCHASTIC, PHILOX_ROUNDS, BLOCK_N, EVICT_FIRST)
                        _drafts_out(b_h1, 0.0, 0.0, step, T, TP, RP, True, GRAM, WEIGHTS, LATE, PDL, VARLEN, HAS_D,
                                    HAS_Z, HAS_SRC_IDX, FAST_EXP, DRAFTS_AHEAD)
                    else:
                        _drafts_out(b_h0, b_S, b_w, step, T, TP, RP, True, GRAM, WEIGHTS, LATE, PDL, VARLEN, HAS_D,
                                    HAS_Z, HAS_SRC_IDX, FAST_EXP, DRAFTS_AHEAD)
                else:
                    _drafts_out(b_h0, b_S, b_w, step, T, TP, RP, False, GRAM, WEIGHTS, LATE, PDL, VARLEN, HAS_D,
                                HAS_Z, HAS_SRC_IDX, FAST_EXP, DRAFTS_AHEAD)

        if (ROLE == 0 or ROLE == 2) and not PASSES:  # (PASSES: stored in _tiles_cols)
            if m_flush:  # the new checkpoint: the cached tokens absorbed (after out: h0's last use)
                if WEIGHTS:  # (out's were the Grams' kernel's)
                    b_S, b_w = _ring_decays(rg, o_r, m_r, pos_r, b_A, HAS_SRC_IDX, FAST_EXP)
                b_state = _flushed_state(b_h0, rg, b_xr, pos_r, m_r, b_S, b_w, b_A, DUAL_FLUSH, X16, WINDOW,
                                         FAST_EXP, HAS_SRC_IDX, b_Brt if B_REUSE and TILES and not GRAM else None)
                _store_state(b_state, ck, STOCHASTIC, PHILOX_ROUNDS, BLOCK_N, EVICT_FIRST)
        if ROLE == 2:
            return

        # append: the same positions and values as the exact kernel
        p_Bl = None
        if B_ON_APPEND:
            p_Bl = _drafts_B_at(tok, i_xb, i_g, o_tok, o_n)
        _append_drafts(rg, o_t, m_t, b_xd, b_dtd, b_Bd, i_m, i_h, HEADS_PER_GROUP, HAS_SRC_IDX, not WEIGHTS, p_Bl)
# fmt: on


# The draft-by-draft verify step's kernel: the same function with the ring's x stride over the
# head dim a run-time int. Specialized, as it is for every other path, that stride is the
# constant 1, Triton vectorizes the ring's x tile [BLOCK_M, RP] along its rows and lays the
# warp's other lanes over the ring's tokens, so each draft's weighted sum over the ring is
# four rounds of shuffles; unspecialized, the lanes go over the rows, a lane holds its rows'
# ring tokens and the sum adds in registers (at T = 4, (16,1), bs 512: 94 shuffles instead of
# 276; benchmarks/results/NVIDIA_H200/fast-chunk-sweep/). At T = 1 and with the tiles the
# specialized kernel measured faster, so they keep it.
_ring_lanes_kernel = triton.heuristics(_HEURISTICS)(
    triton.jit(_selective_state_replay_fast_kernel.fn.fn, do_not_specialize=["stride_xc_p"])
)


# fmt: off
@triton.jit
def _head_dt(p_dt, p_dt_bias, o_tok, i_hs, m_h, m_t, stride_dt_t, stride_dt_h, stride_dt_bias_h,
             DT_SOFTPLUS: tl.constexpr, HAS_DT_BIAS: tl.constexpr):
    """The drafts' dt' of heads i_hs (m_h) at tokens o_tok (m_t; 0 past them) [heads, tokens],
    with the main kernel's operations (the same bits in the ring)."""
    m = m_h[:, None] & m_t[None, :]
    b_dt = tl.load(p_dt + i_hs[:, None] * stride_dt_h + o_tok[None, :] * stride_dt_t, mask=m, other=0.0)
    b_dt = b_dt.to(tl.float32)
    if HAS_DT_BIAS:
        b_dt += tl.load(p_dt_bias + i_hs * stride_dt_bias_h, mask=m_h, other=0.0).to(tl.float32)[:, None]
    if DT_SOFTPLUS:
        b_dt = softplus(b_dt)
    return tl.where(m_t[None, :], b_dt, 0.0)


@triton.jit
def _weights(p_B_cache, p_dt_cache, p_flush, p_dt, p_dt_bias, p_A, p_B, p_C, p_w, b_Br, i_b, i_g, i_ring,
             i_xb, t0, n_tok, n_old, start, m_live, o_r, m_r, pos_r, o_n, m_vn, ring,
             stride_Bc_s, stride_Bc_g, stride_Bc_r, stride_Bc_n, stride_dtc_s, stride_dtc_h, stride_dtc_r,
             stride_dt_b, stride_dt_t, stride_dt_h, stride_dt_bias_h, stride_A_h, stride_B_b, stride_B_t,
             stride_B_g, stride_B_n, stride_C_b, stride_C_t, stride_C_g, stride_C_n, stride_w_b, stride_w_h,
             T: tl.constexpr, TD: tl.constexpr, TP: tl.constexpr, MMA16: tl.constexpr, RP: tl.constexpr,
             HAS_SRC_IDX: tl.constexpr, HEADS_PER_GROUP: tl.constexpr, HB: tl.constexpr,
             DT_SOFTPLUS: tl.constexpr, HAS_DT_BIAS: tl.constexpr, FAST_EXP: tl.constexpr,
             HOST_FLUSH: tl.constexpr, FLUSH_DRAFTS: tl.constexpr, LEAVE_FLUSHING: tl.constexpr):
    """_gram_kernel's program with WEIGHTS: request i_b's Grams of group i_g (b_Br its ring's B
    rows [RP, BLOCK_N] in age order), its heads' weights into p_w [B, H, W], and its drafts' dt'
    and B appended to the ring (as the main kernel would: at rows start + n_old + t)."""
    m_app = m_live
    if FLUSH_DRAFTS or LEAVE_FLUSHING:  # the flushing request appends nothing, or its flush programs do
        m_app = both(m_app, _flushes(p_flush, i_b, n_old, n_tok, ring, T, False, HOST_FLUSH) == 0)
    p_Bc = p_B_cache + i_ring * stride_Bc_s + i_g * stride_Bc_g + o_n * stride_Bc_n  # [BLOCK_N]
    # the ring's dt' one row further on in age order (_ring_dt_next's rows)
    _, m_r1, pos_r1 = _ring_positions(n_old - 1, start + 1, ring, m_live, RP, HAS_SRC_IDX)
    o_t = tl.arange(0, TD)
    m_t = o_t < n_tok
    pos_t = wrap(start + n_old + o_t, ring)  # the drafts' rows
    m_tt = o_t < T
    if T == 1:
        b_C = load(p_C + i_xb * stride_C_b + t0 * stride_C_t + i_g * stride_C_g + o_n * stride_C_n,
                   m_vn).to(tl.float32)
        b_B = load(p_B + i_xb * stride_B_b + t0 * stride_B_t + i_g * stride_B_g + o_n * stride_B_n, m_vn)
        b_gram = tl.sum(b_Br.to(tl.float32) * b_C[None, :], axis=1)  # [RP]: C . B_j
        b_bc = tl.sum(b_B.to(tl.float32) * b_C, axis=0)
        tl.store(p_Bc + wrap(start + n_old, ring) * stride_Bc_r, b_B, mask=both(m_vn, m_app))
    else:
        o_tok = t0 + o_t
        m_nd = m_t[None, :] if m_vn is None else m_vn[:, None] & m_t[None, :]
        b_CdT = tl.load(p_C + i_xb * stride_C_b + i_g * stride_C_g + o_n[:, None] * stride_C_n
                        + o_tok[None, :] * stride_C_t, mask=m_nd, other=0.0)
        b_Bd = tl.load(p_B + i_xb * stride_B_b + i_g * stride_B_g + o_tok[:, None] * stride_B_t
                       + o_n[None, :] * stride_B_n, mask=tl.trans(m_nd), other=0.0)
        b_gr = tl.trans(_dot_exact(b_Br, b_CdT, MMA16))  # [TD (t), RP]: C_t . B_j
        b_gd = tl.trans(_dot_exact(b_Bd, b_CdT, MMA16))  # [TD (t), TD (u)]: C_t . B_u
        m_ta = both(m_t, m_app)
        m_tn = m_ta[:, None] if m_vn is None else m_ta[:, None] & m_vn[None, :]
        tl.store(p_Bc[None, :] + pos_t[:, None] * stride_Bc_r, b_Bd, mask=m_tn)
    for h_lo in tl.static_range(0, HEADS_PER_GROUP, HB):
        o_hh = h_lo + tl.arange(0, HB)
        m_h = o_hh < HEADS_PER_GROUP
        i_hs = i_g * HEADS_PER_GROUP + o_hh
        b_A = tl.load(p_A + i_hs * stride_A_h, mask=m_h, other=0.0).to(tl.float32)
        p_dth = p_dt_cache + i_ring * stride_dtc_s + i_hs * stride_dtc_h  # [HB]
        b_dtr = tl.load(p_dth[:, None] + pos_r[None, :] * stride_dtc_r, mask=m_h[:, None] & m_r[None, :],
                        other=0.0)
        b_dtr1 = tl.load(p_dth[:, None] + pos_r1[None, :] * stride_dtc_r, mask=m_h[:, None] & m_r1[None, :],
                         other=0.0)
        b_S, b_w = _ring_decay(b_dtr, b_dtr1, b_A[:, None], FAST_EXP, 1)  # [HB], [HB, RP]
        p_wh = p_w + i_b * stride_w_b + i_hs * stride_w_h  # [HB]
        if T == 1:
            b_dt = tl.load(p_dt + i_xb * stride_dt_b + t0 * stride_dt_t + i_hs * stride_dt_h, mask=m_h, other=0.0)
            b_dt = b_dt.to(tl.float32)
            if HAS_DT_BIAS:
                b_dt += tl.load(p_dt_bias + i_hs * stride_dt_bias_h, mask=m_h, other=0.0).to(tl.float32)
            if DT_SOFTPLUS:
                b_dt = softplus(b_dt)  # the main kernel's operations: the same dt' bits in the ring
            tl.store(p_wh[:, None] + o_r[None, :], b_w * b_gram[None, :], mask=m_h[:, None])
            tl.store(p_wh + RP, exp_dA(b_A * b_S, FAST_EXP), mask=m_h)
            tl.store(p_wh + RP + 1, exp_dA(b_A * b_dt, FAST_EXP), mask=m_h)
            tl.store(p_wh + RP + 2, b_dt * b_bc, mask=m_h)
            tl.store(p_dth + wrap(start + n_old, ring) * stride_dtc_r, b_dt, mask=both(m_h, m_app))
        else:
            b_dtd = _head_dt(p_dt + i_xb * stride_dt_b, p_dt_bias, t0 + o_t, i_hs, m_h, m_t, stride_dt_t,
                             stride_dt_h, stride_dt_bias_h, DT_SOFTPLUS, HAS_DT_BIAS)  # [HB, TD]
            b_d = tl.cumsum(b_dtd, axis=1)  # the drafts' cumulative dt'
            b_e = exp_dA(b_A[:, None] * b_d, FAST_EXP)  # exp(A d_t) [HB, TD]
            m_w = m_h[:, None, None] & m_tt[None, :, None]
            b_cr = b_w[:, None, :] * b_gr[None, :, :] * b_e[:, :, None]  # [HB, TD (t), RP]
            tl.store(p_wh[:, None, None] + o_t[None, :, None] * RP + o_r[None, None, :], b_cr, mask=m_w)
            b_dd = b_d[:, :, None] - b_d[:, None, :]  # d_t - d_u [HB, TD (t), TD (u)]
            b_cd = tl.where(o_t[None, None, :] <= o_t[None, :, None],
                            exp_dA(b_A[:, None, None] * b_dd, FAST_EXP) * b_dtd[:, None, :] * b_gd[None, :, :], 0.0)
            tl.store(p_wh[:, None, None] + T * RP + o_t[None, :, None] * TP + o_t[None, None, :], b_cd,
                     mask=m_w & (o_t < TP)[None, None, :])
            b_sc = exp_dA(b_A * b_S, FAST_EXP)[:, None] * b_e  # [HB, TD]
            tl.store(p_wh[:, None] + T * (RP + TP) + o_t[None, :], b_sc, mask=m_h[:, None] & m_tt[None, :])
            m_hd = m_h[:, None] & m_t[None, :]
            if m_app is not None:
                m_hd = m_hd & m_app
            tl.store(p_dth[:, None] + pos_t[None, :] * stride_dtc_r, b_dtd, mask=m_hd)


@triton.heuristics(_GRAM_HEURISTICS)
@triton.jit
def _gram_kernel(
    p_B_cache, p_dt_cache, p_ring_start, p_cached, p_flush, p_dt, p_dt_bias, p_A, p_B, p_C, p_src_idx,
    p_cu_seqlens, p_gram,
    dstate, pad_slot_id, total_tokens, ring,
    stride_Bc_s, stride_Bc_g, stride_Bc_r, stride_Bc_n,
    stride_dtc_s, stride_dtc_h, stride_dtc_r,
    stride_dt_b, stride_dt_t, stride_dt_h, stride_dt_bias_h, stride_A_h,
    stride_B_b, stride_B_t, stride_B_g, stride_B_n,
    stride_C_b, stride_C_t, stride_C_g, stride_C_n,
    stride_src_idx, stride_gram_b, stride_gram_g,
    T: tl.constexpr, TD: tl.constexpr, TP: tl.constexpr, MMA16: tl.constexpr,
    WINDOW: tl.constexpr, RP: tl.constexpr, CURSOR_BY_REQUEST: tl.constexpr, HAS_SRC_IDX: tl.constexpr,
    HAS_RING_START: tl.constexpr, VARLEN: tl.constexpr, EVEN_N: tl.constexpr, BLOCK_N: tl.constexpr,
    PDL: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr, HOST_FLUSH: tl.constexpr,
    WEIGHTS: tl.constexpr = False,  # the dual form's weights a (request, head) into p_gram, and dt' and B appended
    HEADS_PER_GROUP: tl.constexpr = 1,
    HB: tl.constexpr = 16,  # WEIGHTS: heads a block
    DT_SOFTPLUS: tl.constexpr = False,
    FAST_EXP: tl.constexpr = False,
    FLUSH_DRAFTS: tl.constexpr = False,  # WEIGHTS: a flushing request appends nothing (vLLM's ring restart)
    LEAVE_FLUSHING: tl.constexpr = False,  # WEIGHTS: a flushing request's appends are its flush programs'
):
    """The Grams of the drafts' C against the B rows, one program a (request, group): the same
    for every head of the group, which the main kernel's programs then read instead of each
    loading the ring's [RP, N] B rows and reducing or multiplying them (vLLM's bc_pre
    precompute does the same at T = 1). The ring's rows in age order, 0 past num_cached; the
    cursors and flush rule are the main kernel's, and a flushing request's Grams go unused.

    T = 1, [RP + 1]: gram[j] = C . B_j of cached token j, gram[RP] = C . B of the token.
    T >= 2, [T RP + T TP], a row a draft t: gram[t RP + j] = C_t . B_j of cached token j,
    then gram[T RP + t TP + u] = C_t . B_u of draft u (0 past the request's drafts), from the
    tiles B_ring C^T [RP, TD] and B_drafts C^T [TD, TD] (TD = max(16, TP): a matmul's least
    side) on the tensor cores, whose 16-bit products are exact (_dot_exact). PDL: the main
    kernel, launched programmatic-dependent, may start at once; it reads the Grams after its
    wait, once it has issued its state tile's loads.

    WEIGHTS (the draft-by-draft step and decode): the Grams stay in registers and the program
    writes, for each head of its group (HB at a time), the dual form's weights the main kernel
    would compute from them, with its operations (module docstring), a row [B, H, W] a
    (request, head):
    T = 1, W = RP + 3: w_j C . B_j [RP], exp(A S), exp(A dt'), dt' C . B;
    T >= 2, W = T (RP + TP + 1): for each draft t the ring's w_j (C_t . B_j) exp(A d_t) [RP],
    then for each t the drafts' exp(A (d_t - d_u)) dt'_u (C_t . B_u) for u <= t, else 0 [TP],
    then exp(A S) exp(A d_t) [T];
    and it appends the drafts' dt' (each head's) and B (the group's) to the ring, which the
    main kernel then leaves (it appends x)."""
    if PDL:
        gdc_launch_dependents()
    i_b = tl.program_id(0)
    i_g = tl.program_id(1)
    t0, n_tok, i_xb = token_span(p_cu_seqlens, i_b, total_tokens, T, VARLEN, True)
    if VARLEN:
        if n_tok == 0:
            return
    _, m_live, i_ring, n_old, start = _cursors(
        p_src_idx, p_cached, p_ring_start, i_b, stride_src_idx, pad_slot_id, ring, WINDOW, CURSOR_BY_REQUEST,
        HAS_SRC_IDX, HAS_RING_START, False)
    o_r, m_r, pos_r = _ring_positions(n_old, start, ring, m_live, RP, HAS_SRC_IDX)
    o_n = tl.arange(0, BLOCK_N)
    m_vn = unless(EVEN_N, o_n < dstate)
    m_Br = m_r[:, None] if m_vn is None else m_r[:, None] & m_vn[None, :]
    b_Br = tl.load(p_B_cache + i_ring * stride_Bc_s + i_g * stride_Bc_g + pos_r[:, None] * stride_Bc_r
                   + o_n[None, :] * stride_Bc_n, mask=m_Br, other=0.0)
    p_g = p_gram + i_b * stride_gram_b + i_g * stride_gram_g
    if WEIGHTS:
        _weights(p_B_cache, p_dt_cache, p_flush, p_dt, p_dt_bias, p_A, p_B, p_C, p_gram, b_Br, i_b, i_g, i_ring,
                 i_xb, t0, n_tok, n_old, start, m_live, o_r, m_r, pos_r, o_n, m_vn, ring,
                 stride_Bc_s, stride_Bc_g, stride_Bc_r, stride_Bc_n, stride_dtc_s, stride_dtc_h, stride_dtc_r,
                 stride_dt_b, stride_dt_t, stride_dt_h, stride_dt_bias_h, stride_A_h, stride_B_b, stride_B_t,
                 stride_B_g, stride_B_n, stride_C_b, stride_C_t, stride_C_g, stride_C_n, stride_gram_b,
                 stride_gram_g, T, TD, TP, MMA16, RP, HAS_SRC_IDX, HEADS_PER_GROUP, HB, DT_SOFTPLUS, HAS_DT_BIAS,
                 FAST_EXP, HOST_FLUSH, FLUSH_DRAFTS, LEAVE_FLUSHING)
    elif T == 1:
        b_C = load(p_C + i_xb * stride_C_b + t0 * stride_C_t + i_g * stride_C_g + o_n * stride_C_n,
                   m_vn).to(tl.float32)
        b_B = load(p_B + i_xb * stride_B_b + t0 * stride_B_t + i_g * stride_B_g + o_n * stride_B_n,
                   m_vn).to(tl.float32)
        tl.store(p_g + o_r, tl.sum(b_Br.to(tl.float32) * b_C[None, :], axis=1))
        tl.store(p_g + RP, tl.sum(b_B * b_C, axis=0))
    else:
        o_t = tl.arange(0, TD)
        o_tok = t0 + o_t
        m_nd = (o_t < n_tok)[None, :] if m_vn is None else m_vn[:, None] & (o_t < n_tok)[None, :]
        b_CdT = tl.load(p_C + i_xb * stride_C_b + i_g * stride_C_g + o_n[:, None] * stride_C_n
                        + o_tok[None, :] * stride_C_t, mask=m_nd, other=0.0)
        b_Bd = tl.load(p_B + i_xb * stride_B_b + i_g * stride_B_g + o_tok[:, None] * stride_B_t
                       + o_n[None, :] * stride_B_n, mask=tl.trans(m_nd), other=0.0)
        m_tg = o_t[None, :] < T
        tl.store(p_g + o_t[None, :] * RP + o_r[:, None], _dot_exact(b_Br, b_CdT, MMA16), mask=m_tg)
        tl.store(p_g + T * RP + o_t[None, :] * TP + o_t[:, None], _dot_exact(b_Bd, b_CdT, MMA16),
                 mask=m_tg & (o_t[:, None] < TP))
# fmt: on


def fast_launch(
    call: ReplayCall,
    host_flush: torch.Tensor | None = None,
    flush_drafts: bool = False,
    cursor_by_request: bool = False,
) -> Launch:
    """The fast kernel's launch for a checked call (replay.prepare builds it; call.flush:
    every request flushes, replay_flush). host_flush (int8/bool [B]), flush_drafts,
    cursor_by_request (num_cached [B], ring_start None: rings start at row 0): the engine
    conventions of the module docstring."""
    config, state, cu_seqlens = call.config, call.state, call.cu_seqlens
    if config.ordered_sum:
        raise ValueError(
            f"config {config.label}: the fast replay route sums rows in its own layout; the "
            "ordered row sum matches upstream bits the fast route does not promise"
        )
    if state.shape[-1] < 9:
        raise ValueError(
            f"dstate {state.shape[-1]}: the fast replay route multiplies tiles of at least 16 "
            "state columns (dstate >= 9)"
        )
    if flush_drafts and (cu_seqlens is not None or call.tokens != 1):
        raise ValueError(
            "flush_drafts (a flush that absorbs the drafts) takes one dense token a request (T = 1), "
            f"got T = {call.tokens}{' with cu_seqlens' if cu_seqlens is not None else ''}"
        )
    window = call.ring - call.tokens
    tiles = _tiles(call)
    flags = dict(
        RP=max(16, triton.next_power_of_2(window)),
        TP=triton.next_power_of_2(call.tokens),
        TD=max(16, triton.next_power_of_2(call.tokens)),
        TILES=tiles,
        MMA16=call.B.dtype == call.C.dtype and call.B.dtype in (torch.bfloat16, torch.float16),
        C16=call.C.dtype == torch.bfloat16,
        X16=call.x.dtype == torch.bfloat16,
        DUAL_FLUSH=_flush_form(dual_flush(config, state.shape[-1], tiles), call, config, tiles),
        COLS=_cols_a_pass(call, tiles),
        DRAFTS_AHEAD=DRAFTS_AHEAD and call.tokens > 1 and not tiles,
        B_LATE=DRAFTS_B_LATE and not tiles and call.tokens >= DRAFTS_B_LATE_FROM_TOKENS,
        B_REUSE=TILES_FLUSH_B_REUSE and tiles,
        ROLE=0,
        FLUSH_DRAFTS=flush_drafts,
        CURSOR_BY_REQUEST=cursor_by_request,
    )
    if flags["COLS"]:  # a flush's products with the ring's B on the tensor cores where it is bf16
        flags.update(
            B16=call.B_cache.dtype == torch.bfloat16,
            COLS_AHEAD=TILES_COLS_AHEAD,
            COLS_IN_AHEAD=TILES_COLS_INPUTS_AHEAD,
        )
    # the draft-by-draft verify step: its own kernel and the chunked tile (_ring_lanes_kernel, CHUNK)
    rows_path = call.tokens > 1 and not flags["TILES"]
    kernel = _ring_lanes_kernel if rows_path else _selective_state_replay_fast_kernel
    rows_chunk = min(CHUNK, triton.next_power_of_2(state.shape[-1]))  # the draft-by-draft kernel's CHUNK
    flags["CHUNK"] = rows_chunk if rows_path else 0
    arguments: dict[str, Any] = {
        "p_flush": host_flush,
        "p_gram": None,
        "stride_gram_b": 0,
        "stride_gram_g": 0,
        "n_requests": call.requests,
        "n_shares": 0,
    }
    # On a GPU (with Triton's grid dependency control) the kernels of one call after the first
    # are launched programmatic-dependent on the one before: each issues its state tile's loads
    # while the one before runs, and waits for it before it reads (or writes) what that one wrote
    # (or read).
    chain_pdl = _chain_pdl(call)
    gram_launch = flush_launch = None
    if _gram_first(call):
        weights = WEIGHTS and not tiles
        # (the flush programs of ROLE 4 and 6, and at T >= 2 of ROLE 7, take their requests'
        # whole steps, appends and all)
        if call.tokens == 1:
            leave = weights and (_flush_programs(call) or _side_flush(call))
        else:
            leave = weights and _flush_beside(call, rows_path)
        gram_launch, gram = _gram_launch(
            call, flags, cursor_by_request, chain_pdl, weights, host_flush, leave
        )
        flags["WEIGHTS"] = weights
        arguments.update(p_gram=gram, stride_gram_b=gram.stride(0), stride_gram_g=gram.stride(1))
        if chain_pdl:
            call = dataclasses.replace(call, pdl=True)
            flags["LATE_WAIT"] = LATE_WAIT and (call.tokens > 1 or call.requests < LATE_WAIT_DECODE_BELOW)
    if _flush_programs(call):  # the flush programs first in the main kernel's grid (ROLE 4, _decode_flushes)
        per_pass = PROGRAMS_LIST_BLOCK or 32 * call.config.num_warps  # a request a thread
        shares, list_block = _flush_list(call.requests, PROGRAMS_SHARE, per_pass)
        flags.update(
            ROLE=4,
            LIST_BLOCK=list_block,
            DUAL_FLUSH=_flush_form(
                DUAL_FLUSH and PROGRAMS_DUAL and call.config.block_m >= 16, call, call.config
            ),
        )
        flags["AHEAD"] = PROGRAMS_AHEAD and bool(flags["DUAL_FLUSH"])
        if PROGRAMS_TAKE > 0:  # a rank counted in one pass over the requests (up to RANK_BLOCK_MAX)
            flags.update(
                TAKE=PROGRAMS_TAKE,
                RANK_BLOCK=_flush_list(call.requests, 1, RANK_BLOCK_MAX)[1],
                OWN_ALIGNED=_aligned16(call),
            )
        arguments["n_shares"] = shares
        if call.requests >= PROGRAMS_CAP_FROM and call.config.max_registers is None:
            config = dataclasses.replace(call.config, max_registers=PROGRAMS_MAX_REGISTERS)
            call = dataclasses.replace(call, config=config)
        main = call.launch(kernel, arguments, flags)
        return main._replace(before=gram_launch, grid=(*main.grid[:2], main.grid[2] + shares))
    if _side_flush(call):  # flush programs beside the main kernel and after it (ROLE 6), ROLE 5 the rest
        sconfig = SIDE_CONFIG or flush_config(*state.shape[-2:])
        shares, list_block = _flush_list(call.requests, FLUSH_SHARE, 32 * sconfig.num_warps)
        flush_args = {**arguments, "p_gram": None, "stride_gram_b": 0, "stride_gram_g": 0}
        side_flags = {
            **flags,
            "WEIGHTS": False,
            "ROLE": 6,
            "LIST_BLOCK": list_block,
            "CAP_SHARE": SIDE_CAP_SHARE,
            "DUAL_FLUSH": _flush_form(dual_flush(sconfig, state.shape[-1]), call, sconfig),
        }
        side = None
        if SIDE_PROGRAMS:
            side = dataclasses.replace(call, config=sconfig, pdl=False).launch(
                kernel,
                flush_args,
                {**side_flags, "RANKS": 1, "AHEAD": SIDE_AHEAD and bool(side_flags["DUAL_FLUSH"])},
            )
            side = _flush_grid(side, sconfig, state, SIDE_PROGRAMS)
        after_pdl = call.pdl or chain_pdl
        after = dataclasses.replace(call, config=sconfig, pdl=after_pdl).launch(
            kernel,
            flush_args,
            {
                **side_flags,
                "RANKS": 2 if SIDE_PROGRAMS else 0,
                "AHEAD": AFTER_AHEAD and bool(side_flags["DUAL_FLUSH"]),
            },
        )
        after = _flush_grid(after, sconfig, state, SIDE_AFTER_PROGRAMS or shares)
        flags["ROLE"] = 5
        main = call.launch(kernel, arguments, flags)
        return main._replace(before=gram_launch, beside=side, after=after)
    if _flush_beside(call, rows_path):
        # The flushing requests' whole steps (ROLE 7: the flush first, on the tile, as one matmul;
        # out from the new checkpoint), the other requests' in the main kernel (ROLE 5). The two
        # touch disjoint requests and the flush programs read neither the Grams nor anything
        # the main kernel writes: they run beside it, on a stream of their own. (With
        # BESIDE_TILES the main kernel may be the tiles'; the flush programs are then tiles too,
        # BESIDE_FLUSH_TILES, else draft by draft.)
        flush_tiles = tiles and BESIDE_FLUSH_TILES
        bconfig = beside_config(call.requests, call.tokens, flush_tiles)
        bcall = dataclasses.replace(call, config=bconfig, pdl=False)
        bcols = _cols_a_pass(bcall, flush_tiles)
        beside_flags = {  # draft by draft, or beside the tiles' main kernel tiles in passes (_tiles_cols' FIRST)
            **flags,
            "ROLE": 7,
            "WEIGHTS": False,  # (the Grams' kernel's weights are the main kernel's: a flush program weighs its own)
            "B16": call.B_cache.dtype == torch.bfloat16,
            "TILES": bcols > 0,
            "CHUNK": 0 if bcols else rows_chunk,
            "COLS": bcols,
            "COLS_AHEAD": TILES_COLS_AHEAD,
            "COLS_IN_AHEAD": TILES_COLS_INPUTS_AHEAD,
        }
        beside_args = {**arguments, "p_gram": None, "stride_gram_b": 0, "stride_gram_g": 0}
        beside = bcall.launch(
            _selective_state_replay_fast_kernel if bcols else _ring_lanes_kernel, beside_args, beside_flags
        )
        if rows_path and call.config.max_registers is None:
            call = dataclasses.replace(
                call, config=dataclasses.replace(call.config, max_registers=BESIDE_MAIN_REGISTERS)
            )
        flags["ROLE"] = 5
        main = call.launch(kernel, arguments, flags)
        return main._replace(before=gram_launch, beside=beside)
    if _split_flush(call, rows_path):
        flags["ROLE"] = 1
        fconfig = flush_config(*state.shape[-2:])
        # after the main kernel, whose reads of h0 are the one thing the flushes' stores wait for
        pdl = (call.pdl or chain_pdl) and (call.tokens > 1 or SPLIT_DECODE_PDL)
        flush_call = dataclasses.replace(call, config=fconfig, pdl=pdl)
        flush_flags = {
            **flags,
            "WEIGHTS": False,
            "ROLE": 2,
            "DUAL_FLUSH": _flush_form(dual_flush(fconfig, state.shape[-1]), call, fconfig, tiles),
            "TILES": False,
        }
        flush_args = {**arguments, "p_gram": None, "stride_gram_b": 0, "stride_gram_g": 0}
        listed = call.tokens == 1 or VERIFY_FLUSH_LIST
        if listed:  # _decode_flushes: a program a share of the flushing requests
            shares, flush_flags["LIST_BLOCK"] = _flush_list(call.requests, FLUSH_SHARE, LIST_BLOCK)
        flush_launch = flush_call.launch(kernel, flush_args, flush_flags)
        if listed:
            flush_launch = _flush_grid(flush_launch, fconfig, state, shares)
    main = call.launch(kernel, arguments, flags)
    return main._replace(before=gram_launch, after=flush_launch)


def _flush_grid(launch: Launch, config: LaunchConfig, state: torch.Tensor, shares: int) -> Launch:
    """launch, a kernel of decode's flush programs alone (ROLE 2 or 6), on its grid (P blocks,
    H, J = shares), whatever config's grid order."""
    return launch._replace(grid=(triton.cdiv(state.shape[-2], config.block_m), state.shape[1], shares))


def _flush_list(requests: int, share: int, per_pass: int) -> tuple[int, int]:
    """(J, LIST_BLOCK) of decode's flush programs (_decode_flushes): J = requests / share
    programs a (rows, head), within CUDA's grid, and the requests a pass over the flush list
    (per_pass at most; all of them under the interpreter, which takes no runtime loop bound)."""
    shares = max(1, min(FLUSH_PROGRAMS_MAX, triton.cdiv(requests, share)))
    list_block = triton.next_power_of_2(requests)
    return shares, list_block if _INTERPRETED else min(per_pass, list_block)


# The draft-by-draft verify step addresses its state tile in chunks of this many columns
# (_chunked_tile): Triton's layout of the plain [BLOCK_M, BLOCK_N] tile lays a warp over 128
# columns of one row, so each of the T row sums h0 . C_t was five rounds of shuffles a row;
# chunked, three over 8 lanes. With _ring_lanes_kernel it took T = 4 bs 512 from 179.2 to 151.2
# us and T = 2 from 108.1 to 93.9 (run 111, benchmarks/results/NVIDIA_H200/fast-chunk-sweep/);
# at T = 1 and with the tiles it measured slower or the same, so they keep the plain tile.
CHUNK = 32


# The flushes' state stores in a kernel of their own (ROLE 2, after the main kernel, which then
# computes every request's out in the dual form and stores no state: ROLE 1) for the
# draft-by-draft verify step from SPLIT_FROM_TOKENS drafts and SPLIT_MIN_REQUESTS requests on:
# the main kernel then carries no flush branch (its registers and instructions), and the
# flushes run at flush_config's, whose tiles take the dual form's matmul. On the H200 (runs
# 108 and 111, fast-split-sweep/ and fast-chunk-sweep/) it took T = 4 bs 512 from 151.2 to
# 133.6 us with the flush kernel at (32,4), and made T = 1 and T = 2 slower (the second
# launch and its programs' cursor loads cost more than the main kernel's occupancy gains;
# T = 1 has its own flush kernel since, _decode_flushes: SPLIT_DECODE below). Since run 244 the
# flush programs beside (VERIFY_FLUSH_BESIDE, below) take every call this would; it runs where
# they are off.
SPLIT_FLUSH = True
SPLIT_FROM_TOKENS = 4
SPLIT_MIN_REQUESTS = 16
FLUSH_CONFIG: LaunchConfig | None = None  # None: flush_config's choice
# VERIFY_FLUSH_LIST: the verify step's flush kernel takes the flushing requests from the list
# decode's does (_decode_flushes: batch / FLUSH_SHARE programs a (rows, head), each taking its
# share one request after the other) instead of a program a (request, rows, head), most of
# which exit after their cursors. On the H200 (runs 137-140, T = 4, headline, window 16,
# benchmarks/results/NVIDIA_H200/fast-verify-flush/) it took the step in which no request
# flushes from 101.6 to 87.7 us at bs 512 (share 8; flashinfer's 87.5), but lost where many
# do (every slot flushing: 270.8 against 252.2 us; a list program's flushes wait on each
# other) and gained nothing in the steady state (132.6 against 131.6 us): off.
VERIFY_FLUSH_LIST = False


# From BESIDE_FROM_TOKENS drafts and BESIDE_MIN_REQUESTS requests on (VERIFY_FLUSH_BESIDE), the
# draft-by-draft verify step gives its flushing requests whole to flush programs (ROLE 7) on a
# stream of their own beside the Grams and the main kernel (ROLE 5, the other requests): a flush
# program flushes first, on the state tile it holds, the ring absorbed as one matmul onto the
# tile (_absorb_mma: x_j w_j split in three bf16 parts against the ring's bf16 B rows, every
# product exact), stores it, and computes out from it with nothing cached; so h0 is read once,
# and neither kernel carries the other's registers. Configs: beside_config's for the flush
# programs, the main kernel's capped at BESIDE_MAIN_REGISTERS (its uncapped allocation, 154,
# follows from the early return before the state's load). On an H100 (runs 173-180,
# benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside/, headline, window 16, steady
# cursors) it took T = 4 at bs 512 from the split's 156.6-160.1 us to 140.4 with (64,4) flush
# programs and 143.0-146.6 with (16,1) (flashinfer's best 130.5-134.1 in the same runs); bs 128
# from 46.5-47.7 to 39.9-41.3 and bs 64 from 26.5-27.0 to 21.9-23.2 with (16,1) (flashinfer
# 38.6-39.7 and 23.4-23.9); every slot flushing 274.8 against 313.4; where none flushes it costs
# 3 us at (16,1) (125.9 against 122.7: the grid of flush programs that find nothing) and gains
# at (64,4) (112.3). Not yet timed on the H200. Tried and lost in the same runs: the flush
# after the main kernel instead of beside it (165-168), the one-kernel flush first with the
# matmul (154.7, its registers every program's), flush programs taking their requests from a
# list (150.9-198.5), the main kernel's state loads issued before its flushing requests leave
# (160.9: their checkpoints read twice). It supersedes the flushes in the main kernel of runs
# 160-172 (VERIFY_FLUSH_CHUNK, VERIFY_FLUSH_FIRST; taken out after 317935b, which holds them):
# at best 158.2 and 163.6 us at bs 512 on that H100. From 2 drafts since run 187 (below).
#
# At 2 and 3 drafts (until run 187 the flush stayed in the main kernel there) and with (64,4)
# flush programs from 128 requests on at any T, on the same H100 kind (runs 186-187, sweep36,
# benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside/): T = 2 at bs 64, 128, 256, 512
# took 18.6, 31.0, 60.8, 115.8 us against 21.8-22.6, 34.0-34.3, 64.5-64.9, 117.3-117.6 (flashinfer's
# best 21.1, 34.7, 65.5, 121.7); T = 3 at bs 64, 128, 512 20.5, 33.4, 127.5 against 25.8-25.9,
# 40.7-40.9, 146.8-148.3; T = 4 at bs 128 and 256 with (64,4) 38.3 and 71.3 against (16,1)'s
# 40.0-40.2 and 73.0-73.1; at bs 64 (16,1) stays ahead at T = 4 (22.1-22.2 against 23.1) and T = 8
# (32.5-33.4 against 33.5).
#
# From 16 requests on in the draft-by-draft step (BESIDE_MIN_REQUESTS; 64 until run 244), from
# 64 in the tiles' (BESIDE_TILES_MIN_REQUESTS). On an H100 (runs 243-245, headline, window 16,
# steady cursors, benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-beside-small/) the flush
# programs beside took T = 2 at bs 16 and 32 from 11.64-11.97 and 14.92-14.97 us (the flushes
# in the main kernel) to 7.45 and 10.42, T = 3 from 9.22-9.56 and 14.18-14.30 (the main kernel's
# own) to 8.64 and 13.19, T = 4 from 10.82-10.87 and 16.90-16.99 (the split) to 9.64 and 13.95
# (flashinfer's best 8.85, 14.41; 9.48, 15.10); T = 3 with the split instead 9.58 and 14.25. They
# lose below: at bs 8 (the tiles' step, one kernel) 6.93, 8.17 and 8.82 against 5.83-5.86,
# 6.98-7.06 and 7.25-7.31 at T = 2, 3, 4; and beside the tiles at T = 8 at bs 16 and 32 (17.33
# and 21.92 against 12.09-12.23 and 20.57-20.58). At bs 8 with flush programs of 16 rows (run
# 279, benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-small-beside/) the step in which every
# slot flushes gains (T = 4: 7.54 us against 8.67-8.71, flashinfer's best 7.62) but the steady
# one does not (7.36-7.37 against 7.19-7.26; T = 3 7.16 against 6.94-6.97, T = 8 9.05 against
# 7.89-7.92): the second kernel costs 0.3 us where none flushes.
VERIFY_FLUSH_BESIDE = True
BESIDE_FROM_TOKENS = 2
BESIDE_MIN_REQUESTS = 16
BESIDE_TILES_MIN_REQUESTS = 64
BESIDE_MAIN_REGISTERS = 128
BESIDE_CONFIG: LaunchConfig | None = None  # None: beside_config's rule


# The decode step (T = 1) splits its flushes off from SPLIT_DECODE_MIN_REQUESTS requests on:
# the main kernel (ROLE 1) computes every out in the dual form, and _decode_flushes, launched
# programmatic-dependent after it (SPLIT_DECODE_PDL; it waits just before its stores), shares
# the flushing requests out over batch / FLUSH_SHARE programs a (rows, head), the requests in
# blocks of LIST_BLOCK (FLUSH_SHARE 16 until run 123 measured 32 faster at bs 1024: 165.4 against
# 168.8 us, the same at bs 512). On the H200 (runs 116-117, benchmarks/results/NVIDIA_H200/fast-decode-split/,
# headline, window 16) it took the steady step at bs 512 from 88.9 to 84.0 us and at bs 1024
# from 180.5 to 171.4, and every slot flushing at bs 512 from 282.9 to 235.7; at bs 64 and 128
# it gained nothing (17.1 against 17.6, 25.9 against 26.0) and lost where no slot flushes (13.7
# against 12.5 at bs 64) or all do (67.2 against 43.5 at bs 64, its programs' shares 16
# requests long). The flush kernel launched after the Grams and before the main kernel instead
# (a flushing request's out from the flushed checkpoint, read after the wait) was no faster
# (run 120: 84.2 against 83.1 us at bs 512; the main kernel cannot launch before every flush
# program has started, and waits for them all) and was taken out after its run.
SPLIT_DECODE = True
SPLIT_DECODE_MIN_REQUESTS = 512
SPLIT_DECODE_PDL = True
FLUSH_SHARE = 32
FLUSH_PROGRAMS_MAX = 65535  # the grid's third dimension: CUDA's limit for grid.z
LIST_BLOCK = 1024

# Below that, from FLUSH_PROGRAMS_MIN_REQUESTS requests on (a slot-major config), the decode
# step's flushing requests are taken by flush programs that come first in the main kernel's
# grid (ROLE 4: J = batch / PROGRAMS_SHARE of them a (rows, head), each taking all of its share's
# steps, _decode_flush with OUT; the main kernel's programs of those requests exit at once): the
# flushes then run beside the other requests' programs, from the start, with no second launch
# and no wait between kernels. The flush programs' list passes a request a thread
# (PROGRAMS_LIST_BLOCK 0), their flushes in the dual form (PROGRAMS_DUAL), the kernel's registers
# capped at PROGRAMS_MAX_REGISTERS from PROGRAMS_CAP_FROM requests on. On the H200 (run 122,
# benchmarks/results/NVIDIA_H200/fast-decode-programs/) the steady step took 15.3 us at bs 64
# (one kernel 17.6, vLLM's 17.5) and 23.8 at bs 128 (capped; 26.2, 27.5); at bs 8 it lost (5.6
# against 5.0) and at bs 512 too (91.8 capped against the split's 86.0: the flush programs'
# registers are every program's).
FLUSH_PROGRAMS = True
FLUSH_PROGRAMS_MIN_REQUESTS = 64
PROGRAMS_SHARE = 16
PROGRAMS_DUAL = True
PROGRAMS_LIST_BLOCK = 0
PROGRAMS_CAP_FROM = 128
PROGRAMS_MAX_REGISTERS = 168
# Pipelined (_decode_flushes_ahead), the flush programs in the main grid lost where every slot
# flushes at bs 128 (218.5 us against 120.5, run 133, fast-decode-ahead/): off.
PROGRAMS_AHEAD = False
# A flush program in the main grid takes at most PROGRAMS_TAKE flushing requests (0: all of its
# share); those ranked past the J programs' J * PROGRAMS_TAKE flush in their own programs of the
# grid (_own_flush), each counting its rank in one pass over up to RANK_BLOCK_MAX requests
# (_flush_rank), so that a step in which many requests flush does not run 16 of them one after
# the other in each flush program. On an H100 (runs 259-271, benchmarks/results/
# NVIDIA_H100_80GB_HBM3/fast-decode-take/, headline, window 16, vLLM's output-only kernel in the
# same process) TAKE 4 took the step in which every slot flushes from 68.2-70.6 us to 34.6-35.0
# at bs 64 (vLLM's 31.4) and from 89.5-91.5 to 62.5-64.3 at bs 127 (56.1). Inlined, the own
# flush cost the model's step (`ssmdecode e2e --replay`, bs 64) 2.8 us a layer even where no
# program took it (runs 265-269); called, with the pool's alignment restated (_aligned16), the
# model's four layers took 69.06-69.45 us a step against 68.52-68.86 and the bench's steady and
# none-flushing steps stayed within 0.3 us at bs 64, 96 and 127 (run 271).
PROGRAMS_TAKE = 4
RANK_BLOCK_MAX = 1024


def _aligned16(call: ReplayCall) -> bool:
    """Whether the state and the rings start on 16 bytes, with their outer strides multiples of
    16 elements and their innermost unit: what _own_flush may restate to its callee (ALIGNED)."""
    state, xc, Bc, dtc = call.state, call.x_cache, call.B_cache, call.dt_cache
    return (
        all(t.data_ptr() % 16 == 0 for t in (state, xc, Bc))
        and all(v % 16 == 0 for v in (*state.stride()[:3], *xc.stride()[:3], *Bc.stride()[:3]))
        and state.stride(3) == 1
        and xc.stride(3) == 1
        and Bc.stride(3) == 1
        and dtc.stride(2) == 1
    )


# From SIDE_DECODE_MIN_REQUESTS requests on (SIDE_DECODE), the decode step's flushing requests
# go to flush programs alone (ROLE 6, each taking all of a flushing request's step, as ROLE 4's):
# SIDE_PROGRAMS a (rows, head) on a stream of their own beside the Grams and the main kernel
# (ROLE 5: the requests that do not flush) for the first ceil(batch / SIDE_CAP_SHARE) flushing
# requests (none with SIDE_PROGRAMS 0), and SIDE_AFTER_PROGRAMS a (rows, head) (0: batch /
# FLUSH_SHARE) in a kernel after the main kernel for the rest, their requests pipelined
# (AFTER_AHEAD; SIDE_AHEAD for those beside). A flush program of (32,4) holds a quarter of an
# SM's registers for the step: more programs beside slow the main kernel, fewer take one after
# the other the flushes of a step in which many flush. On the H200 (benchmarks/results/
# NVIDIA_H200/fast-decode-beside/), 4 beside and 8 after unpipelined (run 131) took the steady
# step to 78.8 us at bs 512 and 157.1 at 1024 (the split 81.3 and 164.4, vLLM's 88.3 and 174.3)
# but a step in which every slot flushes to 314.7 and 639.6 (the split 238.6 and 465.7);
# pipelined after (run 134): steady 79.4 and 157.4 (the split 83.0 and 164.1, vLLM's 87.8 and
# 173.7), every slot flushing 247.9 and 494.4 (237.9, 466.8), none 68.4 and 138.7 (66.5,
# 138.0); at bs 128 steady 23.9 (the flush programs in the main grid 23.8), every slot
# flushing 65.0 (120.5). Pipelined beside too, the steady step lost the gain (83.7 at bs 512,
# run 133): the pipeline's registers are taken from the main kernel's SMs. With PROGRAMS_TAKE
# the flush programs in the main grid no longer lose where every slot flushes, and on an H100
# (runs 274-277, benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-decode-reach/) they beat the
# route beside in the model (`ssmdecode e2e --replay`, step us: 572.9-573.9 against
# 588.2-589.0 at bs 128, 771.4-773.4 against 790.7-790.8 at 256, 985.4 against 998.0 at 384,
# 1182.2-1183.1 against 1183.2-1184.5 at 512) and in the bench's step where every slot flushes
# (59.4 us against 67.4-68.4 at bs 128, 112.8 against 130.2-130.3 at 256); the bench's steady
# step: 28.4 against 29.1-29.2 at bs 128, the same at 224, 56.4 against 55.0 at 256. At 320
# to 448 requests (runs 280-281) the bench's steady step favours the route beside more (88.2-88.5
# us against 95.7 at bs 448, vLLM's 93.0) while the model still does not (1127.5-1128.6 us a step
# against 1135.5-1135.7 at bs 448). So the route beside starts at 512, where the model is the
# same either way.
SIDE_DECODE = True
SIDE_DECODE_MIN_REQUESTS = 512
SIDE_PROGRAMS = 4
SIDE_CAP_SHARE = 8
SIDE_AFTER_PROGRAMS = 8  # 0: batch / FLUSH_SHARE
SIDE_CONFIG: LaunchConfig | None = None  # None: flush_config's
SIDE_AHEAD = False  # the programs beside: each one's requests pipelined (_decode_flushes_ahead)
AFTER_AHEAD = True  # the programs after the main kernel likewise


def _side_flush(call: ReplayCall) -> bool:
    """Whether the decode step's flushing requests go to flush programs beside the main kernel
    (ROLE 6 and 5)."""
    return SIDE_DECODE and call.tokens == 1 and not call.flush and call.requests >= SIDE_DECODE_MIN_REQUESTS


def _flush_programs(call: ReplayCall) -> bool:
    """Whether the decode step's flushing requests go to flush programs first in the main
    kernel's grid (ROLE 4)."""
    return (
        FLUSH_PROGRAMS
        and call.tokens == 1
        and not call.flush
        and call.config.slot_major
        and call.requests >= FLUSH_PROGRAMS_MIN_REQUESTS
        and not _split_flush(call, False)
        and not _side_flush(call)
    )


def _split_flush(call: ReplayCall, rows_path: bool) -> bool:
    """Whether the call's flushes go to a kernel of their own; rows_path: the call is the
    draft-by-draft verify step (fast_launch's choice, T >= 2 without the tiles)."""
    if call.flush:
        return False
    if call.tokens == 1:
        return SPLIT_DECODE and call.requests >= SPLIT_DECODE_MIN_REQUESTS and not _side_flush(call)
    return (
        SPLIT_FLUSH and rows_path and call.tokens >= SPLIT_FROM_TOKENS and call.requests >= SPLIT_MIN_REQUESTS
    )


# The tiles' verify step (from TILES_FROM_TOKENS drafts) gives its flushing requests to flush
# programs beside its main kernel (BESIDE_TILES; the main kernel the tiles' ROLE 5), as the
# draft-by-draft step does: its main kernel then carries no flush. Offline (sm_90, T = 8, bs
# 512, uncapped) that takes the main kernel from 255 registers and 8 bytes of spills to 168 at
# (32,4), and from 254 to 168 at (64,4); at T = 8 about 45% of the slots flush in the steady
# state. With the flush programs draft by draft it lost
# (run 192: 224.5 us at bs 512 against 226.0-226.2; draft by draft with the flush programs
# beside lost to the tiles at T = 8 too, run 190).
#
# With the tiles' passes over the state tile's columns (TILES_COLS) and flush programs that are
# tiles too (BESIDE_FLUSH_TILES: each reads its tile in passes, flushing each first and taking
# h1 C^T from it, _tiles_cols' FIRST; at (64,4) at every batch), it won on an H100 (runs
# 201-202, benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-tiles-cols/, T = 8, headline, window
# 16, steady cursors): bs 64, 128 and 512 27.8, 50.4 and 189.4 us against the tiles' own
# flushes' 29.1-29.8, 52.9-53.0 and 201.2 (flashinfer's best 27.7, 47.9, 167.9); every slot
# flushing at bs 512 263.2 against 278.7. (16,1) flush programs lost at bs 64 (32.3). Flush
# programs as tiles beside the draft-by-draft step (T = 2, 3, 4) lost at every batch measured
# (run 201: T = 4 at bs 512 142.9 against 141.0-141.4): there they stay draft by draft.
BESIDE_TILES = True
BESIDE_FLUSH_TILES = True


def _flush_beside(call: ReplayCall, rows_path: bool) -> bool:
    """Whether the draft-by-draft verify step's flushing requests take their whole steps in
    flush programs beside the main kernel (VERIFY_FLUSH_BESIDE; the tiles' step too with
    BESIDE_TILES; not in replay_flush, where every request flushes). With WEIGHTS the Grams'
    kernel's weights are the main kernel's alone: the flush programs weigh their own, and the
    Grams' kernel leaves their requests' appends to them."""
    return (
        VERIFY_FLUSH_BESIDE
        and (rows_path or (BESIDE_TILES and call.tokens > 1))
        and not call.flush
        and call.tokens >= BESIDE_FROM_TOKENS
        and call.requests >= (BESIDE_MIN_REQUESTS if rows_path else BESIDE_TILES_MIN_REQUESTS)
    )


def beside_config(requests: int, tokens: int, tiles: bool = False) -> LaunchConfig:
    """The verify step's flush programs' config (BESIDE_CONFIG, else): 64 rows and 4 warps, but
    draft by draft (not tiles) 16 rows and one warp from 4 drafts below 128 requests, capped at
    128 registers (their flush's matmul spills a little: 168 uncapped at (16,1), slower on the
    H100)."""
    if BESIDE_CONFIG is not None:
        return BESIDE_CONFIG
    rows, warps = (16, 1) if tokens >= 4 and requests < 128 and not tiles else (64, 4)
    return LaunchConfig(rows, warps, True, True, max_registers=128)


def flush_config(headdim: int, dstate: int) -> LaunchConfig:
    """The flush kernel's config (FLUSH_CONFIG, else): a program a (request, head) up to 32
    rows, 16 at least (the flush kernel's programs of requests that do not flush exit after
    their cursors: few programs waste little), with the warps that keep the dual form's
    accumulator at DUAL_MAX_ELEMENTS registers a thread (up to 16 warps): (32,4) at the
    headline, which beat (64,8) and (16,2) on the H200 (run 108, fast-split-sweep/)."""
    if FLUSH_CONFIG is not None:
        return FLUSH_CONFIG
    rows = min(32, max(16, triton.next_power_of_2(headdim)))
    warps = min(16, max(1, rows * triton.next_power_of_2(dstate) // (32 * DUAL_MAX_ELEMENTS)))
    return LaunchConfig(rows, triton.next_power_of_2(warps), True, True)


def dual_flush(config: LaunchConfig, dstate: int, tiles: bool = False) -> bool:
    """Whether a flush of the fast route absorbs the ring in the dual form (one matmul a
    program, the checkpoint's bits then the fast route's own, within the bars of
    docs/numerics.md), not token by token with the exact kernel's operations (the exact route's
    bits): where DUAL_FLUSH is on, the matmul's tile has 16 rows or more (block_m >= 16) and its
    accumulator takes at most DUAL_MAX_ELEMENTS registers a thread (TILES_DUAL_MAX_ELEMENTS in
    a verify step whose out is tiles: tiles True)."""
    block_n = triton.next_power_of_2(dstate)
    per_thread = config.block_m * block_n // (32 * config.num_warps)
    most = TILES_DUAL_MAX_ELEMENTS if tiles else DUAL_MAX_ELEMENTS
    return DUAL_FLUSH and config.block_m >= 16 and per_thread <= most


# The verify step (T >= 2) computes out as tiles on the tensor cores (h0 C^T and the weighted
# sums as matmuls) from TILES_FROM_TOKENS drafts on, and from TILES_SMALL_FROM_TOKENS drafts
# for TILES_MAX_REQUESTS requests or fewer; else draft by draft (a row sum over the state tile
# a draft). On the H200 (headline, window 16, steady cursors: benchmarks/results/NVIDIA_H200/
# fast-verify-sweep/ and fast-verify-small/) the row sums led at T = 2 and 4 from batch 64 on
# and at T = 2 at batch 1 and 8 (16 rows, 2 warps: 5.82 against the tiles' 7.00 us at bs 8),
# the tiles at T = 8 and at T = 4 at batch 1 and 8.
# The draft-by-draft verify step with the Grams (C . B theirs): the drafts' B is the append's
# alone, loaded by the one program a group that appends it (_append_drafts' p_Bl) instead of by
# every program, which held it from its start to its append. On an H100 (runs 209-210,
# benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-load-placements/, headline, window 16, steady
# cursors) T = 4 took 21.87, 36.81 and 135.13 us at bs 64, 128 and 512 against 22.16-22.22,
# 37.19-37.30 and 135.43-135.49, the same bits; at T = 2 level at bs 8 and 64 and slower at bs
# 512 (117.83 against 117.41-117.53), in the tiles (T = 8) slower (180.34 against 178.04-178.17
# at bs 512): from DRAFTS_B_LATE_FROM_TOKENS drafts, draft by draft only.
DRAFTS_B_LATE = True
DRAFTS_B_LATE_FROM_TOKENS = 3

# Each draft's loads (C_t, its Grams, x_t, z_t) issued before the first draft's out in the
# draft-by-draft step (_drafts_out's AHEAD): else each waits on its own round trip after the
# draft before it was stored. On an H100 (run 206, benchmarks/results/NVIDIA_H100_80GB_HBM3/
# fast-drafts-ahead/, headline, window 16, steady cursors) T = 4 took 135.4 us at bs 512
# against 139.7-139.9, the same bits.
DRAFTS_AHEAD = True

TILES_FROM_TOKENS = 8
TILES_SMALL_FROM_TOKENS = 3
TILES_MAX_REQUESTS = 8


# From TILES_COLS_MIN_REQUESTS requests on, the tiles' verify step reads its state tile
# TILES_COLS columns a pass (0: the whole tile at once), h0 C^T and a flush's new checkpoint
# accumulated and stored pass by pass (_tiles_cols), the first pass loaded at the program's
# start and each pass loading the next one's columns before its matmuls (TILES_COLS_AHEAD): a
# pass's registers instead of the whole tile's (sm_90, T = 8, bs 512, (64,4): 128 registers,
# 4 programs an SM, against 254 and 2), and the flush's matmul a pass's. Rounding to nearest
# only (a stochastic store's random bits are keyed by whole rows): a seeded call reads the
# whole tile. On an H100 (run 197, T = 8, headline, window 16, steady cursors;
# benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-tiles-cols/) it took bs 64, 128 and 512 from
# 33.5-33.9, 61.1 and 227.7-228.0 us to 30.0, 53.1 and 202.4 (flashinfer's best 27.6, 48.1,
# 168.7). Lost: 64 columns a pass (243.3 at bs 512) and 16 (96 registers; 237.9, run 196);
# the passes without AHEAD, Triton's pipelining of the loop instead (213.0, run 196); the
# passes at bs 8 (8.97 against 8.39-8.47) and at (32,4); the tiles at T = 4 even with the
# passes (175.2 against the draft-by-draft step's 141.5 at bs 512, run 196).
TILES_COLS = 32
TILES_COLS_AHEAD = True
# With TILES_COLS_AHEAD, the next pass's columns of C (and in a flush program beside, of the
# ring's B) loaded with its tile, not after this pass's stores (_tiles_cols' IN_AHEAD): T = 8
# took 178.0 us at bs 512 against 189.6-189.7 in the same run 206, the same bits.
TILES_COLS_INPUTS_AHEAD = True
# The whole-tile tiles kernel's flush in the main kernel (few requests, no Grams' kernel): the
# ring's B rows its out loaded for the Grams, not loaded again after out's store (a round trip
# behind it). On an H100 (run 210, fast-load-placements/) T = 4 at bs 8 took 7.81 us against
# 7.92-7.95, T = 3 7.56 against 7.59-7.65, the same bits.
TILES_FLUSH_B_REUSE = True
TILES_COLS_MIN_REQUESTS = 64
# The whole-tile tiles kernel's flush (TILES, no passes; _flush_form) absorbs the ring onto the decayed tile
# (_absorb_mma: x_j w_j [BLOCK_M, RP] split in three bf16 parts against the ring's bf16 B rows,
# the MMAs accumulating onto exp(A S) h0) instead of beside it (_dual_absorb: w_j B_j
# [RP, BLOCK_N] split in three against x, then added to the decayed tile): a quarter of the
# split's elements at (32,2), RP 16, and no float32 copy of the ring's B; the ring's x and B
# rows are the ones out loaded. Offline (sm_90, (32,2), bs 8) the T = 4 kernel falls from 2456
# SASS instructions to 2232, 255 registers either way (T = 8: an 8-byte stack). On an H100 (run
# 282, benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-on-tile/, headline, window 16, bs 8)
# the steady step took T = 4 from 7.28-7.32 us to 7.05-7.06, T = 3 from 7.02-7.05 to 6.78-6.81,
# T = 8 from 7.97-7.99 to 7.54-7.56 (every slot flushing 0.3-0.45 us less; none flushing 5.60
# against 5.57; bs 1 level). Flushed states 2.2-2.7e-7 of max |state| against 0.8-1.6e-7 (the
# tensor cores' float32 accumulation now adds onto h0; the flush programs beside, ROLE 7, have
# always used this form). Run 255's try of this order (fast-flush-cost/, TFIRST=4: 7.86 us)
# loaded the ring's x and B again after out and spilled.
TILES_FLUSH_ON_TILE = True


def _cols_a_pass(call: ReplayCall, tiles: bool) -> int:
    """The COLS of the tiles' passes over the state tile's columns (0: the whole tile)."""
    dstate = call.state.shape[-1]
    if not (
        tiles
        and TILES_COLS
        and call.requests >= TILES_COLS_MIN_REQUESTS
        and call.rand_seed is None
        and dual_flush(call.config, dstate, True)
    ):
        return 0
    return min(max(16, TILES_COLS), triton.next_power_of_2(dstate))


def _tiles(call: ReplayCall) -> bool:
    """Whether the verify step's out is computed as tiles (a matmul's 16 rows at least)."""
    if call.tokens == 1 or call.config.block_m < 16:
        return False
    small = call.requests <= TILES_MAX_REQUESTS and call.tokens >= TILES_SMALL_FROM_TOKENS
    return call.tokens >= TILES_FROM_TOKENS or small


# A flush absorbs the ring in the dual form (dual_flush) when this is True, where its
# accumulator takes at most DUAL_MAX_ELEMENTS registers a thread, TILES_DUAL_MAX_ELEMENTS in the
# tiles' verify step: the tiles' kernel carries matmuls anyway, and there the flush at 64 rows
# and 4 warps (64 a thread) in the dual form beat token by token (T = 8 steady, window 16:
# 206.2 against 260.0 us at bs 512, 32.4 against 39.2 at bs 64; every slot flushing 288.7
# against 381.3 at bs 512) and a flush kernel of its own after the main kernel (229.4 and 34.9)
# on the H200 (run 151, benchmarks/results/NVIDIA_H200/fast-verify-inline/). In the draft by
# draft step (16 rows, one warp) the dual form inline lost (T = 4 steady at bs 512: 164.7
# against the split's 130.7; with float32 FMAs instead of the tensor cores 253.0).
DUAL_FLUSH = True
DUAL_MAX_ELEMENTS = 32
TILES_DUAL_MAX_ELEMENTS = 64

# The decode step's (T = 1) flushes in the dual form onto the decayed tile (_absorb_mma, as the
# tiles' TILES_FLUSH_ON_TILE; the kernels' DUAL_FLUSH 2) where this is 1; where it is 2, also
# where only the accumulator beside the tile ruled the dual form out (dual_flush: (16,1), 64
# elements a thread), since onto the tile there is none: the flush programs of ROLE 4, the
# flushes beside and after (ROLE 6), the split's and the main kernel's own. Offline (sm_90,
# headline, window 15) the main kernel at bs 32, (16,1), goes from the token-by-token flush's
# 1576 SASS instructions and 165 registers to 1848 and 186; at bs 64 (with ROLE 4's flush
# programs) from 4960 and 255 to 3816 and 213; at bs 8, (16,4), from 1360 and 96 to 1224 and
# 122. On an H100 (runs 288-289, benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-decode-on-tile/,
# headline, window 16, vLLM's output-only kernel in the same process) the steady step took bs 8
# from 5.14 us to 4.94 and bs 32 from 13.00-13.04 to 11.53 (vLLM's 13.61), level at 64, 128 and
# 512 (104.82 against 104.22-104.47); the step in which every slot flushes bs 32 from
# 29.73-29.89 to 19.90 (vLLM's 19.83), bs 64 from 34.65-34.95 to 32.74, bs 128 from 58.98-59.08
# to 57.50, bs 512 level. Flushed states 2.4-2.8e-7 of max |state| (token by token at bs 32:
# 3.2-4.4e-7).
DECODE_FLUSH_ON_TILE = 2
# The draft-by-draft verify step's (T >= 2, no tiles) flushes in the main kernel (ROLE 0, below
# BESIDE_MIN_REQUESTS requests) and in the split's flush kernel (ROLE 2) likewise, 1 or 2 as
# DECODE_FLUSH_ON_TILE. At 0 they flush token by token at (16,1) (the default config of T = 2 to
# 7 from 9 requests up to BESIDE_MIN_REQUESTS) and in the dual form beside the tile at (16,2)
# (T = 2 at 8 requests and below). The flush programs beside (ROLE 7) always absorb onto the tile.
# On an H100 (run 292, benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-drafts-on-tile/, headline,
# window 16, 2 against 0 between two runs of 0) the steady step took T = 4 at bs 12 from
# 10.97-11.00 us to 9.42 (every slot flushing 12.83-12.99 to 10.76), T = 2 at bs 8 from 5.88-5.90
# to 5.77 and at bs 12 from 6.82-6.89 to 6.66; T = 4 at bs 8 (the tiles kernel) level. Flushed
# states 2.7e-7 of max |state| at most (1.1-3.8e-7 before).
DRAFTS_FLUSH_ON_TILE = 2


def _flush_form(dual: bool, call: ReplayCall, config: LaunchConfig, tiles: bool = False) -> bool | int:
    """The DUAL_FLUSH flag of a launch of call at config: dual (whether its flush takes the dual
    form), or 2 (onto the tile, _flushed_state) where the step's knob takes the flush there:
    TILES_FLUSH_ON_TILE (the tiles' verify step), DECODE_FLUSH_ON_TILE (T = 1) or
    DRAFTS_FLUSH_ON_TILE (the draft-by-draft verify step)."""
    if tiles:
        form = TILES_FLUSH_ON_TILE
    else:
        form = DECODE_FLUSH_ON_TILE if call.tokens == 1 else DRAFTS_FLUSH_ON_TILE
    if not (form and DUAL_FLUSH):
        return dual
    if dual or (form >= 2 and config.block_m >= 16):
        return 2
    return dual


# The Grams' kernel lets the main kernel launch at once (programmatic dependent launch, on a
# GPU whose Triton has it) when this is True. With LATE_WAIT the main kernel's programs wait for
# it just before they read the Grams instead of right after their state loads, at T >= 2 and
# at T = 1 below LATE_WAIT_DECODE_BELOW requests. On the H200 (run 153, headline, window 16,
# steady cursors, benchmarks/results/NVIDIA_H200/fast-late-wait/) it took T = 4 from 25.05 to
# 24.02 us at bs 64 and from 41.11 to 40.24 at bs 128 (the same at bs 8 and 512), T = 1 from
# 15.26 to 14.73 at bs 64, but made T = 1 slower from bs 128 on (81.5 against 79.5 us at bs
# 512, 165.9 against 158.1 at 1024; why was not located).
GRAM_PDL = True
LATE_WAIT = True
LATE_WAIT_DECODE_BELOW = 128


# The decode step (T = 1) precomputes the Grams C . B_j once a (request, group) from this many
# requests on: on the H200 the second launch cost more than it saved at batch 8 and less at 64,
# 512 and 1024 (benchmarks/results/NVIDIA_H200/fast-decode-sweep/).
GRAM_MIN_REQUESTS = 16


# The verify step (T >= 2) precomputes its Grams too (_gram_kernel) when this is True.
GRAM_VERIFY = True


# With WEIGHTS the Grams' kernel also computes, WEIGHTS_HEADS heads at a time, the dual form's
# weights of each (request, head) from the Grams, the cursors and dt' (its _weights), and appends
# the drafts' dt' and B, in the draft-by-draft verify step and in decode: the main kernel's
# programs, four a head at the headline, then read T (RP + TP + 1) floats (RP + 3 at T = 1)
# instead of each loading the ring's dt' and the drafts' dt and computing the same softplus,
# cumulative sums and exps. Offline (sm_90, headline, bs 512, (16,1):
# benchmarks/compile_info.py) the draft-by-draft T = 4 main kernel falls from 1416 SASS
# instructions and 128 registers to about 1100 and 118, decode's from 952 to 744 (but 80 to 96
# registers). Timed on an H100 (run 156, benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-weights/):
# no gain in decode, 1-8% slower in the verify step, so off; not yet timed on the H200, whose
# stream is 1.4x faster for the same instructions (the T = 4 main kernel's issue floor, 46.6 us
# at bs 512, against the step's floor of 83.2: docs/performance.md, after step 37; offline, not
# a measured bound). Run 156 predates the verify step's flush programs beside the main kernel
# (_flush_beside), which WEIGHTS then turned off (the split's flush kernel instead); since
# session 42 it keeps them: the Grams' kernel leaves the flushing requests' appends to them
# (LEAVE_FLUSHING) and they weigh their own. Offline (sm_90,
# headline, the chained kernels) the T = 4 main kernel beside them falls from 1432 SASS
# instructions to 1104 (127 and 128 registers), T = 2's from 984 to 712; the Grams' kernel, a
# program a (request, group), grows from 272 to 912. Timed in that form on an H100 (run 303,
# benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-weights/run303_*): 1-3.5% slower at T = 2 and 4,
# bs 64 to 512, as run 156's form was; still not timed on the H200.
WEIGHTS = False
WEIGHTS_HEADS = 16


# Compile the chain (_chain_pdl) from CPU tensors too, as a GPU launches it: the offline
# compilers (benchmarks/compile_info.py, benchmarks/ptx_snapshot.py) set it, since the chained
# main kernel is not the unchained one (T = 1 bs 64 at (16,1): 255 registers against 194).
CHAIN_ON_CPU = False


def _chain_pdl(call: ReplayCall) -> bool:
    """Whether the kernels of the call after the first are launched programmatic-dependent on
    the one before: GRAM_PDL, on a GPU (or CHAIN_ON_CPU) whose Triton has grid dependency
    control."""
    on_gpu = call.state.device.type == "cuda" or CHAIN_ON_CPU
    return GRAM_PDL and on_gpu and gdc_wait is not None


def _gram_first(call: ReplayCall) -> bool:
    if call.flush or call.requests < GRAM_MIN_REQUESTS:
        return False
    return call.tokens == 1 or GRAM_VERIFY


def _gram_launch(
    call: ReplayCall,
    flags: dict[str, Any],
    cursor_by_request: bool,
    pdl: bool,
    weights: bool = False,
    host_flush: torch.Tensor | None = None,
    leave_flushing: bool = False,
) -> tuple[Launch, torch.Tensor]:
    """The Grams' launch (_gram_kernel) and the float32 [B, G, RP + 1] (T = 1) or
    [B, G, T RP + T TP] they go into; with weights, the float32 [B, H, RP + 3] (T = 1) or
    [B, H, T (RP + TP + 1)] of the dual form's weights (the kernel's WEIGHTS; leave_flushing:
    a flushing request's appends are its flush programs')."""
    requests, groups, heads = call.requests, call.B.shape[-2], call.state.shape[1]
    rp, tp, tokens = flags["RP"], flags["TP"], call.tokens
    if weights:
        rows, width = heads, (rp + 3 if tokens == 1 else tokens * (rp + tp + 1))
    else:
        rows, width = groups, (rp + 1 if tokens == 1 else tokens * (rp + tp))
    gram = torch.empty(requests, rows, width, dtype=torch.float32, device=call.state.device)
    args = call.arguments()
    names = set(inspect.signature(_gram_kernel.fn.fn).parameters)
    kwargs = {k: v for k, v in args.items() if k in names}
    B, C = call.B, call.C
    kwargs.update(
        p_gram=gram,
        stride_gram_b=gram.stride(0),
        stride_gram_g=gram.stride(1),
        T=tokens,
        TD=max(16, tp),
        TP=tp,
        MMA16=B.dtype == C.dtype and B.dtype in (torch.bfloat16, torch.float16),
        WINDOW=call.ring - tokens,
        RP=rp,
        CURSOR_BY_REQUEST=cursor_by_request,
        EVEN_N=call.state.shape[-1] == triton.next_power_of_2(call.state.shape[-1]),
        BLOCK_N=triton.next_power_of_2(call.state.shape[-1]),
        PDL=pdl,
        num_warps=4,
        p_flush=host_flush,
        WEIGHTS=weights,
    )
    if weights:
        kwargs.update(
            HEADS_PER_GROUP=heads // groups,
            HB=min(WEIGHTS_HEADS, triton.next_power_of_2(heads // groups)),
            DT_SOFTPLUS=call.dt_softplus,
            FAST_EXP=call.fast_exp,
            FLUSH_DRAFTS=flags["FLUSH_DRAFTS"],
            LEAVE_FLUSHING=leave_flushing,
        )
    return Launch(_gram_kernel, (requests, groups), (), kwargs), gram
