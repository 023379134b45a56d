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

import triton
import triton.language as tl

from ssmdecode.config import LaunchConfig
from ssmdecode.ops._gdc import gdc_launch_dependents, gdc_wait
from ssmdecode.ops.selective_state_update.checks import Call, ties_head_dim
from ssmdecode.ops.selective_state_update.common import (
    STREAM_BUFFER,
    STREAM_STATE,
    col_offsets,
    cols,
    exp_dA,
    load,
    program_tile,
    rows,
    rowsum_upstream_order,
    softplus,
    state_step,
    stored,
)
from ssmdecode.ops.selective_state_update.launch import (
    HEURISTICS,
    Launch,
    Variant,
    check_ordered_sum,
    given,
    strides,
    tile_launch,
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


# fmt: off
@triton.jit
def _token(
    b_state, t, n_tok, i_b, i_h, i_g, i_xb, t0, i_src, i_buf,
    p_x, p_dt, p_B, p_C, p_z, p_out, p_dst_idx, p_parent, p_state, p_buf,
    o_m, o_n, o_base, o_tile, o_buf_base, o_buf_tile,
    b_A, b_dt_bias, b_D, m_vm, m_vn, m_read, m_buf, m_live, pad_slot_id, T,
    seed, o_rand_state, o_rand_buf,
    stride_state_s, stride_x_b, stride_x_t, stride_x_h, stride_x_p,
    stride_dt_b, stride_dt_t, stride_dt_h, stride_dt_p,
    stride_B_b, stride_B_t, stride_B_g, stride_B_n, stride_C_b, stride_C_t, stride_C_g, stride_C_n,
    stride_z_b, stride_z_t, stride_z_h, stride_z_p,
    stride_out_b, stride_out_t, stride_out_h, stride_out_p,
    stride_dst_b, stride_dst_k, stride_buf_t, stride_parent_b, stride_parent_t,
    DT_SOFTPLUS: tl.constexpr, TIE_HDIM: tl.constexpr, HAS_DT_BIAS: tl.constexpr,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_SRC_IDX: tl.constexpr,
    DST_PER_TOKEN: tl.constexpr, HAS_BUFFER: tl.constexpr, HAS_PARENTS: tl.constexpr,
    MASK_TOKENS: tl.constexpr, KEEP_FINAL: tl.constexpr, FAST_EXP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ORDERED_SUM: tl.constexpr,
    STATE_EVICT: tl.constexpr, INDEX_EVICT: tl.constexpr,
    STOCHASTIC: tl.constexpr, STOCHASTIC_BUFFER: tl.constexpr, PHILOX_ROUNDS: tl.constexpr,
):
    """Token t of the request: continue from its parent's state (EAGLE trees), apply it,
    write its state where the mode says and its out. Returns the state after it."""
    # Tokens past the request's count (packed layout, unrolled): their loads are masked and
    # nothing of theirs is stored; only where the final state is written must they leave the
    # state as it was.
    m_t = None
    if MASK_TOKENS:
        m_t = t < n_tok
    m_tv = m_vm
    if MASK_TOKENS:
        m_tv = m_t if m_vm is None else m_vm & m_t
    m_tn = m_vn
    if MASK_TOKENS:
        m_tn = m_t if m_vn is None else m_vn & m_t
    tok = t0 + t
    if HAS_PARENTS:
        if t > 0:
            # The parent's state is read back from the buffer, as this program stored it: the
            # store's and the load's layouts may give an element to different threads (with a
            # 16-bit buffer, (8,1) stored 8 columns a thread and loaded 4, and read stale
            # values on the H200), so the program's stores are made visible to it first.
            tl.debug_barrier()
            i_par = tl.load(p_parent + i_b * stride_parent_b + t * stride_parent_t).to(tl.int64)
            if (i_par >= 0) & (i_par < T) & (i_buf != pad_slot_id):
                p_par = p_buf + (o_buf_base + i_par * stride_buf_t) + o_buf_tile
                b_state = tl.load(p_par, mask=m_read).to(tl.float32)
    b_x = load(p_x + i_xb * stride_x_b + tok * stride_x_t + i_h * stride_x_h + o_m * stride_x_p,
               m_tv).to(tl.float32)
    if TIE_HDIM:
        if MASK_TOKENS:
            b_dt = tl.load(p_dt + i_xb * stride_dt_b + tok * stride_dt_t + i_h * stride_dt_h,
                           mask=m_t, other=0.0).to(tl.float32)
        else:
            b_dt = tl.load(p_dt + i_xb * stride_dt_b + tok * stride_dt_t + i_h * stride_dt_h).to(tl.float32)
        if HAS_DT_BIAS:
            b_dt += b_dt_bias
        if DT_SOFTPLUS:
            b_dt = softplus(b_dt)
        b_dA = exp_dA(b_A * b_dt, FAST_EXP)
    else:
        b_dt = load(p_dt + i_xb * stride_dt_b + tok * stride_dt_t + i_h * stride_dt_h
                    + o_m * stride_dt_p, m_tv).to(tl.float32)
        if HAS_DT_BIAS:
            b_dt += b_dt_bias
        if DT_SOFTPLUS:
            b_dt = softplus(b_dt)
        b_dA = exp_dA(b_A * rows(b_dt, ORDERED_SUM), FAST_EXP)
    b_B = load(p_B + i_xb * stride_B_b + tok * stride_B_t + i_g * stride_B_g + o_n * stride_B_n,
               m_tn).to(tl.float32)
    b_C = load(p_C + i_xb * stride_C_b + tok * stride_C_t + i_g * stride_C_g + o_n * stride_C_n,
               m_tn).to(tl.float32)
    if HAS_Z:
        b_z = load(p_z + i_xb * stride_z_b + tok * stride_z_t + i_h * stride_z_h + o_m * stride_z_p,
                   m_tv).to(tl.float32)

    if TIE_HDIM:
        b_dB = b_B * b_dt
    else:
        b_dB = cols(b_B, ORDERED_SUM) * rows(b_dt, ORDERED_SUM)
    b_new = state_step(b_state, b_dA, b_dB, rows(b_x, ORDERED_SUM), ORDERED_SUM)
    if KEEP_FINAL:  # exact: the final state is the last live token's
        b_state = tl.where(m_t, b_new, b_state)
    else:
        b_state = b_new

    if DST_PER_TOKEN:  # vLLM: token t's state to its own slot
        i_dst = tl.load(p_dst_idx + i_b * stride_dst_b + t * stride_dst_k,
                        eviction_policy=INDEX_EVICT).to(tl.int64)
        m_dst = i_dst != pad_slot_id
        if MASK_TOKENS:
            m_dst = m_dst & m_t
        if m_read is not None:  # the tile's masks, and no slot written for a pad request
            m_dst = m_dst & m_read
        if STOCHASTIC:
            b_store = stored(b_new, p_state.dtype.element_ty, seed,
                             i_dst * stride_state_s + o_rand_state,
                             STREAM_STATE, True, PHILOX_ROUNDS, BLOCK_N, ORDERED_SUM)
        else:
            b_store = b_new.to(p_state.dtype.element_ty)
        tl.store((p_state + (i_dst * stride_state_s + o_base)) + o_tile, b_store, mask=m_dst,
                 eviction_policy=STATE_EVICT)
    if HAS_BUFFER:  # sglang: token t's state to the buffer's row of the request
        m_b = m_buf
        if MASK_TOKENS:
            m_b = m_t if m_b is None else m_b & m_t
        if STOCHASTIC and STOCHASTIC_BUFFER:
            b_store = stored(b_new, p_buf.dtype.element_ty, seed,
                             o_rand_buf + t * stride_buf_t, STREAM_BUFFER, True, PHILOX_ROUNDS, BLOCK_N, ORDERED_SUM)
        else:
            b_store = b_new.to(p_buf.dtype.element_ty)
        tl.store(p_buf + (o_buf_base + t * stride_buf_t) + o_buf_tile, b_store, mask=m_b,
                 eviction_policy=STATE_EVICT)

    if ORDERED_SUM:
        b_out = rowsum_upstream_order(tl.permute(b_new, (1, 0, 2)), b_C, BLOCK_M, BLOCK_N)
    else:
        b_out = tl.sum(b_new * b_C[None, :], axis=1)
    if HAS_D:
        b_out += b_x * b_D
    if HAS_Z:
        b_out *= b_z * tl.sigmoid(b_z)
    if HAS_SRC_IDX:
        b_out = tl.where(m_live, b_out, 0.0)
    tl.store(p_out + i_xb * stride_out_b + tok * stride_out_t + i_h * stride_out_h + o_m * stride_out_p,
             b_out, mask=m_tv)
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
    if PDL:
        gdc_launch_dependents()
    i_m, i_b, i_h = program_tile(SLOT_MAJOR)
    i_g = i_h // HEADS_PER_GROUP
    STATE_EVICT: tl.constexpr = "evict_first" if EVICT_FIRST else ""
    INDEX_EVICT: tl.constexpr = "evict_last" if EVICT_FIRST else ""

    # The request's tokens: x[i_xb, t0 + t] for t < n_tok. Packed offsets are clamped to the
    # tokens of x, so that no cu_seqlens can read or write outside x and out.
    if VARLEN:
        bos = tl.load(p_cu_seqlens + i_b).to(tl.int64)
        eos = tl.load(p_cu_seqlens + i_b + 1).to(tl.int64)
        bos = tl.minimum(tl.maximum(bos, 0), total_tokens)
        eos = tl.minimum(tl.maximum(eos, bos), total_tokens)
        n_tok = eos - bos
        if UNROLLED:
            n_tok = tl.minimum(n_tok, T)
        if n_tok == 0:  # a request of no tokens: nothing to do (vLLM's kernel returns too)
            return
        i_xb = 0
        t0 = bos
    else:
        n_tok = T
        i_xb = i_b
        t0 = 0

    if HAS_SRC_IDX:
        if HAS_ACCEPTED:  # the slot of the last accepted token, within the row's columns
            k0 = tl.load(p_accepted + i_b, eviction_policy=INDEX_EVICT).to(tl.int64) - 1
            k0 = tl.minimum(tl.maximum(k0, 0), src_columns - 1)
        else:
            k0 = 0
        i_src = tl.load(p_src_idx + i_b * stride_src_b + k0 * stride_src_k,
                        eviction_policy=INDEX_EVICT).to(tl.int64)
    else:
        i_src = i_b.to(tl.int64)
    if HAS_DST_IDX and not DST_PER_TOKEN:
        i_dst = tl.load(p_dst_idx + i_b * stride_dst_b, eviction_policy=INDEX_EVICT).to(tl.int64)
    else:
        i_dst = i_src
    if HAS_BUFFER_IDX:
        i_buf = tl.load(p_buf_idx + i_b * stride_buf_idx, eviction_policy=INDEX_EVICT).to(tl.int64)
    else:
        i_buf = i_src

    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    o_n = col_offsets(BLOCK_N, ORDERED_SUM)
    m_m = o_m < headdim
    m_n = o_n < dstate
    m_vm = None if EVEN_M and EVEN_VECTORS else m_m
    m_vn = None if EVEN_N and EVEN_VECTORS else m_n
    m_tile = None
    if not EVEN_M:
        m_tile = rows(m_m, ORDERED_SUM)
    if not EVEN_N:
        m_tile = cols(m_n, ORDERED_SUM) if m_tile is None else m_tile & cols(m_n, ORDERED_SUM)
    m_live = None
    m_read = m_tile
    if HAS_SRC_IDX:
        m_live = i_src != pad_slot_id
        m_read = m_live if m_tile is None else m_tile & m_live
    m_final = m_read
    if HAS_DST_IDX and not DST_PER_TOKEN:
        m_final = (i_dst != pad_slot_id) if m_final is None else m_final & (i_dst != pad_slot_id)
    m_buf = m_read
    if HAS_BUFFER_IDX:
        m_buf = (i_buf != pad_slot_id) if m_buf is None else m_buf & (i_buf != pad_slot_id)

    # A slot's tile: one base a program plus offsets known at compile time where the rows are
    # packed (decode.py, "Packed rows"); the buffer's rows likewise.
    if PACKED_ROWS:
        o_base = i_h * stride_state_h + i_m * (BLOCK_M * BLOCK_N)
        o_tile = rows(tl.arange(0, BLOCK_M), ORDERED_SUM) * BLOCK_N + cols(o_n, ORDERED_SUM)
    else:
        o_base = i_h * 0
        o_tile = (i_h * stride_state_h + rows(o_m, ORDERED_SUM) * stride_state_p
                  + cols(o_n, ORDERED_SUM) * stride_state_n)
    o_buf_base = i_buf * 0
    o_buf_tile = o_tile
    if HAS_BUFFER:
        if BUFFER_PACKED:
            o_buf_base = i_buf * stride_buf_r + i_h * stride_buf_h + i_m * (BLOCK_M * BLOCK_N)
            o_buf_tile = rows(tl.arange(0, BLOCK_M), ORDERED_SUM) * BLOCK_N + cols(o_n, ORDERED_SUM)
        else:
            o_buf_base = i_buf * stride_buf_r
            o_buf_tile = (i_h * stride_buf_h + rows(o_m, ORDERED_SUM) * stride_buf_p
                          + cols(o_n, ORDERED_SUM) * stride_buf_n)

    p_src = (p_state + (i_src * stride_state_s + o_base)) + o_tile
    if m_read is None:
        b_state = tl.load(p_src, eviction_policy=STATE_EVICT).to(tl.float32)
    else:
        b_state = tl.load(p_src, mask=m_read, other=0.0, eviction_policy=STATE_EVICT).to(tl.float32)
    if PDL:
        gdc_wait()

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
    MASK_TOKENS: tl.constexpr = VARLEN and UNROLLED
    KEEP_FINAL: tl.constexpr = MASK_TOKENS and WRITE_FINAL
    if UNROLLED:
        for t in tl.static_range(T):
            b_state = _token(
                b_state, t, n_tok, i_b, i_h, i_g, i_xb, t0, i_src, i_buf,
                p_x, p_dt, p_B, p_C, p_z, p_out, p_dst_idx, p_parent, p_state, p_buf,
                o_m, o_n, o_base, o_tile, o_buf_base, o_buf_tile,
                b_A, b_dt_bias, b_D, m_vm, m_vn, m_read, m_buf, m_live, pad_slot_id, T,
                seed, o_rand_state, o_rand_buf,
                stride_state_s, stride_x_b, stride_x_t, stride_x_h, stride_x_p,
                stride_dt_b, stride_dt_t, stride_dt_h, stride_dt_p,
                stride_B_b, stride_B_t, stride_B_g, stride_B_n,
                stride_C_b, stride_C_t, stride_C_g, stride_C_n,
                stride_z_b, stride_z_t, stride_z_h, stride_z_p,
                stride_out_b, stride_out_t, stride_out_h, stride_out_p,
                stride_dst_b, stride_dst_k, stride_buf_t, stride_parent_b, stride_parent_t,
                DT_SOFTPLUS, TIE_HDIM, HAS_DT_BIAS, HAS_D, HAS_Z, HAS_SRC_IDX, DST_PER_TOKEN,
                HAS_BUFFER, HAS_PARENTS, MASK_TOKENS, KEEP_FINAL, FAST_EXP, BLOCK_M, BLOCK_N,
                ORDERED_SUM, STATE_EVICT, INDEX_EVICT, STOCHASTIC, STOCHASTIC_BUFFER,
                PHILOX_ROUNDS,
            )
    else:  # a while loop: Triton's interpreter cannot take range() of a loaded count
        t = 0
        while t < n_tok:
            b_state = _token(
                b_state, t, n_tok, i_b, i_h, i_g, i_xb, t0, i_src, i_buf,
                p_x, p_dt, p_B, p_C, p_z, p_out, p_dst_idx, p_parent, p_state, p_buf,
                o_m, o_n, o_base, o_tile, o_buf_base, o_buf_tile,
                b_A, b_dt_bias, b_D, m_vm, m_vn, m_read, m_buf, m_live, pad_slot_id, T,
                seed, o_rand_state, o_rand_buf,
                stride_state_s, stride_x_b, stride_x_t, stride_x_h, stride_x_p,
                stride_dt_b, stride_dt_t, stride_dt_h, stride_dt_p,
                stride_B_b, stride_B_t, stride_B_g, stride_B_n,
                stride_C_b, stride_C_t, stride_C_g, stride_C_n,
                stride_z_b, stride_z_t, stride_z_h, stride_z_p,
                stride_out_b, stride_out_t, stride_out_h, stride_out_p,
                stride_dst_b, stride_dst_k, stride_buf_t, stride_parent_b, stride_parent_t,
                DT_SOFTPLUS, TIE_HDIM, HAS_DT_BIAS, HAS_D, HAS_Z, HAS_SRC_IDX, DST_PER_TOKEN,
                HAS_BUFFER, HAS_PARENTS, False, False, FAST_EXP, BLOCK_M, BLOCK_N,
                ORDERED_SUM, STATE_EVICT, INDEX_EVICT, STOCHASTIC, STOCHASTIC_BUFFER,
                PHILOX_ROUNDS,
            )
            t += 1

    if WRITE_FINAL:
        p_final = (p_state + (i_dst * stride_state_s + o_base)) + o_tile
        if STOCHASTIC:
            b_store = stored(b_state, p_state.dtype.element_ty, seed,
                             i_dst * stride_state_s + o_rand_state,
                             STREAM_STATE, True, PHILOX_ROUNDS, BLOCK_N, ORDERED_SUM)
        else:
            b_store = b_state.to(p_state.dtype.element_ty)
        tl.store(p_final, b_store, mask=m_final, eviction_policy=STATE_EVICT)
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
    src_strides = (0, 0) if src is None else (src.stride(0), src.stride(1) if src.dim() == 2 else 0)
    dst_strides = (0, 0) if dst is None else (dst.stride(0), dst.stride(1) if per_token else 0)
    args = (
        state,
        x,
        call.dt,
        call.dt_bias,
        call.A,
        call.B,
        call.C,
        call.D,
        call.z,
        call.out,
        src,
        dst,
        call.num_accepted,
        call.cu_seqlens,
        buf,
        call.buffer_idx,
        call.parents,
        call.rand_seed,
        headdim,
        dstate,
        pad_slot_id,
        x.shape[1],
        src.shape[1] if src is not None and src.dim() == 2 else 1,
        *state.stride(),
        *x.stride(),
        *call.dt.stride(),
        *strides(call.dt_bias, 2),
        *call.A.stride(),
        *call.B.stride(),
        *call.C.stride(),
        *strides(call.D, 2),
        *strides(call.z, 4),
        *call.out.stride(),
        *src_strides,
        *dst_strides,
        *strides(buf, 5),
        *strides(call.buffer_idx, 1),
        *strides(call.parents, 2),
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
        _selective_state_update_multi_token_kernel, config, headdim, nheads, call.batch, args, flags, pdl
    )
