r"""Decode: selective_state_update's checks and launch (prepare), and its single-token kernel
(the public door is api.py).

For request b, head h, row p of the head dim and state index n:

    dt'        = dt[b,h,p] + dt_bias[h,p]                  (if dt_bias)
    dt'        = log(1 + exp(dt')) if dt' <= 20 else dt'   (if dt_softplus)
    dA         = exp(A[h,p,n] * dt')                       (exp2(log2(e) * A * dt') if fast_exp)
    s[h,p,n]   = s[h,p,n] * dA + (dt' * B[b,g,n]) * x[b,h,p]          g = h // (H / G)
    out[b,h,p] = sum_n s[h,p,n] * C[b,g,n]  +  D[h,p] * x[b,h,p]      (D term if D)
    out[b,h,p] = out[b,h,p] * z * sigmoid(z)                          (if z)

where s is the state slot of the request: state[state_batch_indices[b]] (or state[b]). With T
tokens a request (speculative decoding's verify step, verify.py) the same recurrence runs token
after token on the state, in float32 registers.

Shapes (B batch, T tokens, H heads, P head dim, N state dim, G groups, S state slots):

    layout   state       x, dt, z, out          A          B, C             D, dt_bias
    Mamba2   [S,H,P,N]   [B,H,P] / [B,T,H,P]    [H,P,N]    [B,G,N] / [B,T,G,N]    [H,P]
    Mamba1   [S,P,N]     [B,P] / [B,T,P]        [P,N]      [B,N] / [B,T,N]        [P]

Mamba1 is run as Mamba2 with H = G = 1. Any strides are accepted; a state pool whose rows are
packed (stride 1 over N, stride next_power_of_2(N) over P, as engines allocate it) is addressed
with offsets known at compile time. Real models pass dt, A, D and dt_bias as stride-0
broadcasts over P (and N): then dt' and dA are one scalar per program (the "tied head dim" fast
path).

Written in place: the state slots named by dst_state_batch_indices (default: the slots read),
unless disable_state_update. Rows whose state_batch_indices entry equals pad_slot_id read and
write no slot and get out = 0.

Dtypes: state float32, bfloat16 or float16; inputs float32, bfloat16 or float16. Everything is
computed in float32 and rounded once on store (state to its dtype, out to out's dtype).

Bits: the default path runs the same float32 operations in the same order as the established
upstream Triton kernel (mamba_ssm and the copies serving engines ship): exp, not exp2; softplus
as log(1 + exp(x)) below 20; the row sum over N of state * C, then + D * x, then * z * sigmoid(z).
fast_exp=True takes vLLM's exp2 instead, for vLLM's bits. Launch configs only change how rows
are cut into programs. Of a config that sums rows as its register layout falls (the row sum is
a reduction), the GPU tuner measures whether it keeps the bits; a config with the ordered row
sum spells upstream's reduction tree and fmas out and keeps them by construction
(common.rowsum_upstream_order), and the tuner measures it all the same.

Grid: one tile (BLOCK_M rows of one request's head, all N columns) a program, in the upstream
order or slot-major.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ssmdecode.config import LaunchConfig, lookup_config
from ssmdecode.ops._gdc import gdc_wait
from ssmdecode.ops.selective_state_update import verify
from ssmdecode.ops.selective_state_update.arguments import UpdateArgs
from ssmdecode.ops.selective_state_update.checks import Call, check_call, ties_head_dim
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
    state_step,
    store_state,
    stored,
    tile_addressing,
    tile_mask,
    tile_offsets,
    unless,
    wait_prior,
)
from ssmdecode.ops.selective_state_update.launch import (
    HEURISTICS,
    Launch,
    Variant,
    check_ordered_sum,
    given,
    run_on,
    strides,
    tile_launch,
    update_arguments,
)

__all__ = ["Launch", "Variant", "prepare", "run"]


# The constexprs the kernel derives from its arguments.
_HEURISTICS = {**HEURISTICS, **given(HAS_DST_IDX="p_dst_idx", HAS_ORDER="p_order")}


# fmt: off
@triton.heuristics(_HEURISTICS)
@triton.jit
def _selective_state_update_kernel(
    # pointers
    p_state, p_x, p_dt, p_dt_bias, p_A, p_B, p_C, p_D, p_z, p_out,
    p_src_idx, p_dst_idx, p_order, p_seed,
    # sizes
    headdim, dstate, pad_slot_id,
    # strides, stride_<tensor>_<dim>
    stride_state_s, stride_state_h, stride_state_p, stride_state_n,
    stride_x_b, stride_x_h, stride_x_p,
    stride_dt_b, stride_dt_h, stride_dt_p,
    stride_dt_bias_h, stride_dt_bias_p,
    stride_A_h, stride_A_p, stride_A_n,
    stride_B_b, stride_B_g, stride_B_n,
    stride_C_b, stride_C_g, stride_C_n,
    stride_D_h, stride_D_p,
    stride_z_b, stride_z_h, stride_z_p,
    stride_out_b, stride_out_h, stride_out_p,
    stride_src_idx, stride_dst_idx, stride_order,
    # flags
    HEADS_PER_GROUP: tl.constexpr,  # one compile per model's value
    DT_SOFTPLUS: tl.constexpr,
    TIE_HDIM: tl.constexpr,  # dt, dt_bias, A are stride-0 over P (and N): one dt', dA per head
    WRITE_STATE: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_SRC_IDX: tl.constexpr,
    HAS_DST_IDX: tl.constexpr,
    HAS_ORDER: tl.constexpr,  # program k takes batch row order[k] (see batch_order)
    EVEN_M: tl.constexpr,  # headdim % BLOCK_M == 0: no row mask
    EVEN_N: tl.constexpr,  # dstate == BLOCK_N: no column mask
    PACKED_ROWS: tl.constexpr,  # state rows of BLOCK_N contiguous words: compile-time offsets
    EVEN_VECTORS: tl.constexpr,  # x, dt, D, z, out, B, C unmasked where the tile divides
    FAST_EXP: tl.constexpr,  # dA by exp2 (vLLM's bits), else exp (mamba_ssm's and sglang's)
    STOCHASTIC: tl.constexpr,  # a 16-bit state stored with stochastic rounding (common.py)
    PHILOX_ROUNDS: tl.constexpr,
    # launch knobs
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SLOT_MAJOR: tl.constexpr,
    EVICT_FIRST: tl.constexpr,
    ORDERED_SUM: tl.constexpr,
    PDL: tl.constexpr,  # launched programmatic-dependent: see selective_state_update(pdl=)
):
    # One program, one tile: BLOCK_M rows of the head dim of one (request, head), all N columns.
    i_m, i_b, i_h = start_program(SLOT_MAJOR, PDL)
    if HAS_ORDER:
        i_b = tl.load(p_order + i_b * stride_order)
    i_g = i_h // HEADS_PER_GROUP  # a compile-time divisor: a shift or a multiply
    i_src = slot_index(p_src_idx, i_b * stride_src_idx, i_b.to(tl.int64), HAS_SRC_IDX, EVICT_FIRST)
    i_dst = slot_index(p_dst_idx, i_b * stride_dst_idx, i_src, HAS_DST_IDX, EVICT_FIRST)

    # The state tile: [BLOCK_M, BLOCK_N], or grouped [BLOCK_N / 4, BLOCK_M, 4] with the ordered
    # row sum (common.py, "Tiles"); the masks of the vectors over its rows and columns, and of
    # the tile: the rows and columns where it overhangs, the pad slot with indices.
    o_m, o_n, m_m, m_n = tile_offsets(i_m, headdim, dstate, BLOCK_M, BLOCK_N, ORDERED_SUM)
    m_vm = unless(EVEN_M and EVEN_VECTORS, m_m)
    m_vn = unless(EVEN_N and EVEN_VECTORS, m_n)
    m_tile = tile_mask(m_m, m_n, EVEN_M, EVEN_N, ORDERED_SUM)
    m_live = live_mask(i_src, pad_slot_id, HAS_SRC_IDX)
    m_read = both(m_tile, m_live)
    m_write = m_read
    if HAS_DST_IDX:
        m_write = both(m_read, i_dst != pad_slot_id)
    o_base, o_tile = tile_addressing(0, i_h, i_m, o_m, o_n, stride_state_h, stride_state_p, stride_state_n,
                                     PACKED_ROWS, BLOCK_M, BLOCK_N, ORDERED_SUM)
    p_src = (p_state + (i_src * stride_state_s + o_base)) + o_tile
    p_dst = (p_state + (i_dst * stride_state_s + o_base)) + o_tile

    b_state = load_state(p_src, m_read, EVICT_FIRST)
    wait_prior(PDL)  # the slot indices and the state are in flight; the rest waits for the kernel before
    b_x = load(p_x + i_b * stride_x_b + i_h * stride_x_h + o_m * stride_x_p, m_vm).to(tl.float32)
    if TIE_HDIM:
        b_dt = tl.load(p_dt + i_b * stride_dt_b + i_h * stride_dt_h).to(tl.float32)
        if HAS_DT_BIAS:
            b_dt += tl.load(p_dt_bias + i_h * stride_dt_bias_h).to(tl.float32)
        if DT_SOFTPLUS:
            b_dt = softplus(b_dt)
        b_A = tl.load(p_A + i_h * stride_A_h).to(tl.float32)
        b_dA = exp_dA(b_A * b_dt, FAST_EXP)
    else:
        b_dt = load(p_dt + i_b * stride_dt_b + i_h * stride_dt_h + o_m * stride_dt_p,
                    m_vm).to(tl.float32)
        if HAS_DT_BIAS:
            b_dt += load(p_dt_bias + i_h * stride_dt_bias_h + o_m * stride_dt_bias_p,
                         m_vm).to(tl.float32)
        if DT_SOFTPLUS:
            b_dt = softplus(b_dt)
        b_A = tl.load(p_A + i_h * stride_A_h + rows(o_m, ORDERED_SUM) * stride_A_p
                      + cols(o_n, ORDERED_SUM) * stride_A_n,
                      mask=rows(m_m, ORDERED_SUM) & cols(m_n, ORDERED_SUM),
                      other=0.0).to(tl.float32)
        b_dA = exp_dA(b_A * rows(b_dt, ORDERED_SUM), FAST_EXP)
    b_B = load(p_B + i_b * stride_B_b + i_g * stride_B_g + o_n * stride_B_n, m_vn).to(tl.float32)
    b_C = load(p_C + i_b * stride_C_b + i_g * stride_C_g + o_n * stride_C_n, m_vn).to(tl.float32)
    b_D = 0.0  # unread without D
    if HAS_D:
        b_D = load(p_D + i_h * stride_D_h + o_m * stride_D_p, m_vm).to(tl.float32)
    b_z = b_x  # unread without z
    if HAS_Z:
        b_z = load(p_z + i_b * stride_z_b + i_h * stride_z_h + o_m * stride_z_p, m_vm).to(tl.float32)
    if STOCHASTIC:
        # Every load issued before the math. With the rounding's instructions ptxas had sunk
        # half the state rows' loads below the first rows' stores, each a memory latency the
        # program waits out alone. A barrier is a fence ptxas does not move loads across; in a
        # one-warp program it costs a few cycles. An fp16 state's rounding without it cost
        # 9.3% at bs 1024 in run 78, with it 4.7% in run 76 (docs/numerics.md, "Speed").
        tl.debug_barrier()

    # The same operations, in the same order, as the upstream kernel: keep them so.
    if TIE_HDIM:
        b_dB = b_B * b_dt
    else:
        b_dB = cols(b_B, ORDERED_SUM) * rows(b_dt, ORDERED_SUM)
    b_state = state_step(b_state, b_dA, b_dB, rows(b_x, ORDERED_SUM), ORDERED_SUM)
    if WRITE_STATE:
        if STOCHASTIC:
            # the rows' offsets in the pool key the random bits (common.py)
            o_row = i_dst * stride_state_s + i_h * stride_state_h + o_m * stride_state_p
            b_store = stored(b_state, p_state.dtype.element_ty, tl.load(p_seed), o_row,
                             STREAM_STATE, True, PHILOX_ROUNDS, BLOCK_N, ORDERED_SUM)
        else:
            b_store = b_state.to(p_state.dtype.element_ty)
        store_state(p_dst, b_store, m_write, EVICT_FIRST)
    b_out = gated_out(row_sums(b_state, b_C, BLOCK_M, BLOCK_N, ORDERED_SUM), b_x, b_z, b_D, m_live,
                      HAS_D, HAS_Z, HAS_SRC_IDX)
    tl.store(p_out + i_b * stride_out_b + i_h * stride_out_h + o_m * stride_out_p, b_out, mask=m_vm)
# fmt: on


def _prepare_single(
    call: Call,
    config: LaunchConfig,
    dt_softplus: bool,
    write_state: bool,
    pad_slot_id: int,
    fast_exp: bool,
    pdl: bool,
    order: torch.Tensor | None,
    variant: Variant,
) -> Launch:
    """Grid and arguments of the single-token kernel (tensors in the Mamba2 layout)."""
    state, x = call.state, call.x
    batch, nheads, headdim = x.shape
    dstate = state.shape[-1]
    block_n = triton.next_power_of_2(dstate)
    check_ordered_sum(config, block_n, dstate)
    arguments = dict(
        **update_arguments(call, pad_slot_id, ""),
        p_order=order,
        stride_src_idx=strides(call.src_idx, 1)[0],
        stride_dst_idx=strides(call.dst_idx, 1)[0],
        stride_order=1 if order is None else order.stride(0),  # 1: a constant, no kernel argument
    )
    flags = dict(
        HEADS_PER_GROUP=nheads // call.B.shape[1],
        DT_SOFTPLUS=dt_softplus,
        TIE_HDIM=ties_head_dim(call.dt, call.A, call.dt_bias),
        WRITE_STATE=write_state,
        EVEN_M=headdim % config.block_m == 0,
        EVEN_N=dstate == block_n,
        PACKED_ROWS=(not variant.strided_rows and state.stride(-1) == 1 and state.stride(-2) == block_n),
        EVEN_VECTORS=not variant.masked_vectors,
        FAST_EXP=fast_exp,
        PHILOX_ROUNDS=call.philox_rounds if call.rand_seed is not None else 0,
        BLOCK_M=config.block_m,
        EVICT_FIRST=config.evict_first,
        ORDERED_SUM=config.ordered_sum,
        PDL=pdl,
        SLOT_MAJOR=config.slot_major,
        num_warps=config.num_warps,
    )
    return tile_launch(_selective_state_update_kernel, config, headdim, nheads, batch, arguments, flags, pdl)


def prepare(
    args: UpdateArgs, *, _variant: Variant | None = None, _round_buffer: bool = True
) -> tuple[Call, Launch | None]:
    """A selective_state_update call checked (check_call, by the arguments' own names) and its
    launch prepared, not run (None for an empty batch): what the public door launches, what
    the custom op launches under torch.compile, and what benchmarks/compile_info.py compiles
    for a GPU target without one. _variant (tests, explorations) picks a kernel variant of the
    same bits; _round_buffer=False (the sglang adapter) keeps the intermediate-state buffer's
    stores round-to-nearest under stochastic rounding."""
    call = check_call(**args.as_kwargs(), round_buffer=_round_buffer)
    config, pdl, fast_exp, pad_slot_id = args.config, args.pdl, args.fast_exp, args.pad_slot_id
    dt_softplus, disable_state_update, batch_order = (
        args.dt_softplus,
        args.disable_state_update,
        args.batch_order,
    )
    if call.batch == 0:
        return call, None
    variant = _variant or Variant()
    pdl = pdl and call.state.device.type == "cuda"
    if pdl and (gdc_wait is None or torch.cuda.get_device_capability(call.state.device)[0] < 9):
        device = call.state.device
        raise ValueError(
            f"pdl=True needs a GPU of compute capability 9.0 or newer and Triton >= 3.3; "
            f"got {torch.cuda.get_device_name(device)} "
            f"({'.'.join(map(str, torch.cuda.get_device_capability(device)))}), "
            f"Triton {triton.__version__}"
        )
    headdim, dstate = call.state.shape[-2:]
    if config is None:  # a single-token call's mode is "single", its tokens 0
        config = lookup_config(
            headdim,
            dstate,
            call.state.dtype,
            call.batch,
            call.state.device,
            mode=call.mode,
            tokens=call.tokens,
            stochastic=call.rand_seed is not None,
            dense=call.multi_token and not ties_head_dim(call.dt, call.A, call.dt_bias),
            # a tree's tokens read their parents' states back from the buffer
            tile_dtype=call.buffer.dtype if call.buffer is not None and call.parents is not None else None,
        )
    if call.multi_token:
        return call, verify.prepare_multi_token(
            call, config, dt_softplus, not disable_state_update, pad_slot_id, fast_exp, pdl, variant
        )
    return call, _prepare_single(
        call, config, dt_softplus, not disable_state_update, pad_slot_id, fast_exp, pdl, batch_order, variant
    )


def run(call: Call, launch: Launch | None) -> None:
    """Run a prepared launch on the device of its state (CPU tensors: the interpreter)."""
    run_on(call.state.device, launch)
