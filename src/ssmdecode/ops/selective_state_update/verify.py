r"""Multi-token decode: the verify step of speculative decoding (MTP, EAGLE, EAGLE trees).

A request brings T draft tokens. The kernel reads its state once, applies the tokens in order
in float32 registers (the recurrence of decode.py, token after token) and writes each token's
out; what else it writes is the engine's convention (Shapes: B requests, T tokens, H heads, P
head dim, N state dim, S pool slots, R buffer rows, T_c >= T buffer steps, K >= T columns):

    mode     written besides out                                  engine
    final    the last token's state, to dst[b] (default: the      sglang (disable_state_update
             slot read), unless disable_state_update              off), vLLM without spec
    buffer   every token's state t to buffer[row_b, t]            sglang's verify
             ([R, T_c, H, P, N], row_b = buffer_idx[b] or the
             slot read), and the final state as above
    dst      every token's state t to slot dst[b, t] ([>=B, K])   vLLM's speculative decoding

vLLM's initial state is read from state_batch_indices[b, max(num_accepted[b] - 1, 0)], the slot
of the last token the previous step accepted. sglang's EAGLE trees (parents [B, T]) continue
token t from the state of its parent token as the buffer holds it, instead of token t - 1's.
With cu_seqlens the tokens are packed (vLLM's layout): request b owns tokens cu_seqlens[b] ..
cu_seqlens[b + 1] - 1, any number from 0 (a request of none is left alone) up to T.

Bits: each token runs the single-token kernel's operations in the same order (common.py), so T
tokens in one call write the out of T single-token calls bit for bit, and the same final state
where the state is float32 (a 16-bit state is rounded once a call here, once a token there).

Speed: the token count is a compile-time constant (up to 16; longer requests loop), so every
token's loads (x, dt, B, C, z, the destination slots) are issued at the start of the program
instead of one token's latency after another's, as the upstream kernels' loop over T does; the
state tiles are addressed from packed rows as in decode.py, with evict-first hints on every
state access.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import triton
import triton.language as tl

from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update.checks import Call, ties_head_dim
from ssmdecode.ops.selective_state_update.common import (
    STREAM_BUFFER,
    STREAM_STATE,
    both,
    cols,
    exp_dA,
    gated_out,
    live_mask,
    load,
    load_index,
    load_state,
    row_sums,
    rows,
    slot_index,
    softplus,
    start_program,
    state_step,
    store_state,
    stored,
    tile_addressing,
    tile_mask,
    tile_offsets,
    token_span,
    unless,
    wait_prior,
)
from ssmdecode.ops.selective_state_update.launch import (
    HEURISTICS,
    Launch,
    Variant,
    check_ordered_sum,
    given,
    named_strides,
    strides,
    tile_launch,
    update_arguments,
)

__all__ = ["prepare_multi_token"]

_HEURISTICS = {
    **HEURISTICS,
    **given(
        HAS_DST_IDX="p_dst_idx",
        HAS_ACCEPTED="p_accepted",
        VARLEN="p_cu_seqlens",
        HAS_BUFFER="p_buf",
        HAS_BUFFER_IDX="p_buf_idx",
        HAS_PARENTS="p_parent",
    ),
}


class _Request(NamedTuple):
    """What a program of the multi-token kernel knows of its request: its row i_b, head i_h and
    group i_g; its tokens x[i_xb, t0 + t] for t < n_tok; its buffer row i_buf."""

    i_b: Any
    i_h: Any
    i_g: Any
    i_xb: Any
    t0: Any
    n_tok: Any
    i_buf: Any


class _Pointers(NamedTuple):
    """The tensors a token reads or writes."""

    x: Any
    dt: Any
    B: Any
    C: Any
    z: Any
    out: Any
    dst_idx: Any
    parent: Any
    state: Any
    buf: Any


class _Strides(NamedTuple):
    """Their strides, <tensor>_<dim>: x, dt, B, C, z, out over (b, t, h or g, p or n); the pool's
    over slots; the per-token slots' (b, k), the buffer's over steps, the parents' (b, t). (Flat:
    Triton 3.6 loses a constexpr of a tuple nested in a tuple passed into a while loop.)"""

    x_b: Any
    x_t: Any
    x_h: Any
    x_p: Any
    dt_b: Any
    dt_t: Any
    dt_h: Any
    dt_p: Any
    B_b: Any
    B_t: Any
    B_g: Any
    B_n: Any
    C_b: Any
    C_t: Any
    C_g: Any
    C_n: Any
    z_b: Any
    z_t: Any
    z_h: Any
    z_p: Any
    out_b: Any
    out_t: Any
    out_h: Any
    out_p: Any
    state_s: Any
    dst_b: Any
    dst_k: Any
    buf_t: Any
    parent_b: Any
    parent_t: Any


class _Tile(NamedTuple):
    """The program's tile: its rows and columns, its offsets in a pool slot and in a buffer
    step (common.tile_addressing), and its masks (None: nothing masked): the vectors over
    rows and columns, the tile read, the buffer row's, the live request (None without
    indices)."""

    o_m: Any
    o_n: Any
    o_base: Any
    o_tile: Any
    o_buf_base: Any
    o_buf_tile: Any
    m_vm: Any
    m_vn: Any
    m_read: Any
    m_buf: Any
    m_live: Any


class _Shared(NamedTuple):
    """What every token of the request shares: A, dt_bias, D (float32, each 0.0 where absent),
    the pad slot, the rounding's seed and the offsets of the tile's rows (without the slot) in
    the pool and in the buffer, which key its random bits."""

    b_A: Any
    b_dt_bias: Any
    b_D: Any
    pad_slot_id: Any
    seed: Any
    o_rand_state: Any
    o_rand_buf: Any


class _Flags(NamedTuple):
    """The kernel's constexprs a token reads (the kernel's signature says what each means)."""

    T: Any
    DT_SOFTPLUS: Any
    TIE_HDIM: Any
    HAS_DT_BIAS: Any
    HAS_D: Any
    HAS_Z: Any
    HAS_SRC_IDX: Any
    DST_PER_TOKEN: Any
    HAS_BUFFER: Any
    HAS_PARENTS: Any
    FAST_EXP: Any
    STOCHASTIC: Any
    STOCHASTIC_BUFFER: Any
    PHILOX_ROUNDS: Any
    BLOCK_M: Any
    BLOCK_N: Any
    ORDERED_SUM: Any
    EVICT_FIRST: Any


@triton.jit
def _at(p, i_xb, tok, i_h, o, stride_b, stride_t, stride_h, stride_p):
    """The elements o of token tok's head (or group) i_h of request row i_xb of a [B, T, H, P]
    (or [B, T, G, N]) tensor at p."""
    return p + i_xb * stride_b + tok * stride_t + i_h * stride_h + o * stride_p


# fmt: off
@triton.jit
def _token(b_state, t, r, p, s, o, c, f, MASK_TOKENS: tl.constexpr, KEEP_FINAL: tl.constexpr):
    """Token t of the request r (_Request): continue from its parent's state (EAGLE trees),
    apply it, write its state where the mode says and its out. p, s, o, c, f: the kernel's
    _Pointers, _Strides, _Tile, _Shared, _Flags. MASK_TOKENS: tokens past the request's count
    (packed layout, unrolled) have their loads masked and nothing of theirs stored; KEEP_FINAL:
    where the final state is written, they leave the state as it was. Returns the state after
    token t."""
    m_t = None
    if MASK_TOKENS:
        m_t = t < r.n_tok
    m_tv = both(o.m_vm, m_t)
    m_tn = both(o.m_vn, m_t)
    tok = r.t0 + t
    if f.HAS_PARENTS:
        if t > 0:
            # The parent's state is read back from the buffer, as this program stored it: the
            # store's and the load's layouts may give an element to different threads (with a
            # 16-bit buffer, (8,1) stored 8 columns a thread and loaded 4, and read stale
            # values on the H200), so the program's stores are made visible to it first.
            tl.debug_barrier()
            i_par = tl.load(p.parent + r.i_b * s.parent_b + t * s.parent_t).to(tl.int64)
            if (i_par >= 0) & (i_par < f.T) & (r.i_buf != c.pad_slot_id):
                p_par = p.buf + (o.o_buf_base + i_par * s.buf_t) + o.o_buf_tile
                b_state = tl.load(p_par, mask=o.m_read).to(tl.float32)
    b_x = load(_at(p.x, r.i_xb, tok, r.i_h, o.o_m, s.x_b, s.x_t, s.x_h, s.x_p), m_tv).to(tl.float32)
    if f.TIE_HDIM:
        p_dt = p.dt + r.i_xb * s.dt_b + tok * s.dt_t + r.i_h * s.dt_h
        if MASK_TOKENS:
            b_dt = tl.load(p_dt, mask=m_t, other=0.0).to(tl.float32)
        else:
            b_dt = tl.load(p_dt).to(tl.float32)
        if f.HAS_DT_BIAS:
            b_dt += c.b_dt_bias
        if f.DT_SOFTPLUS:
            b_dt = softplus(b_dt)
        b_dA = exp_dA(c.b_A * b_dt, f.FAST_EXP)
    else:
        b_dt = load(_at(p.dt, r.i_xb, tok, r.i_h, o.o_m, s.dt_b, s.dt_t, s.dt_h, s.dt_p), m_tv).to(tl.float32)
        if f.HAS_DT_BIAS:
            b_dt += c.b_dt_bias
        if f.DT_SOFTPLUS:
            b_dt = softplus(b_dt)
        b_dA = exp_dA(c.b_A * rows(b_dt, f.ORDERED_SUM), f.FAST_EXP)
    b_B = load(_at(p.B, r.i_xb, tok, r.i_g, o.o_n, s.B_b, s.B_t, s.B_g, s.B_n), m_tn).to(tl.float32)
    b_C = load(_at(p.C, r.i_xb, tok, r.i_g, o.o_n, s.C_b, s.C_t, s.C_g, s.C_n), m_tn).to(tl.float32)
    b_z = b_x  # unread without z
    if f.HAS_Z:
        b_z = load(_at(p.z, r.i_xb, tok, r.i_h, o.o_m, s.z_b, s.z_t, s.z_h, s.z_p), m_tv).to(tl.float32)

    if f.TIE_HDIM:
        b_dB = b_B * b_dt
    else:
        b_dB = cols(b_B, f.ORDERED_SUM) * rows(b_dt, f.ORDERED_SUM)
    b_new = state_step(b_state, b_dA, b_dB, rows(b_x, f.ORDERED_SUM), f.ORDERED_SUM)
    if KEEP_FINAL:  # exact: the final state is the last live token's
        b_state = tl.where(m_t, b_new, b_state)
    else:
        b_state = b_new

    if f.DST_PER_TOKEN:  # vLLM: token t's state to its own slot
        i_dst = load_index(p.dst_idx + r.i_b * s.dst_b + t * s.dst_k, f.EVICT_FIRST)
        # the tile's masks, and no slot written for a pad request
        m_dst = both(both(i_dst != c.pad_slot_id, m_t), o.m_read)
        if f.STOCHASTIC:
            b_store = stored(b_new, p.state.dtype.element_ty, c.seed, i_dst * s.state_s + c.o_rand_state,
                             STREAM_STATE, True, f.PHILOX_ROUNDS, f.BLOCK_N, f.ORDERED_SUM)
        else:
            b_store = b_new.to(p.state.dtype.element_ty)
        store_state((p.state + (i_dst * s.state_s + o.o_base)) + o.o_tile, b_store, m_dst, f.EVICT_FIRST)
    if f.HAS_BUFFER:  # sglang: token t's state to the buffer's row of the request
        m_b = both(o.m_buf, m_t)
        if f.STOCHASTIC and f.STOCHASTIC_BUFFER:
            b_store = stored(b_new, p.buf.dtype.element_ty, c.seed, c.o_rand_buf + t * s.buf_t,
                             STREAM_BUFFER, True, f.PHILOX_ROUNDS, f.BLOCK_N, f.ORDERED_SUM)
        else:
            b_store = b_new.to(p.buf.dtype.element_ty)
        store_state(p.buf + (o.o_buf_base + t * s.buf_t) + o.o_buf_tile, b_store, m_b, f.EVICT_FIRST)

    b_out = gated_out(row_sums(b_new, b_C, f.BLOCK_M, f.BLOCK_N, f.ORDERED_SUM), b_x, b_z, c.b_D, o.m_live,
                      f.HAS_D, f.HAS_Z, f.HAS_SRC_IDX)
    tl.store(_at(p.out, r.i_xb, tok, r.i_h, o.o_m, s.out_b, s.out_t, s.out_h, s.out_p), b_out, mask=m_tv)
    return b_state


@triton.jit
def _tokens(b_state, r, p, s, o, c, f, UNROLLED: tl.constexpr, MASK_TOKENS: tl.constexpr,
            KEEP_FINAL: tl.constexpr):
    """The request's tokens in order (_token), from the state b_state: the T tokens unrolled
    (UNROLLED; MASK_TOKENS, KEEP_FINAL as _token's), or a loop over the request's count.
    Returns the state after the last."""
    if UNROLLED:
        for t in tl.static_range(f.T):
            b_state = _token(b_state, t, r, p, s, o, c, f, MASK_TOKENS, KEEP_FINAL)
    else:  # a while loop: Triton's interpreter cannot take range() of a loaded count
        t = 0
        while t < r.n_tok:
            b_state = _token(b_state, t, r, p, s, o, c, f, False, False)
            t += 1
    return b_state
# fmt: on


# fmt: off
@triton.heuristics(_HEURISTICS)
@triton.jit
def _selective_state_update_multi_token_kernel(
    # pointers
    p_state, p_x, p_dt, p_dt_bias, p_A, p_B, p_C, p_D, p_z, p_out,
    p_src_idx, p_dst_idx, p_accepted, p_cu_seqlens, p_buf, p_buf_idx, p_parent, p_seed,
    # sizes
    headdim, dstate, pad_slot_id, total_tokens, src_columns,
    # strides, stride_<tensor>_<dim>
    stride_state_s, stride_state_h, stride_state_p, stride_state_n,
    stride_x_b, stride_x_t, stride_x_h, stride_x_p,
    stride_dt_b, stride_dt_t, stride_dt_h, stride_dt_p,
    stride_dt_bias_h, stride_dt_bias_p,
    stride_A_h, stride_A_p, stride_A_n,
    stride_B_b, stride_B_t, stride_B_g, stride_B_n,
    stride_C_b, stride_C_t, stride_C_g, stride_C_n,
    stride_D_h, stride_D_p,
    stride_z_b, stride_z_t, stride_z_h, stride_z_p,
    stride_out_b, stride_out_t, stride_out_h, stride_out_p,
    stride_src_b, stride_src_k, stride_dst_b, stride_dst_k,
    stride_buf_r, stride_buf_t, stride_buf_h, stride_buf_p, stride_buf_n,
    stride_buf_idx, stride_parent_b, stride_parent_t,
    # flags
    T: tl.constexpr,  # tokens a request: the dense T, or the most the packed layout allows
    UNROLLED: tl.constexpr,  # the T tokens unrolled (else a loop over each request's count)
    HEADS_PER_GROUP: tl.constexpr,
    DT_SOFTPLUS: tl.constexpr,
    TIE_HDIM: tl.constexpr,
    WRITE_FINAL: tl.constexpr,  # the last token's state to dst (or the slot read)
    DST_PER_TOKEN: tl.constexpr,  # dst_idx [B, K]: token t's state to slot dst[b, t]
    HAS_DT_BIAS: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_SRC_IDX: tl.constexpr,
    HAS_DST_IDX: tl.constexpr,
    HAS_ACCEPTED: tl.constexpr,  # initial state from src[b, num_accepted[b] - 1]
    VARLEN: tl.constexpr,  # packed tokens, cu_seqlens
    HAS_BUFFER: tl.constexpr,  # every token's state to buffer[row, t]
    HAS_BUFFER_IDX: tl.constexpr,
    HAS_PARENTS: tl.constexpr,  # EAGLE tree: token t continues from its parent's state
    EVEN_M: tl.constexpr,
    EVEN_N: tl.constexpr,
    PACKED_ROWS: tl.constexpr,  # state rows of BLOCK_N contiguous words
    BUFFER_PACKED: tl.constexpr,  # the buffer's rows too
    EVEN_VECTORS: tl.constexpr,
    FAST_EXP: tl.constexpr,
    STOCHASTIC: tl.constexpr,  # 16-bit state stores rounded stochastically (common.py)
    STOCHASTIC_BUFFER: tl.constexpr,  # the buffer's too (else only the pool's)
    PHILOX_ROUNDS: tl.constexpr,
    # launch knobs
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SLOT_MAJOR: tl.constexpr,
    EVICT_FIRST: tl.constexpr,
    ORDERED_SUM: tl.constexpr,
    PDL: tl.constexpr,
):
    # One program: BLOCK_M rows of the head dim of one (request, head), all N columns, every
    # token of the request.
    i_m, i_b, i_h = start_program(SLOT_MAJOR, PDL)
    i_g = i_h // HEADS_PER_GROUP

    # The request's tokens: x[i_xb, t0 + t] for t < n_tok.
    t0, n_tok, i_xb = token_span(p_cu_seqlens, i_b, total_tokens, T, VARLEN, UNROLLED)
    if VARLEN:
        if n_tok == 0:  # a request of no tokens: nothing to do (vLLM's kernel returns too)
            return

    if HAS_SRC_IDX:
        if HAS_ACCEPTED:  # the slot of the last accepted token, within the row's columns
            k0 = load_index(p_accepted + i_b, EVICT_FIRST) - 1
            k0 = tl.minimum(tl.maximum(k0, 0), src_columns - 1)
        else:
            k0 = 0
        i_src = load_index(p_src_idx + i_b * stride_src_b + k0 * stride_src_k, EVICT_FIRST)
    else:
        i_src = i_b.to(tl.int64)
    i_dst = slot_index(p_dst_idx, i_b * stride_dst_b, i_src, HAS_DST_IDX and not DST_PER_TOKEN, EVICT_FIRST)
    i_buf = slot_index(p_buf_idx, i_b * stride_buf_idx, i_src, HAS_BUFFER_IDX, EVICT_FIRST)

    o_m, o_n, m_m, m_n = tile_offsets(i_m, headdim, dstate, BLOCK_M, BLOCK_N, ORDERED_SUM)
    m_vm = unless(EVEN_M and EVEN_VECTORS, m_m)
    m_vn = unless(EVEN_N and EVEN_VECTORS, m_n)
    m_tile = tile_mask(m_m, m_n, EVEN_M, EVEN_N, ORDERED_SUM)
    m_live = live_mask(i_src, pad_slot_id, HAS_SRC_IDX)
    m_read = both(m_tile, m_live)
    m_final = m_read
    if HAS_DST_IDX and not DST_PER_TOKEN:
        m_final = both(m_final, i_dst != pad_slot_id)
    m_buf = m_read
    if HAS_BUFFER_IDX:
        m_buf = both(m_buf, i_buf != pad_slot_id)

    # A slot's tile (common.tile_addressing), and a buffer row's step likewise.
    o_base, o_tile = tile_addressing(0, i_h, i_m, o_m, o_n, stride_state_h, stride_state_p, stride_state_n,
                                     PACKED_ROWS, BLOCK_M, BLOCK_N, ORDERED_SUM)
    o_buf_base = i_buf * 0
    o_buf_tile = o_tile
    if HAS_BUFFER:
        o_buf_base, o_buf_tile = tile_addressing(i_buf * stride_buf_r, i_h, i_m, o_m, o_n, stride_buf_h,
                                                 stride_buf_p, stride_buf_n, BUFFER_PACKED, BLOCK_M, BLOCK_N,
                                                 ORDERED_SUM)

    b_state = load_state((p_state + (i_src * stride_state_s + o_base)) + o_tile, m_read, EVICT_FIRST)
    wait_prior(PDL)

    # What every token shares: A (and with it dA's factor), dt_bias, D.
    if TIE_HDIM:
        b_A = tl.load(p_A + i_h * stride_A_h).to(tl.float32)
        b_dt_bias = 0.0
        if HAS_DT_BIAS:
            b_dt_bias = tl.load(p_dt_bias + i_h * stride_dt_bias_h).to(tl.float32)
    else:
        b_A = tl.load(p_A + i_h * stride_A_h + rows(o_m, ORDERED_SUM) * stride_A_p
                      + cols(o_n, ORDERED_SUM) * stride_A_n,
                      mask=rows(m_m, ORDERED_SUM) & cols(m_n, ORDERED_SUM), other=0.0).to(tl.float32)
        b_dt_bias = 0.0
        if HAS_DT_BIAS:
            b_dt_bias = load(p_dt_bias + i_h * stride_dt_bias_h + o_m * stride_dt_bias_p,
                             m_vm).to(tl.float32)
    b_D = 0.0
    if HAS_D:
        b_D = load(p_D + i_h * stride_D_h + o_m * stride_D_p, m_vm).to(tl.float32)

    # Stochastic rounding: the seed, and the offsets of the tile's rows (without the slot) in
    # the pool and the buffer, which key the random bits (common.py).
    seed = 0
    o_rand_state = 0
    o_rand_buf = 0
    if STOCHASTIC:
        seed = tl.load(p_seed)
        o_rand_state = i_h * stride_state_h + o_m * stride_state_p
        o_rand_buf = i_buf * stride_buf_r + i_h * stride_buf_h + o_m * stride_buf_p

    # The tokens, each from the state the one before left (or its parent's), their loads masked
    # past a packed request's count where unrolled. (The tuples are built in the call: a tuple
    # assigned to a name would turn its constexprs into tensors.)
    b_state = _tokens(
        b_state,
        _Request(i_b=i_b, i_h=i_h, i_g=i_g, i_xb=i_xb, t0=t0, n_tok=n_tok, i_buf=i_buf),
        _Pointers(x=p_x, dt=p_dt, B=p_B, C=p_C, z=p_z, out=p_out, dst_idx=p_dst_idx, parent=p_parent,
                  state=p_state, buf=p_buf),
        _Strides(x_b=stride_x_b, x_t=stride_x_t, x_h=stride_x_h, x_p=stride_x_p,
                 dt_b=stride_dt_b, dt_t=stride_dt_t, dt_h=stride_dt_h, dt_p=stride_dt_p,
                 B_b=stride_B_b, B_t=stride_B_t, B_g=stride_B_g, B_n=stride_B_n,
                 C_b=stride_C_b, C_t=stride_C_t, C_g=stride_C_g, C_n=stride_C_n,
                 z_b=stride_z_b, z_t=stride_z_t, z_h=stride_z_h, z_p=stride_z_p,
                 out_b=stride_out_b, out_t=stride_out_t, out_h=stride_out_h, out_p=stride_out_p,
                 state_s=stride_state_s, dst_b=stride_dst_b, dst_k=stride_dst_k, buf_t=stride_buf_t,
                 parent_b=stride_parent_b, parent_t=stride_parent_t),
        _Tile(o_m=o_m, o_n=o_n, o_base=o_base, o_tile=o_tile, o_buf_base=o_buf_base, o_buf_tile=o_buf_tile,
              m_vm=m_vm, m_vn=m_vn, m_read=m_read, m_buf=m_buf, m_live=m_live),
        _Shared(b_A=b_A, b_dt_bias=b_dt_bias, b_D=b_D, pad_slot_id=pad_slot_id, seed=seed,
                o_rand_state=o_rand_state, o_rand_buf=o_rand_buf),
        _Flags(T=T, DT_SOFTPLUS=DT_SOFTPLUS, TIE_HDIM=TIE_HDIM, HAS_DT_BIAS=HAS_DT_BIAS, HAS_D=HAS_D, HAS_Z=HAS_Z,
               HAS_SRC_IDX=HAS_SRC_IDX, DST_PER_TOKEN=DST_PER_TOKEN, HAS_BUFFER=HAS_BUFFER,
               HAS_PARENTS=HAS_PARENTS, FAST_EXP=FAST_EXP, STOCHASTIC=STOCHASTIC,
               STOCHASTIC_BUFFER=STOCHASTIC_BUFFER, PHILOX_ROUNDS=PHILOX_ROUNDS, BLOCK_M=BLOCK_M,
               BLOCK_N=BLOCK_N, ORDERED_SUM=ORDERED_SUM, EVICT_FIRST=EVICT_FIRST),
        UNROLLED, VARLEN and UNROLLED, VARLEN and UNROLLED and WRITE_FINAL,
    )

    if WRITE_FINAL:
        p_final = (p_state + (i_dst * stride_state_s + o_base)) + o_tile
        if STOCHASTIC:
            b_store = stored(b_state, p_state.dtype.element_ty, seed,
                             i_dst * stride_state_s + o_rand_state,
                             STREAM_STATE, True, PHILOX_ROUNDS, BLOCK_N, ORDERED_SUM)
        else:
            b_store = b_state.to(p_state.dtype.element_ty)
        store_state(p_final, b_store, m_final, EVICT_FIRST)
# fmt: on


def prepare_multi_token(
    call: Call,
    config: LaunchConfig,
    dt_softplus: bool,
    write_final: bool,
    pad_slot_id: int,
    fast_exp: bool,
    pdl: bool,
    variant: Variant,
) -> Launch:
    """Grid and arguments of the multi-token kernel (a checked multi-token Call)."""
    state, x = call.state, call.x
    nheads, headdim = x.shape[-2:]
    dstate = state.shape[-1]
    block_n = triton.next_power_of_2(dstate)
    check_ordered_sum(config, block_n, dstate)
    src, dst, buf = call.src_idx, call.dst_idx, call.buffer
    per_token = dst is not None and dst.dim() == 2
    arguments = dict(
        **update_arguments(call, pad_slot_id, "t"),
        p_accepted=call.num_accepted,
        p_cu_seqlens=call.cu_seqlens,
        p_buf=buf,
        p_buf_idx=call.buffer_idx,
        p_parent=call.parents,
        total_tokens=x.shape[1],
        src_columns=src.shape[1] if src is not None and src.dim() == 2 else 1,
        stride_src_b=0 if src is None else src.stride(0),
        stride_src_k=src.stride(1) if src is not None and src.dim() == 2 else 0,
        stride_dst_b=0 if dst is None else dst.stride(0),
        stride_dst_k=dst.stride(1) if per_token else 0,
        **named_strides("buf", buf, "rthpn"),
        stride_buf_idx=strides(call.buffer_idx, 1)[0],
        **named_strides("parent", call.parents, "bt"),
    )
    packed = not variant.strided_rows and state.stride(-1) == 1 and state.stride(-2) == block_n
    flags = dict(
        T=call.tokens,
        UNROLLED=call.unrolled,
        HEADS_PER_GROUP=nheads // call.B.shape[-2],
        DT_SOFTPLUS=dt_softplus,
        TIE_HDIM=ties_head_dim(call.dt, call.A, call.dt_bias),
        WRITE_FINAL=write_final and not per_token,
        DST_PER_TOKEN=per_token,
        EVEN_M=headdim % config.block_m == 0,
        EVEN_N=dstate == block_n,
        PACKED_ROWS=packed,
        BUFFER_PACKED=(
            buf is not None and not variant.strided_rows and buf.stride(-1) == 1 and buf.stride(-2) == block_n
        ),
        EVEN_VECTORS=not variant.masked_vectors,
        FAST_EXP=fast_exp,
        STOCHASTIC_BUFFER=call.rand_seed is not None and call.round_buffer,
        PHILOX_ROUNDS=call.philox_rounds if call.rand_seed is not None else 0,
        BLOCK_M=config.block_m,
        EVICT_FIRST=config.evict_first,
        ORDERED_SUM=config.ordered_sum,
        PDL=pdl,
        SLOT_MAJOR=config.slot_major,
        num_warps=config.num_warps,
    )
    return tile_launch(
        _selective_state_update_multi_token_kernel, config, headdim, nheads, call.batch, arguments, flags, pdl
    )
