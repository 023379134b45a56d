r"""selective_state_update: one decode step of a Mamba (selective SSM) layer.

For request b, head h, row p of the head dim and state index n:

    dt'        = dt[b,h,p] + dt_bias[h,p]                  (if dt_bias)
    dt'        = log(1 + exp(dt')) if dt' <= 20 else dt'   (if dt_softplus)
    dA         = exp(A[h,p,n] * dt')
    s[h,p,n]   = s[h,p,n] * dA + (dt' * B[b,g,n]) * x[b,h,p]          g = h // (H / G)
    out[b,h,p] = sum_n s[h,p,n] * C[b,g,n]  +  D[h,p] * x[b,h,p]      (D term if D)
    out[b,h,p] = out[b,h,p] * z * sigmoid(z)                          (if z)

where s is the state slot of the request: state[state_batch_indices[b]] (or state[b]).

Shapes (B batch, H heads, P head dim, N state dim, G groups, S state slots in the pool):

    layout   state       x, dt, z, out   A          B, C        D, dt_bias
    Mamba2   [S,H,P,N]   [B,H,P]         [H,P,N]    [B,G,N]     [H,P]
    Mamba1   [S,P,N]     [B,P]           [P,N]      [B,N]       [P]

Mamba1 is run as Mamba2 with H = G = 1. Any strides are accepted; a state pool whose rows are
packed (stride 1 over N, stride next_power_of_2(N) over P, as engines allocate it) is addressed
with offsets known at compile time (see _PACKED_ROWS). Real models pass dt, A, D and dt_bias as
stride-0 broadcasts over P (and N): then dt' and dA are one scalar per program (the "tied head
dim" fast path). A multi-token variant (T tokens per request, for speculative
decoding) will take x, dt, z, B, C with a token dim after the batch dim ([B,T,H,P], [B,T,G,N]);
the rank of x tells the layouts apart, so today's callers keep working.

Written in place: the state slots named by dst_state_batch_indices (default: the slots read),
unless disable_state_update. Rows whose state_batch_indices entry equals pad_slot_id read and
write no slot and get out = 0.

Dtypes: state float32, bfloat16 or float16; inputs float32, bfloat16 or float16. Everything is
computed in float32 and rounded once on store (state to its dtype, out to out's dtype).

Bits: the default path runs the same float32 operations in the same order as the established
upstream Triton kernel (mamba_ssm and the copies serving engines ship): exp, not exp2; softplus
as log(1 + exp(x)) below 20; the row sum over N of state * C, then + D * x, then * z * sigmoid(z).
Launch configs only change how rows are cut into programs. Of a config that sums rows as its
register layout falls (the row sum is a reduction), the GPU tuner measures whether it keeps the
bits; a config with the ordered row sum spells upstream's reduction tree and fmas out and keeps
them by construction (see _rowsum_upstream_order), and the tuner measures it all the same.

Grid: one tile (BLOCK_M rows of one request's head, all N columns) a program, in the upstream
order or slot-major.
"""

from __future__ import annotations

import contextlib
import os

import torch
import triton
import triton.language as tl

from ssmdecode.config import LaunchConfig, lookup_config
from ssmdecode.ops._gdc import gdc_launch_dependents, gdc_wait

__all__ = ["selective_state_update", "slot_order"]

_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_INDEX_DTYPES = (torch.int32, torch.int64)
VALIDATE_INDICES_ENV = "SSMDECODE_VALIDATE_INDICES"


# The row sum over N in the upstream order, spelled out so that no register layout can change it.
# Upstream's default configs all hold 4 consecutive state columns a thread along N (a 16-byte
# fp32 vector, or 4 of 8 bf16 because the tile is that small), so Triton 3.6 reduces each row
# of the product state * C:
#   1. in a thread, its 4 columns left to right, acc = p0, then acc + p1, acc + p2, acc + p3;
#      each add has a product as an operand, and with Triton's default fp fusion LLVM turns
#      it into an fma, fusing the left operand when both are products:
#      fma(s3, C3, fma(s2, C2, fma(s0, C0, p1))), only p1 = s1 * C1 rounded on its own;
#   2. across the lanes of a warp that share the row, a butterfly from the widest distance:
#      lane i adds lane i ^ L/2, then i ^ L/4, ... down to i ^ 1 (L = min(N/4, 32) lanes);
#   3. across warps (N = 256: two warps a row), the two partial sums.
# `_rowsum_upstream_order` computes exactly that tree, with the fmas written out (tl.fma), and
# reshapes and splits that fix every operand whatever layout the compiler picks for the tile:
# a config with 8 elements a thread, or one warp at dstate 256, keeps the upstream bits.
# A tree of plain adds of the products is NOT layout-proof: where a layout conversion sits
# between the multiply and the add, no fma forms (seen on the H200: bits differed by layout).
# Nor is the state update s * dA + dB * x: LLVM fuses it to fma(s, dA, dB * x) in the usual
# layouts, but (32,1) at dstate 64 wrote other state bits on the H200; with the ordered sum the
# kernel writes that fma out too.
# Checked on the H200 against tl.sum in the upstream layout (tests/test_ordered_sum.py), the
# golden digests and the 920-point verify (benchmarks/results/NVIDIA_H200/).
ORDERED_MIN_N = 16
ORDERED_MAX_N = 256


@triton.jit
def _fold_half(s, R: tl.constexpr, W: tl.constexpr, L: tl.constexpr):
    """[R, W, L] -> [R, W, L // 2]: element i plus element i + L // 2 (one butterfly level)."""
    t = tl.permute(tl.reshape(s, (R, W, 2, L // 2)), (0, 1, 3, 2))
    lo, hi = tl.split(t)
    return lo + hi


@triton.jit
def _split4(t, shape: tl.constexpr):
    """The columns 4g, 4g + 1, 4g + 2, 4g + 3 of t (last dim 4 G), each with last dim G."""
    t02, t13 = tl.split(tl.reshape(t, shape))
    t0, t2 = tl.split(t02)
    t1, t3 = tl.split(t13)
    return t0, t1, t2, t3


@triton.jit
def _rowsum_upstream_order(s, c, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           FUSE_LEFT: tl.constexpr = True):
    """sum(s * c[None, :], axis=1) for an fp32 tile s of BLOCK_M rows of BLOCK_N columns
    ([BLOCK_M, BLOCK_N] or grouped [BLOCK_M, BLOCK_N / 4, 4]) and an fp32 vector c of BLOCK_N
    ([BLOCK_N] or [BLOCK_N / 4, 4]), 16 <= BLOCK_N <= 256, in the order and with the fmas of
    the upstream kernel's default configs (see the comment above). FUSE_LEFT=False fuses the
    other product of the first add instead, fma(s1, c1, s0 * c0): not upstream's; the tests
    use it to show that they see the difference."""
    G: tl.constexpr = BLOCK_N // 4  # groups of 4 columns, one per lane upstream
    L: tl.constexpr = 32 if G > 32 else G  # lanes of a warp that share a row
    W: tl.constexpr = G // L  # warps that share a row
    s0, s1, s2, s3 = _split4(s, (BLOCK_M, G, 2, 2))
    c0, c1, c2, c3 = _split4(c, (G, 2, 2))
    if FUSE_LEFT:
        acc = tl.fma(s0, c0[None, :], s1 * c1[None, :])
    else:
        acc = tl.fma(s1, c1[None, :], s0 * c0[None, :])
    acc = tl.fma(s2, c2[None, :], acc)
    acc = tl.fma(s3, c3[None, :], acc)
    acc = tl.reshape(acc, (BLOCK_M, W, L))
    if L >= 32:
        acc = _fold_half(acc, BLOCK_M, W, 32)
    if L >= 16:
        acc = _fold_half(acc, BLOCK_M, W, 16)
    if L >= 8:
        acc = _fold_half(acc, BLOCK_M, W, 8)
    if L >= 4:
        acc = _fold_half(acc, BLOCK_M, W, 4)
    acc = _fold_half(acc, BLOCK_M, W, 2)
    if W == 2:
        w0, w1 = tl.split(tl.reshape(acc, (BLOCK_M, 2)))
        return w0 + w1
    else:
        return tl.reshape(acc, (BLOCK_M,))


# The constexprs the kernel derives from its arguments.
_HEURISTICS = {
    "HAS_DT_BIAS": lambda args: args["p_dt_bias"] is not None,
    "HAS_D": lambda args: args["p_D"] is not None,
    "HAS_Z": lambda args: args["p_z"] is not None,
    "HAS_SRC_IDX": lambda args: args["p_src_idx"] is not None,
    "HAS_DST_IDX": lambda args: args["p_dst_idx"] is not None,
    "HAS_ORDER": lambda args: args["p_order"] is not None,
    "BLOCK_N": lambda args: triton.next_power_of_2(args["dstate"]),
}


@triton.heuristics(_HEURISTICS)
@triton.jit
def _selective_state_update_kernel(
    # pointers
    p_state, p_x, p_dt, p_dt_bias, p_A, p_B, p_C, p_D, p_z, p_out,
    p_src_idx, p_dst_idx, p_order,
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
    # launch knobs
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SLOT_MAJOR: tl.constexpr,
    EVICT_FIRST: tl.constexpr,
    ORDERED_SUM: tl.constexpr,
    PDL: tl.constexpr,  # launched programmatic-dependent: see selective_state_update(pdl=)
    PDL_TRIGGER_FIRST: tl.constexpr,  # let the next kernel launch at the start, else at the end
):
    # One program, one tile: BLOCK_M rows of the head dim of one (request, head), all N columns.
    if PDL and PDL_TRIGGER_FIRST:  # the next kernel may launch; its own wait orders it after us
        gdc_launch_dependents()
    # No runtime division finds the tile: at small batch a program's prologue is on the
    # critical path (docs/performance.md, "The prologue").
    if SLOT_MAJOR:  # grid (P blocks, H, B): a request's [H, P, N] state is read in memory order
        i_m = tl.program_id(0)
        i_h = tl.program_id(1)
        i_b = tl.program_id(2)
    else:  # grid (P blocks, B, H): the upstream order
        i_m = tl.program_id(0)
        i_b = tl.program_id(1)
        i_h = tl.program_id(2)
    if HAS_ORDER:
        i_b = tl.load(p_order + i_b * stride_order)
    i_g = i_h // HEADS_PER_GROUP  # a compile-time divisor: a shift or a multiply
    # Cache hints: each state is touched once per step, so it streams evict-first; the slot
    # indices are read by every layer of a decode step, so they stay (evict-last), which takes
    # the index load off HBM latency before the dependent state load.
    STATE_EVICT: tl.constexpr = "evict_first" if EVICT_FIRST else ""
    INDEX_EVICT: tl.constexpr = "evict_last" if EVICT_FIRST else ""

    if HAS_SRC_IDX:
        i_src = tl.load(p_src_idx + i_b * stride_src_idx, eviction_policy=INDEX_EVICT).to(tl.int64)
    else:
        i_src = i_b.to(tl.int64)
    if HAS_DST_IDX:
        i_dst = tl.load(p_dst_idx + i_b * stride_dst_idx, eviction_policy=INDEX_EVICT).to(tl.int64)
    else:
        i_dst = i_src

    # The state tile: [BLOCK_M, BLOCK_N], or with the ordered row sum [BLOCK_N / 4, BLOCK_M, 4]
    # (groups of 4 columns, rows, a group's columns). Triton lays a tile out by contiguity, and
    # the grouped tile gets upstream's layout for every state dtype: 4 consecutive columns a
    # thread, lanes along the groups (ties in contiguity go to the lower dim, hence the groups
    # first). As a 2-D tile a bf16 state takes 8 columns a thread, a 16-byte vector, and the
    # ordered sum then made the compiler hold whole rows in a thread: 255 registers, spills.
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    if ORDERED_SUM:
        o_n = (tl.arange(0, BLOCK_N // 4)[:, None] * 4 + tl.arange(0, 4)[None, :])[:, None, :]
    else:
        o_n = tl.arange(0, BLOCK_N)
    m_m = o_m < headdim
    m_n = o_n < dstate
    # Masks of the vectors over rows (x, dt, D, z, out) and columns (B, C): None where the tile
    # divides, so that no load waits on a predicate or zero-fills its registers first.
    m_vm = None if EVEN_M and EVEN_VECTORS else m_m
    m_vn = None if EVEN_N and EVEN_VECTORS else m_n
    # Masks of the state tile: rows and columns only where the tile overhangs, the pad slot
    # only with indices; None when nothing can be out of bounds (unpredicated 16-byte accesses).
    m_tile = None
    if not EVEN_M:
        m_tile = _rows(m_m, ORDERED_SUM)
    if not EVEN_N:
        m_tile = _cols(m_n, ORDERED_SUM) if m_tile is None else m_tile & _cols(m_n, ORDERED_SUM)
    m_read = m_tile
    if HAS_SRC_IDX:
        m_read = (i_src != pad_slot_id) if m_tile is None else m_tile & (i_src != pad_slot_id)
    m_write = m_read
    if HAS_DST_IDX:
        m_write = (i_dst != pad_slot_id) if m_write is None else m_write & (i_dst != pad_slot_id)

    if PACKED_ROWS:
        o_base = i_h * stride_state_h + i_m * (BLOCK_M * BLOCK_N)
        o_tile = _rows(tl.arange(0, BLOCK_M), ORDERED_SUM) * BLOCK_N + _cols(o_n, ORDERED_SUM)
        p_src = (p_state + (i_src * stride_state_s + o_base)) + o_tile
        p_dst = (p_state + (i_dst * stride_state_s + o_base)) + o_tile
    else:
        o_tile = (i_h * stride_state_h + _rows(o_m, ORDERED_SUM) * stride_state_p
                  + _cols(o_n, ORDERED_SUM) * stride_state_n)
        p_src = p_state + i_src * stride_state_s + o_tile
        p_dst = p_state + i_dst * stride_state_s + o_tile

    if m_read is None:
        b_state = tl.load(p_src, eviction_policy=STATE_EVICT).to(tl.float32)
    else:
        b_state = tl.load(p_src, mask=m_read, other=0.0, eviction_policy=STATE_EVICT).to(tl.float32)
    if PDL:  # the slot indices and the state are in flight; the rest waits for the kernel before
        gdc_wait()
    b_x = _load(p_x + i_b * stride_x_b + i_h * stride_x_h + o_m * stride_x_p, m_vm).to(tl.float32)
    if TIE_HDIM:
        b_dt = tl.load(p_dt + i_b * stride_dt_b + i_h * stride_dt_h).to(tl.float32)
        if HAS_DT_BIAS:
            b_dt += tl.load(p_dt_bias + i_h * stride_dt_bias_h).to(tl.float32)
        if DT_SOFTPLUS:
            b_dt = tl.where(b_dt <= 20.0, tl.log(tl.exp(b_dt) + 1), b_dt)
        b_A = tl.load(p_A + i_h * stride_A_h).to(tl.float32)
        b_dA = tl.exp(b_A * b_dt)
    else:
        b_dt = _load(p_dt + i_b * stride_dt_b + i_h * stride_dt_h + o_m * stride_dt_p,
                     m_vm).to(tl.float32)
        if HAS_DT_BIAS:
            b_dt += _load(p_dt_bias + i_h * stride_dt_bias_h + o_m * stride_dt_bias_p,
                          m_vm).to(tl.float32)
        if DT_SOFTPLUS:
            b_dt = tl.where(b_dt <= 20.0, tl.log(tl.exp(b_dt) + 1), b_dt)
        b_A = tl.load(p_A + i_h * stride_A_h + _rows(o_m, ORDERED_SUM) * stride_A_p
                      + _cols(o_n, ORDERED_SUM) * stride_A_n,
                      mask=_rows(m_m, ORDERED_SUM) & _cols(m_n, ORDERED_SUM),
                      other=0.0).to(tl.float32)
        b_dA = tl.exp(b_A * _rows(b_dt, ORDERED_SUM))
    b_B = _load(p_B + i_b * stride_B_b + i_g * stride_B_g + o_n * stride_B_n, m_vn).to(tl.float32)
    b_C = _load(p_C + i_b * stride_C_b + i_g * stride_C_g + o_n * stride_C_n, m_vn).to(tl.float32)
    if HAS_D:
        b_D = _load(p_D + i_h * stride_D_h + o_m * stride_D_p, m_vm).to(tl.float32)
    if HAS_Z:
        b_z = _load(p_z + i_b * stride_z_b + i_h * stride_z_h + o_m * stride_z_p, m_vm).to(tl.float32)

    # The same operations, in the same order, as the upstream kernel: keep them so.
    if TIE_HDIM:
        b_dB = b_B * b_dt
    else:
        b_dB = _cols(b_B, ORDERED_SUM) * _rows(b_dt, ORDERED_SUM)
    if ORDERED_SUM:  # the fma LLVM forms from the line below, written out: layout-proof
        b_state = tl.fma(b_state, b_dA, b_dB * _rows(b_x, ORDERED_SUM))
    else:
        b_state = b_state * b_dA + b_dB * _rows(b_x, ORDERED_SUM)
    if WRITE_STATE:
        tl.store(p_dst, b_state.to(p_state.dtype.element_ty), mask=m_write,
                 eviction_policy=STATE_EVICT)
    if ORDERED_SUM:
        b_out = _rowsum_upstream_order(tl.permute(b_state, (1, 0, 2)), b_C, BLOCK_M, BLOCK_N)
    else:
        b_out = tl.sum(b_state * b_C[None, :], axis=1)
    if HAS_D:
        b_out += b_x * b_D
    if HAS_Z:
        b_out *= b_z * tl.sigmoid(b_z)
    if HAS_SRC_IDX:
        b_out = tl.where(i_src != pad_slot_id, b_out, 0.0)
    tl.store(p_out + i_b * stride_out_b + i_h * stride_out_h + o_m * stride_out_p, b_out, mask=m_vm)
    if PDL and not PDL_TRIGGER_FIRST:
        gdc_launch_dependents()


@triton.jit
def _load(p, mask):
    """tl.load, masked with 0 for what lies outside, or unmasked where mask is None."""
    if mask is None:
        return tl.load(p)
    else:
        return tl.load(p, mask=mask, other=0.0)


@triton.jit
def _rows(v, GROUPED: tl.constexpr):
    """A [BLOCK_M] vector over the rows, broadcastable over the tile: [BLOCK_M, 1], or
    [1, BLOCK_M, 1] for the grouped tile of the ordered sum."""
    if GROUPED:
        return v[None, :, None]
    else:
        return v[:, None]


@triton.jit
def _cols(v, GROUPED: tl.constexpr):
    """A vector over the columns ([BLOCK_N], or [BLOCK_N / 4, 1, 4] grouped), broadcastable
    over the tile."""
    if GROUPED:
        return v
    else:
        return v[None, :]


def _launch(
    state: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
    C: torch.Tensor, D: torch.Tensor | None, z: torch.Tensor | None, dt_bias: torch.Tensor | None,
    out: torch.Tensor, src_idx: torch.Tensor | None, dst_idx: torch.Tensor | None,
    pad_slot_id: int, dt_softplus: bool, tie_hdim: bool, write_state: bool, config: LaunchConfig,
    pdl: bool = False, order: torch.Tensor | None = None,
) -> None:
    """Grid and launch, all tensors in the Mamba2 layout (state [S,H,P,N], x [B,H,P], ...)."""
    batch, nheads, headdim = x.shape
    dstate = state.shape[-1]
    ngroups = B.shape[1]
    block_n = triton.next_power_of_2(dstate)
    even_m = headdim % config.block_m == 0
    even_n = dstate == block_n
    if config.ordered_sum and not ORDERED_MIN_N <= block_n <= ORDERED_MAX_N:
        raise ValueError(
            f"config {config.label} sums rows in the upstream order, which is defined for "
            f"{ORDERED_MIN_N} <= dstate <= {ORDERED_MAX_N}; got dstate {dstate}"
        )
    n_mblocks = triton.cdiv(headdim, config.block_m)

    def strides(t: torch.Tensor | None, ndim: int) -> tuple[int, ...]:
        return t.stride() if t is not None else (0,) * ndim

    args = (
        state, x, dt, dt_bias, A, B, C, D, z, out, src_idx, dst_idx,
        order,
        headdim, dstate, pad_slot_id,
        *state.stride(), *x.stride(), *dt.stride(), *strides(dt_bias, 2), *A.stride(),
        *B.stride(), *C.stride(), *strides(D, 2), *strides(z, 3), *out.stride(),
        *strides(src_idx, 1), *strides(dst_idx, 1),
        1 if order is None else order.stride(0),  # 1: a constant, no kernel argument
    )
    flags = dict(
        HEADS_PER_GROUP=nheads // ngroups,
        DT_SOFTPLUS=dt_softplus,
        TIE_HDIM=tie_hdim,
        WRITE_STATE=write_state,
        EVEN_M=even_m and _EVEN_TILES,
        EVEN_N=even_n and _EVEN_TILES,
        PACKED_ROWS=_PACKED_ROWS and state.stride(-1) == 1 and state.stride(-2) == block_n,
        EVEN_VECTORS=_EVEN_VECTORS,
        BLOCK_M=config.block_m,
        EVICT_FIRST=config.evict_first,
        ORDERED_SUM=config.ordered_sum,
        PDL=pdl,
        PDL_TRIGGER_FIRST=_PDL_TRIGGER_FIRST,
        num_warps=config.num_warps,
    )
    if pdl:
        flags["launch_pdl"] = True
    if config.max_registers is not None:
        flags["maxnreg"] = config.max_registers
    grid = (n_mblocks, nheads, batch) if config.slot_major else (n_mblocks, batch, nheads)
    _selective_state_update_kernel[grid](*args, **flags, SLOT_MAJOR=config.slot_major)


# With pdl: when each program lets the next kernel launch. First (at its start), the next
# kernel's programs can take a multiprocessor as soon as one frees up in this kernel's last
# wave; last (after its stores), they launch once every program of this one has run. A switch
# only so that an exploration can measure which pays (benchmarks/explore.py --pdl-trigger).
_PDL_TRIGGER_FIRST = True

# Address the state tile from one base pointer a program (the slot, head and row block) plus
# offsets known at compile time, where the state's rows are packed (each row BLOCK_N contiguous
# words, as in every pool engines allocate): same addresses, but ptxas then folds each 16-byte
# access's offset into the instruction, so the loads issue as soon as the slot index arrives and
# the tile's addresses take 2 registers instead of 2 per access. A switch only so that an
# exploration can measure what it is worth (benchmarks/explore.py --packed-rows).
_PACKED_ROWS = True

# Drop the tile masks where the tile divides the state (same bits; fewer predicates). A switch
# only so that an exploration can measure what it is worth (benchmarks/explore.py --masks).
_EVEN_TILES = True

# Drop the masks of the vectors (x, dt, D, z, out over the rows; B, C over the columns) where
# the tile divides: their loads then neither wait on a predicate nor zero-fill registers first.
# Same bits. A switch only so that an exploration can measure what it is worth
# (benchmarks/explore.py --switch _EVEN_VECTORS).
_EVEN_VECTORS = True

# The boolean switches above whose off position is the general (or the earlier) code with the
# same bits: the explorations time them on and off (benchmarks/explore.py --switch,
# explore_step.py --switch, compile_info.py --off).
SWITCHES = ("_EVEN_TILES", "_PACKED_ROWS", "_EVEN_VECTORS")

# The batch is a grid dimension (y or z), which CUDA caps at 65535.
_MAX_BATCH = 65535


def _check_tensor(name: str, t: object, shape: tuple[int, ...], dtypes: tuple[torch.dtype, ...],
                  device: torch.device, what: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(f"{name} has dtype {t.dtype}; expected one of {names}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {shape} {what}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}; expected {device}, the device of state")


def _validate_index_values(name: str, idx: torch.Tensor, slots: int, pad_slot_id: int) -> None:
    values = idx.cpu()  # synchronizes: only on request
    bad = ((values < 0) | (values >= slots)) & (values != pad_slot_id)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"{name}[{row}] = {int(values[row])} is outside the state pool [0, {slots}) "
            f"and is not pad_slot_id ({pad_slot_id})"
        )


def _validate_permutation(order: torch.Tensor) -> None:
    values = order.cpu()  # synchronizes: only on request
    n = len(values)
    if not torch.equal(values.sort().values, torch.arange(n, dtype=values.dtype)):
        in_range = (values >= 0) & (values < n)
        seen = torch.bincount(values.where(in_range, n), minlength=n + 1)
        missing = int((seen[:n] == 0).nonzero()[0, 0])
        raise ValueError(f"batch_order is not a permutation of the {n} batch rows: "
                         f"row {missing} is missing")


@triton.jit
def _slot_order_kernel(p_slots, p_order, n, stride_slots, BLOCK: tl.constexpr):
    # One program sorts keys slot * BLOCK + row (unique, so the order is stable; exact for
    # |slot| < 2^63 / BLOCK, at least 2^50) and keeps the rows: the key's low bits, whatever
    # the sign of the slot (BLOCK is a power of two). Lanes past n sort last.
    o_row = tl.arange(0, BLOCK)
    m_row = o_row < n
    b_slot = tl.load(p_slots + o_row * stride_slots, mask=m_row, other=0).to(tl.int64)
    b_key = tl.where(m_row, b_slot * BLOCK + o_row, 9223372036854775807)
    b_row = (tl.sort(b_key) & (BLOCK - 1)).to(tl.int32)
    tl.store(p_order + o_row, b_row, mask=m_row)


def _interpreted() -> bool:
    """Whether this module's kernels run under Triton's interpreter (TRITON_INTERPRET=1 when
    they were defined, at import): only then can they take CPU tensors."""
    return not isinstance(_slot_order_kernel, triton.runtime.jit.JITFunction)


_SLOT_ORDER_MAX_BLOCK = 8192  # one program's sort; larger batches use torch.argsort


def slot_order(state_batch_indices: torch.Tensor) -> torch.Tensor:
    """The batch rows in ascending order of their state slots (int32 [B]), for
    selective_state_update(batch_order=...): a slot-major config then reads the state pool in
    memory order. The slots are the same for every layer of a decode step, so compute it once
    per step. Rows of equal slots (padding) keep their order; pad_slot_id -1 sorts first.
    Slots must lie within +-2^50 (the sort keys are int64).

    One small Triton kernel (a sort in one program) up to 8192 rows: torch.argsort takes a
    radix sort of several kernels, which cost a decode step about as much as slot order
    saved at batch 512 (docs/performance.md). CPU slots take torch.argsort unless the kernels
    run under Triton's interpreter."""
    if not isinstance(state_batch_indices, torch.Tensor) or state_batch_indices.dim() != 1:
        raise TypeError("state_batch_indices must be a 1-D torch.Tensor of slots")
    if state_batch_indices.dtype not in _INDEX_DTYPES:
        raise TypeError(f"state_batch_indices has dtype {state_batch_indices.dtype}; expected "
                        "int32 or int64")
    n = state_batch_indices.shape[0]
    on_gpu = state_batch_indices.is_cuda  # CPU tensors: the interpreter; no CUDA API
    if n == 0 or n > _SLOT_ORDER_MAX_BLOCK or not (on_gpu or _interpreted()):
        return torch.argsort(state_batch_indices, stable=True).to(torch.int32)
    order = torch.empty(n, dtype=torch.int32, device=state_batch_indices.device)
    block = max(16, triton.next_power_of_2(n))
    with torch.cuda.device(state_batch_indices.device) if on_gpu else contextlib.nullcontext():
        _slot_order_kernel[(1,)](state_batch_indices, order, n, state_batch_indices.stride(0),
                                 BLOCK=block, num_warps=4 if block <= 1024 else 8)
    return order


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
    dst_state_batch_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
    out: torch.Tensor | None = None,
    disable_state_update: bool = False,
    config: LaunchConfig | None = None,
    *,
    validate_indices: bool | None = None,
    pdl: bool = False,
    batch_order: torch.Tensor | None = None,
) -> torch.Tensor:
    """One decode step of a Mamba1 or Mamba2 SSM layer; updates ``state`` in place.

    Args:
        state: the state pool, [S, H, P, N] (Mamba2) or [S, P, N] (Mamba1); float32, bfloat16
            or float16. Updated in place.
        x: [B, H, P] or [B, P]. dt: like x. A: [H, P, N] or [P, N] (float32 as a rule).
        B, C: [B, G, N] with G dividing H, or [B, N]. D, dt_bias: [H, P] or [P], or None.
        z: like x, or None (no gating).
        dt_softplus: apply softplus to dt + dt_bias.
        state_batch_indices: int32/int64 [B], the slot each row reads (default: row b reads
            slot b, which needs S >= B).
        dst_state_batch_indices: int32/int64 [B], the slot each row writes (default: the slot
            it reads).
        pad_slot_id: a row whose state_batch_indices entry equals it reads and writes no slot
            and gets zeros in out; a row whose dst entry equals it writes no slot.
        out: preallocated [B, H, P] / [B, P] output (any strides); default: new, x's dtype.
        disable_state_update: compute out and write no state.
        config: force a LaunchConfig; default: this device's table, else the built-in default.
        validate_indices: check that every index lies in [0, S) or equals pad_slot_id. Off by
            default because it synchronizes with the GPU; the environment variable
            SSMDECODE_VALIDATE_INDICES=1 turns it on. Unchecked indices out of range read and
            write out of bounds. Also checks that batch_order is a permutation.
        pdl: programmatic dependent launch (CUDA, compute capability 9.0 and newer): the kernel
            may start while the kernel before it in the stream is still running, and loads
            batch_order, the slot indices and the state slots before that kernel has
            finished; everything else (x, dt, A, B, C, D, z, dt_bias, and every store) waits
            for it. So the kernel launched just before must not write batch_order, the
            indices or the state slots this call reads (in a model it is another op's kernel,
            which holds; compute slot_order before the layers, not right before a call). Hides the
            launch and the index-then-state latency at small batch. Same bits either way.
            Ignored for CPU tensors (the interpreter runs one kernel at a time).
        batch_order: int32/int64 [B], a permutation of the batch rows: the kernel's programs
            take the rows in this order instead of 0, 1, 2, ... Same bits in any order (each
            row's arithmetic is its own); only which state slots are read side by side
            changes. `slot_order(state_batch_indices)`, computed once per decode step and
            passed to every layer, has slot-major configs walk the state pool in memory order,
            which pays when the batch fills much of the pool (docs/performance.md). Checked
            to be a permutation only with validate_indices: any other order leaves rows of
            out unwritten, updates a repeated row twice, and reads out of bounds for entries
            outside [0, B).

    Returns:
        out.

    Raises:
        TypeError / ValueError naming the argument, what it got and what was expected, before
        anything is written.
    """
    if not isinstance(state, torch.Tensor):
        raise TypeError(f"state must be a torch.Tensor, got {type(state).__name__}")
    if state.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"state has dtype {state.dtype}; expected float32, bfloat16 or float16")
    if state.dim() not in (3, 4):
        raise ValueError(
            f"state has shape {tuple(state.shape)}; expected [S, H, P, N] (Mamba2) or [S, P, N] (Mamba1)"
        )
    mamba1 = state.dim() == 3
    if mamba1:
        slots, headdim, dstate = state.shape
        nheads = 1
    else:
        slots, nheads, headdim, dstate = state.shape
    device = state.device
    if device.type != "cuda" and not _interpreted():
        raise ValueError(
            f"state is on {device}, but Triton compiles for the GPU here: CPU tensors run only "
            "under Triton's interpreter (TRITON_INTERPRET=1 set before ssmdecode is imported)"
        )
    layout = "Mamba1" if mamba1 else "Mamba2"
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != state.dim() - 1:
        raise ValueError(
            f"x has shape {tuple(x.shape)}; expected {'[B, P]' if mamba1 else '[B, H, P]'} "
            f"for the {layout} state of shape {tuple(state.shape)}"
        )
    batch = x.shape[0]
    if batch > _MAX_BATCH:
        raise ValueError(f"x has {batch} rows; one call takes at most {_MAX_BATCH} (a grid "
                         "dimension of the kernel): split the batch")
    if not isinstance(B, torch.Tensor):
        raise TypeError(f"B must be a torch.Tensor, got {type(B).__name__}")
    if B.dim() != (2 if mamba1 else 3):
        raise ValueError(
            f"B has shape {tuple(B.shape)}; expected {'[B, N]' if mamba1 else '[B, G, N]'} "
            f"for the {layout} layout"
        )
    ngroups = 1 if mamba1 else B.shape[1]
    if ngroups < 1 or nheads % ngroups:
        raise ValueError(f"B has {ngroups} groups, which does not divide the {nheads} heads of state")

    if mamba1:  # the caller's layout: no head and group dims
        xs, a_shape, b_shape, d_shape = (batch, headdim), (headdim, dstate), (batch, dstate), (headdim,)
    else:
        xs, a_shape = (batch, nheads, headdim), (nheads, headdim, dstate)
        b_shape, d_shape = (batch, ngroups, dstate), (nheads, headdim)
    _check_tensor("x", x, xs, _FLOAT_DTYPES, device, "(batch, heads, head dim of state)")
    for name, t in (("dt", dt), ("z", z), ("out", out)):
        if t is not None or name == "dt":
            _check_tensor(name, t, xs, _FLOAT_DTYPES, device, "(the shape of x)")
    _check_tensor("A", A, a_shape, _FLOAT_DTYPES, device, "(heads, head dim, state dim)")
    _check_tensor("B", B, b_shape, _FLOAT_DTYPES, device, "(batch, groups, state dim)")
    _check_tensor("C", C, b_shape, _FLOAT_DTYPES, device, "(the shape of B)")
    for name, t in (("D", D), ("dt_bias", dt_bias)):
        if t is not None:
            _check_tensor(name, t, d_shape, _FLOAT_DTYPES, device, "(heads, head dim)")
    for name, idx in (("state_batch_indices", state_batch_indices),
                      ("dst_state_batch_indices", dst_state_batch_indices)):
        if idx is not None:
            _check_tensor(name, idx, (batch,), _INDEX_DTYPES, device, "(one slot per batch row)")
    if state_batch_indices is None:
        if dst_state_batch_indices is not None:
            raise ValueError("dst_state_batch_indices needs state_batch_indices")
        if slots < batch:
            raise ValueError(
                f"state has {slots} slots but x has batch {batch}; without state_batch_indices "
                "row b uses slot b, so the pool needs at least batch slots"
            )
    if config is not None and not isinstance(config, LaunchConfig):
        raise TypeError(f"config must be a LaunchConfig or None, got {type(config).__name__}")
    if batch_order is not None:
        _check_tensor("batch_order", batch_order, (batch,), _INDEX_DTYPES, device,
                      "(a permutation of the batch rows)")
    if not isinstance(pdl, bool):
        raise TypeError(f"pdl must be a bool, got {type(pdl).__name__}")
    pdl = pdl and device.type == "cuda"
    if pdl and (gdc_wait is None or torch.cuda.get_device_capability(device)[0] < 9):
        raise ValueError(
            f"pdl=True needs a GPU of compute capability 9.0 or newer and Triton >= 3.3; "
            f"got {torch.cuda.get_device_name(device)} "
            f"({'.'.join(map(str, torch.cuda.get_device_capability(device)))}), "
            f"Triton {triton.__version__}"
        )
    if validate_indices is None:
        validate_indices = os.environ.get(VALIDATE_INDICES_ENV, "0") not in ("", "0")
    if validate_indices:
        for name, idx in (("state_batch_indices", state_batch_indices),
                          ("dst_state_batch_indices", dst_state_batch_indices)):
            if idx is not None:
                _validate_index_values(name, idx, slots, pad_slot_id)
        if batch_order is not None:
            _validate_permutation(batch_order)

    if out is None:
        out = torch.empty(xs, dtype=x.dtype, device=device)
    if batch == 0:
        return out
    result = out
    if mamba1:  # run as Mamba2 with one head and one group
        state, x, dt, A, B, C = (state.unsqueeze(1), x.unsqueeze(1), dt.unsqueeze(1),
                                 A.unsqueeze(0), B.unsqueeze(1), C.unsqueeze(1))
        D, z, dt_bias, out = _unsq(D, 0), _unsq(z, 1), _unsq(dt_bias, 0), out.unsqueeze(1)
    if config is None:
        config = lookup_config(headdim, dstate, state.dtype, batch, device)
    tie_hdim = ties_head_dim(dt, A, dt_bias)
    args = (state, x, dt, A, B, C, D, z, dt_bias, out, state_batch_indices, dst_state_batch_indices,
            pad_slot_id, dt_softplus, tie_hdim, not disable_state_update, config)
    if device.type == "cuda":
        with torch.cuda.device(device):
            _launch(*args, pdl=pdl, order=batch_order)
    else:  # CPU tensors: Triton's interpreter; no CUDA API may be touched
        _launch(*args, order=batch_order)
    return result


def ties_head_dim(dt: torch.Tensor, A: torch.Tensor, dt_bias: torch.Tensor | None) -> bool:
    """Whether dt, A (and dt_bias) are stride-0 broadcasts over the head dim (and A over N), as
    real models pass them: then dt' and dA are one scalar per (request, head), the kernels'
    TIE_HDIM fast path (upstream's too). Tensors in the Mamba2 layout."""
    return (dt.stride(-1) == 0 and A.stride(-1) == 0 and A.stride(-2) == 0
            and (dt_bias is None or dt_bias.stride(-1) == 0))


def _unsq(t: torch.Tensor | None, dim: int) -> torch.Tensor | None:
    """Insert the Mamba2 head dim into an optional Mamba1 tensor."""
    return None if t is None else t.unsqueeze(dim)
