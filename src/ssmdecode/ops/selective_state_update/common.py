"""The @triton.jit helpers every kernel of the family shares, so that every mode computes each
value with the same operations in the same order, and so keeps the same bits.

The row sum over N in the upstream order
----------------------------------------
Upstream's default configs all hold 4 consecutive state columns a thread along N (a 16-byte
fp32 vector, or 4 of 8 bf16 because the tile is that small), so Triton 3.6 reduces each row of
the product state * C:

1. in a thread, its 4 columns left to right, acc = p0, then acc + p1, acc + p2, acc + p3; each
   add has a product as an operand, and with Triton's default fp fusion LLVM turns it into an
   fma, fusing the left operand when both are products: fma(s3, C3, fma(s2, C2, fma(s0, C0,
   p1))), only p1 = s1 * C1 rounded on its own;
2. across the lanes of a warp that share the row, a butterfly from the widest distance: lane i
   adds lane i ^ L/2, then i ^ L/4, ... down to i ^ 1 (L = min(N/4, 32) lanes);
3. across warps (N = 256: two warps a row), the two partial sums.

`rowsum_upstream_order` computes exactly that tree, with the fmas written out (tl.fma), and
reshapes and splits that fix every operand whatever layout the compiler picks for the tile: a
config with 8 elements a thread, or one warp at dstate 256, keeps the upstream bits. A tree of
plain adds of the products is NOT layout-proof: where a layout conversion sits between the
multiply and the add, no fma forms (seen on the H200: bits differed by layout). Nor is the state
update s * dA + dB * x: LLVM fuses it to fma(s, dA, dB * x) in the usual layouts, but (32,1) at
dstate 64 wrote other state bits on the H200; with the ordered sum the kernels write that fma
out too (`state_step`). Checked on the H200 against tl.sum in the upstream layout
(tests/test_ordered_sum.py), the golden digests (tests/test_golden.py) and the 920-point verify
(benchmarks/results/NVIDIA_H200/verify*/).

Stochastic rounding
-------------------
With a seed (`rand_seed`), a store of a state into a float16 or bfloat16 tensor rounds each
element up or down at random, up with probability equal to the distance from the value below
in units of the gap between the two, so that the rounded state is the exact one on average
(its error unbiased, where round-to-nearest's repeats the same way step after step). The bits:
Philox2x32 (Random123's philox2x32, `PHILOX_ROUNDS` rounds, 4 by default, each round one 32x32
-> 64-bit multiply and one xor) keyed by the seed's two halves XORed, one call per 4 columns of
a state row: counter (row offset's low word, its next 16 bits | n // 4 << 16 | stream << 31),
where the row offset is the offset of the row's first element in the tensor written (from its
strides) and the stream tells the tensors of one call apart (STREAM_STATE, STREAM_BUFFER).
Column 4g + k takes its random bits from word k // 2 of call g: a bf16 element 16 (bits 0-15 of
the word for an even k, 16-31 for an odd one), an fp16 element 13 (bits 0-12 for an even k,
19-31 for an odd one: one mask or one shift an element, where the top 13 of the 16 took a
shift and a mask; docs/numerics.md). Every layout the kernels use holds 4 consecutive columns
of a row in one thread, so the bits are the same whatever the launch config and no random bits
move between threads (Philox4x32 a call per 8 columns, the first design, needed one call's
words in two threads: 24% slower than round-to-nearest, run 62). The store is then an add and
a conversion an element, the random bits masked off the values of the last case below: a
compare an element for bf16 (_below), a packed compare a pair for fp16, whose two columns of
a word are masked together (_finite_f16_pairs); what each piece costs on the H200 is in
docs/numerics.md.
Rounding the fp32 value v (naive.stochastic_round reproduces it bit for bit):

- bfloat16: v's bits plus the element's 16 random bits, converted toward zero (bf16 is fp32's
  upper half, subnormals included, so that conversion cuts the low 16 bits);
- float16: the same on v * 2^-112, whose bits hold fp16's value where fp32 holds a number's
  (exponent, the top 10 fraction bits, and fp16's subnormals as fp32's), with the element's
  13 random bits, the scale undone (exactly), converted toward zero;
- NaN, the infinities and magnitudes from the largest finite value of the type up (about
  3.39e38 for bf16, 65504 for fp16) are converted toward zero: themselves, or that largest
  value; float32 targets unchanged.

Software only: the sm_100 instruction cvt.rs (what sglang's and vLLM's fp16 paths use) draws
its random bits otherwise and cannot be checked on the GPUs measured here.

Tiles
-----
The state tile is [BLOCK_M, BLOCK_N], or with the ordered row sum grouped [BLOCK_N / 4,
BLOCK_M, 4] (groups of 4 columns, rows, a group's columns): Triton lays a tile out by
contiguity, and the grouped tile gets upstream's layout for every state dtype (4 consecutive
columns a thread, lanes along the groups; ties in contiguity go to the lower dim, hence the
groups first). As a 2-D tile a bf16 state takes 8 columns a thread, a 16-byte vector, and the
ordered sum then made the compiler hold whole rows in a thread: 255 registers, spills.
`rows` and `cols` broadcast a vector over the rows or the columns of either tile.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ssmdecode.ops._gdc import gdc_launch_dependents, gdc_wait
from ssmdecode.ops.selective_state_update.checks import interpreted

__all__ = [
    "ORDERED_MAX_N",
    "ORDERED_MIN_N",
    "STREAM_BUFFER",
    "STREAM_STATE",
    "both",
    "col_offsets",
    "cols",
    "exp_dA",
    "gated_out",
    "live_mask",
    "load",
    "load_index",
    "load_state",
    "program_tile",
    "row_sums",
    "rows",
    "rowsum_upstream_order",
    "slot_index",
    "softplus",
    "start_program",
    "state_step",
    "store_state",
    "stored",
    "tile_addressing",
    "tile_mask",
    "tile_offsets",
    "token_span",
    "unless",
    "wait_prior",
]

# The state dims (powers of two) the ordered row sum is defined for.
ORDERED_MIN_N = 16
ORDERED_MAX_N = 256

# The Philox streams of stochastic rounding: one for the state pool (final states, per-token
# slots, replay's flushes), one for the intermediate-state buffer.
STREAM_STATE = tl.constexpr(0)
STREAM_BUFFER = tl.constexpr(1)

# vLLM's fast_exp: exp(x) as exp2(log2(e) * x), one ex2.approx instruction (another rounding).
_LOG2E = tl.constexpr(1.4426950408889634)


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


# fmt: off
@triton.jit
def rowsum_upstream_order(s, c, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          FUSE_LEFT: tl.constexpr = True):
    """sum(s * c[None, :], axis=1) for an fp32 tile s of BLOCK_M rows of BLOCK_N columns
    ([BLOCK_M, BLOCK_N] or grouped [BLOCK_M, BLOCK_N / 4, 4]) and an fp32 vector c of BLOCK_N
    ([BLOCK_N] or [BLOCK_N / 4, 4]), 16 <= BLOCK_N <= 256, in the order and with the fmas of
    the upstream kernel's default configs (see the module docstring). FUSE_LEFT=False fuses
    the other product of the first add instead, fma(s1, c1, s0 * c0): not upstream's; the
    tests use it to show that they see the difference."""
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
# fmt: on


@triton.jit
def load(p, mask):
    """tl.load, masked with 0 for what lies outside, or unmasked where mask is None."""
    if mask is None:
        return tl.load(p)
    else:
        return tl.load(p, mask=mask, other=0.0)


@triton.jit
def rows(v, GROUPED: tl.constexpr):
    """A [BLOCK_M] vector over the rows, broadcastable over the tile: [BLOCK_M, 1], or
    [1, BLOCK_M, 1] for the grouped tile of the ordered sum."""
    if GROUPED:
        return v[None, :, None]
    else:
        return v[:, None]


@triton.jit
def cols(v, GROUPED: tl.constexpr):
    """A vector over the columns ([BLOCK_N], or [BLOCK_N / 4, 1, 4] grouped), broadcastable
    over the tile."""
    if GROUPED:
        return v
    else:
        return v[None, :]


@triton.jit
def program_tile(SLOT_MAJOR: tl.constexpr):
    """(i_m, i_b, i_h): this program's row block, request and head. SLOT_MAJOR: grid
    (P blocks, H, B), so that a request's [H, P, N] state is read in memory order; else
    (P blocks, B, H), the upstream order. No runtime division finds them: at small batch a
    program's prologue is on the critical path (docs/performance.md, "The prologue")."""
    i_m = tl.program_id(0)
    if SLOT_MAJOR:
        i_h = tl.program_id(1)
        i_b = tl.program_id(2)
    else:
        i_b = tl.program_id(1)
        i_h = tl.program_id(2)
    return i_m, i_b, i_h


@triton.jit
def col_offsets(BLOCK_N: tl.constexpr, GROUPED: tl.constexpr):
    """The column indices 0 .. BLOCK_N - 1 of the tile: [BLOCK_N], or [BLOCK_N / 4, 1, 4]
    grouped (column 4g + j at [g, 0, j])."""
    if GROUPED:
        return (tl.arange(0, BLOCK_N // 4)[:, None] * 4 + tl.arange(0, 4)[None, :])[:, None, :]
    else:
        return tl.arange(0, BLOCK_N)


# The prologue and the epilogue of a tile program, as every kernel of the family runs them: the
# same operations in the same order, so that a kernel written with them keeps its instructions.
# A mask is None where nothing can be out of bounds, so that the access is unpredicated; the
# helpers that build one return nothing there (a jit function's return value cannot be None).


@triton.jit
def start_program(SLOT_MAJOR: tl.constexpr, PDL: tl.constexpr):
    """(i_m, i_b, i_h), program_tile's; launched programmatic-dependent (PDL), first let the
    next kernel launch at once (its own wait orders it after this one)."""
    if PDL:
        gdc_launch_dependents()
    return program_tile(SLOT_MAJOR)


@triton.jit
def wait_prior(PDL: tl.constexpr):
    """With PDL, wait for the kernel before (its writes): each kernel issues the slot indices'
    and the state's loads first, and waits here before it reads anything else."""
    if PDL:
        gdc_wait()


@triton.jit
def load_index(p, EVICT_FIRST: tl.constexpr):
    """An index at p, as int64. With the cache hints (EVICT_FIRST) evict-last: the slot indices
    are read by every layer of a decode step, so keeping them in L2 takes the index load off HBM
    latency before the dependent state load."""
    INDEX_EVICT: tl.constexpr = "evict_last" if EVICT_FIRST else ""
    return tl.load(p, eviction_policy=INDEX_EVICT).to(tl.int64)


@triton.jit
def slot_index(p_idx, offset, default, HAS_IDX: tl.constexpr, EVICT_FIRST: tl.constexpr):
    """The slot a request names at p_idx + offset (load_index), or default without indices."""
    if HAS_IDX:
        return load_index(p_idx + offset, EVICT_FIRST)
    else:
        return default


@triton.jit
def token_span(
    p_cu_seqlens, i_b, total_tokens, T: tl.constexpr, VARLEN: tl.constexpr, AT_MOST_T: tl.constexpr
):
    """(t0, n_tok, i_xb): request i_b's tokens are x[i_xb, t0 + t] for t < n_tok. Packed
    (VARLEN, i_xb 0), cu_seqlens[i_b] .. cu_seqlens[i_b + 1] clamped to the total_tokens of x,
    so that no cu_seqlens can read or write outside x and out, with AT_MOST_T at most T of
    them (the kernels return at once for a request of none); dense, row i_b's T tokens."""
    if VARLEN:
        bos = tl.load(p_cu_seqlens + i_b).to(tl.int64)
        eos = tl.load(p_cu_seqlens + i_b + 1).to(tl.int64)
        bos = tl.minimum(tl.maximum(bos, 0), total_tokens)
        eos = tl.minimum(tl.maximum(eos, bos), total_tokens)
        n_tok = eos - bos
        if AT_MOST_T:
            n_tok = tl.minimum(n_tok, T)
        return bos, n_tok, 0
    else:
        return 0, T, i_b


@triton.jit
def live_mask(i_slot, pad_slot_id, HAS_SRC_IDX: tl.constexpr):
    """Whether the request's slot is a real one (not pad_slot_id): None without indices."""
    if HAS_SRC_IDX:
        return i_slot != pad_slot_id


@triton.jit
def tile_offsets(i_m, headdim, dstate, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUPED: tl.constexpr):
    """(o_m, o_n, m_m, m_n): the rows of the head dim this program holds [BLOCK_M], the tile's
    columns (col_offsets), and which of each lie inside headdim and dstate."""
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    o_n = col_offsets(BLOCK_N, GROUPED)
    return o_m, o_n, o_m < headdim, o_n < dstate


@triton.jit
def unless(EVEN: tl.constexpr, m):
    """The mask m, or None (no mask) where EVEN says the tile divides: the loads of the
    vectors over rows (x, dt, D, z, out) and columns (B, C) then neither wait on a predicate nor
    zero-fill their registers first."""
    if not EVEN:
        return m


@triton.jit
def tile_mask(m_m, m_n, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, GROUPED: tl.constexpr):
    """The mask of the state tile from its rows' and columns' masks: only where the tile
    overhangs, None where nothing can be out of bounds (unpredicated 16-byte accesses)."""
    if not EVEN_M:
        if EVEN_N:
            return rows(m_m, GROUPED)
        else:
            return rows(m_m, GROUPED) & cols(m_n, GROUPED)
    elif not EVEN_N:
        return cols(m_n, GROUPED)


@triton.jit
def both(a, b):
    """a & b of two masks, either of them None (nothing masked)."""
    if a is None:
        if b is not None:
            return b
    elif b is None:
        return a
    else:
        return a & b


@triton.jit
def tile_addressing(
    o_slot,
    i_h,
    i_m,
    o_m,
    o_n,
    stride_h,
    stride_p,
    stride_n,
    PACKED_ROWS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUPED: tl.constexpr,
):
    """(o_base, o_tile): the tile of head i_h's rows o_m at o_slot + o_base + o_tile of a state
    tensor whose slot starts at o_slot. Packed rows (stride 1 over N, BLOCK_N over P): one base
    a program plus offsets known at compile time, which ptxas folds into each 16-byte access (2
    address registers instead of 2 an access; docs/performance.md, "Packed state rows"); else
    the runtime strides. A kernel adds the slot's offset to o_base, then o_tile."""
    if PACKED_ROWS:
        o_base = o_slot + i_h * stride_h + i_m * (BLOCK_M * BLOCK_N)
        o_tile = rows(tl.arange(0, BLOCK_M), GROUPED) * BLOCK_N + cols(o_n, GROUPED)
    else:
        o_base = o_slot + i_h * 0
        o_tile = i_h * stride_h + rows(o_m, GROUPED) * stride_p + cols(o_n, GROUPED) * stride_n
    return o_base, o_tile


@triton.jit
def load_state(p, mask, EVICT_FIRST: tl.constexpr):
    """The state tile at p in float32, masked with 0 (mask None: unmasked). With the cache hints
    (EVICT_FIRST) evict-first: each state is touched once a step."""
    STATE_EVICT: tl.constexpr = "evict_first" if EVICT_FIRST else ""
    if mask is None:
        return tl.load(p, eviction_policy=STATE_EVICT).to(tl.float32)
    else:
        return tl.load(p, mask=mask, other=0.0, eviction_policy=STATE_EVICT).to(tl.float32)


@triton.jit
def store_state(p, v, mask, EVICT_FIRST: tl.constexpr):
    """v stored into the state tile at p (mask None: unmasked), evict-first with the hints."""
    STATE_EVICT: tl.constexpr = "evict_first" if EVICT_FIRST else ""
    tl.store(p, v, mask=mask, eviction_policy=STATE_EVICT)


@triton.jit
def row_sums(b_state, b_C, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ORDERED_SUM: tl.constexpr):
    """sum_n state[p, n] * C[n], the SSM part of out [BLOCK_M]: in the upstream order with the
    ordered sum (b_state the grouped tile), else as the tile's layout reduces."""
    if ORDERED_SUM:
        return rowsum_upstream_order(tl.permute(b_state, (1, 0, 2)), b_C, BLOCK_M, BLOCK_N)
    else:
        return tl.sum(b_state * b_C[None, :], axis=1)


@triton.jit
def gated_out(
    b_y, b_x, b_z, b_D, m_live, HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_SRC_IDX: tl.constexpr
):
    """out from its SSM part b_y (one token's [BLOCK_M], or the drafts' [BLOCK_M, TD]): + D x,
    times the gate z sigmoid(z) (x and z in any dtype, taken to float32; D broadcastable to
    b_y), 0 for a request of the pad slot (m_live)."""
    b_xf = b_x.to(tl.float32)
    if HAS_D:
        b_y += b_xf * b_D
    if HAS_Z:
        b_zf = b_z.to(tl.float32)
        b_y *= b_zf * tl.sigmoid(b_zf)
    if HAS_SRC_IDX:
        b_y = tl.where(m_live, b_y, 0.0)
    return b_y


@triton.jit
def softplus(dt):
    """log(1 + exp(dt)) below 20, dt above: upstream's formula, rounding and all."""
    return tl.where(dt <= 20.0, tl.log(tl.exp(dt) + 1), dt)


@triton.jit
def exp_dA(x, FAST_EXP: tl.constexpr):
    """dA = exp(A * dt'): tl.exp as mamba_ssm and sglang compute it, or with FAST_EXP
    exp2(log2(e) * x) as vLLM's kernel does (its fast_exp), which rounds differently."""
    if FAST_EXP:
        return tl.math.exp2(_LOG2E * x)
    else:
        return tl.exp(x)


@triton.jit
def state_step(b_state, b_dA, b_dB, b_x, ORDERED_SUM: tl.constexpr):
    """s * dA + dB * x, the recurrence of one token, as upstream computes it (b_x broadcast
    over the tile's columns): LLVM fuses it to fma(s, dA, dB * x) in upstream's layouts; with
    the ordered sum that fma is written out, so that no other layout can change it (see the
    module docstring)."""
    if ORDERED_SUM:
        return tl.fma(b_state, b_dA, b_dB * b_x)
    else:
        return b_state * b_dA + b_dB * b_x


@triton.jit
def _philox2x32(c0, c1, key, ROUNDS: tl.constexpr):
    """Philox2x32 with ROUNDS rounds (Salmon et al., 2011): counter (c0, c1), uint32 tiles of
    one shape, and the 32-bit key; its two output words. The 32x32-bit product is one 64-bit
    multiply, so that each round is a wide multiply and an xor."""
    for _ in tl.static_range(ROUNDS):
        p = c0.to(tl.uint64) * 0xD256D193
        c0 = (p >> 32).to(tl.uint32) ^ c1 ^ key
        c1 = p.to(tl.uint32)
        key = key + 0x9E3779B9
    return c0, c1


@triton.jit
def _random_words(
    seed,
    o_row,
    BLOCK_N: tl.constexpr,
    STREAM: tl.constexpr,
    ROUNDS: tl.constexpr,
    GROUPED: tl.constexpr,
):
    """The two Philox2x32 words of each call of the state tile whose rows start at the offsets
    o_row [BLOCK_M] (one call per 4 columns of a row, see the module docstring), and the
    column k (0-3) of each element in its call's group: w0, w1 [BLOCK_M, G, 1] and k [1, 1, 4]
    (grouped: [G, BLOCK_M, 1] and k [1, 1, 4]; fewer than 4 columns: [BLOCK_M, 1] and k
    [1, BLOCK_N]). Every layout the kernels use holds 4 consecutive columns of a row in one
    thread, so a thread computes the calls of its own elements and no random bits move between
    threads."""
    key = (seed ^ (seed >> 32)).to(tl.uint32)
    G: tl.constexpr = (BLOCK_N + 3) // 4
    o = o_row.to(tl.int64)
    if GROUPED:  # the calls [G, BLOCK_M, 1] of the tile [G, BLOCK_M, 4]
        o = o[None, :, None]
        g = tl.arange(0, G)[:, None, None]
        k = tl.arange(0, 4)[None, None, :]
    elif BLOCK_N >= 4:  # the calls [BLOCK_M, G, 1] of the tile seen as [BLOCK_M, G, 4]
        o = o[:, None, None]
        g = tl.arange(0, G)[None, :, None]
        k = tl.arange(0, 4)[None, None, :]
    else:  # fewer than 4 columns: one call, its first BLOCK_N halves
        o = o[:, None]
        g = tl.zeros((1, 1), tl.int32)
        k = tl.arange(0, BLOCK_N)[None, :]
    c0 = (o & 0xFFFFFFFF).to(tl.uint32) + 0 * g.to(tl.uint32)
    c1 = ((o >> 32) & 0xFFFF).to(tl.uint32) | (g.to(tl.uint32) << 16) | (STREAM << 31)
    w0, w1 = _philox2x32(c0, c1, key, ROUNDS)
    return w0, w1, k


@triton.jit
def _random_bits(
    seed,
    o_row,
    BITS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    STREAM: tl.constexpr,
    ROUNDS: tl.constexpr,
    GROUPED: tl.constexpr,
):
    """BITS (16 or 13) random bits (in a uint32) for each element of the state tile
    ([BLOCK_M, BLOCK_N], or grouped [BLOCK_N / 4, BLOCK_M, 4]) whose rows start at the offsets
    o_row [BLOCK_M]: column 4g + k takes its bits from word k // 2 of call g (_random_words);
    with 16, bits 0-15 of it for an even k and 16-31 for an odd one; with 13, bits 0-12 and
    19-31 (one mask or one shift each)."""
    w0, w1, k = _random_words(seed, o_row, BLOCK_N, STREAM, ROUNDS, GROUPED)
    w = tl.where(k < 2, w0, w1)
    LOW: tl.constexpr = (1 << BITS) - 1  # an even column's field: the word's low BITS bits
    r = tl.where((k & 1) == 0, w & LOW, w >> (32 - BITS))  # an odd one's: its top BITS bits
    if GROUPED or BLOCK_N < 4:
        return r
    else:
        return tl.reshape(r, (r.shape[0], BLOCK_N))


# Under Triton's interpreter a float conversion does not keep fp32's subnormals (nor convert
# toward zero into fp16's): there the rounding cuts the bits itself, which is what the
# conversion toward zero does on the GPU (the same bits, but for the payload of a NaN).
_INTERPRETED = tl.constexpr(interpreted())


@triton.jit
def _below(v, LIMIT: tl.constexpr, LIMIT_PTX: tl.constexpr):
    """All ones (a uint32 an element) where |v| < LIMIT, zero elsewhere and at NaN; LIMIT_PTX
    is LIMIT as a PTX fp32 literal. On the GPU one PTX `set` an element, which ptxas makes a
    compare and a select consumed at once: the same test as a Triton compare let the
    compiler hold every element's predicate at a time (and pack them into registers, 2 to 5
    instructions an element more)."""
    if _INTERPRETED:
        return 0 - (tl.abs(v) < LIMIT).to(tl.uint32)
    return tl.inline_asm_elementwise(
        "{ .reg .f32 a; abs.f32 a, $1; set.lt.u32.f32 $0, a, " + LIMIT_PTX + "; }",
        "=r,r",
        [v],
        dtype=tl.uint32,
        is_pure=True,
        pack=1,
    )


@triton.jit
def _f16_scaled(v):
    """The bits of v * 2^-112 (exact where fp16 has a value: see _stochastic_round)."""
    return (v * 1.925929944387236e-34).to(tl.uint32, bitcast=True)


@triton.jit
def _f16_toward_zero(t):
    """fp16 from t, the bits of a value times 2^-112 (see _stochastic_round): the scale undone
    (exactly) and converted toward zero, which cuts t's 13 low bits."""
    if _INTERPRETED:
        cut = (t & 0xFFFFE000).to(tl.float32, bitcast=True) * 5.192296858534828e33
        return tl.where(tl.abs(cut) == float("inf"), cut, tl.clamp(cut, -65504.0, 65504.0)).to(tl.float16)
    q = t.to(tl.float32, bitcast=True) * 5.192296858534828e33
    return q.to(tl.float16, fp_downcast_rounding="rtz")


@triton.jit
def _stochastic_round(v, r, dtype: tl.constexpr):
    """The fp32 tile v rounded to dtype (float16 or bfloat16) stochastically with random bits
    r (uint32s, 16 bits an element for bfloat16, 13 for float16): see the module docstring.
    NaN, the infinities and the magnitudes from the type's largest finite value up take no
    random bits (a mask from _below), so that the conversion toward zero keeps them or gives
    the largest finite value."""
    if dtype == tl.bfloat16:
        # bf16 is fp32's upper half: the sum converted toward zero is its upper half
        t = v.to(tl.uint32, bitcast=True) + (r & _below(v, 3.3895313892515355e38, "0f7F7F0000"))
        if _INTERPRETED:
            h = (t >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
        else:
            h = t.to(tl.float32, bitcast=True).to(dtype, fp_downcast_rounding="rtz")
    else:
        # v * 2^-112 holds fp16's value bits where fp32 holds a number's: fp16's exponent in
        # fp32's field, its 10 fraction bits the top of fp32's 23, and its subnormals (steps of
        # 2^-24) fp32's (steps of 2^-149 = 2^-24 * 2^-112 / 2^13): the 13 random bits added
        # there and the scale undone (exactly), the conversion toward zero cuts the 13 bits
        h = _f16_toward_zero(_f16_scaled(v) + (r & _below(v, 65504.0, "0f477FE000")))
    return h


@triton.jit
def _finite_f16_pairs(ve, vo):
    """For each pair of elements (ve, vo), an even column and the odd one beside it, a uint32
    that is 0xFFFF in its low half where ve rounds to a finite fp16 (|ve| < 65520) and in its
    high half where vo does, zero elsewhere and at NaN: the mask of the pair's Philox word,
    whose low half holds the even column's random bits and whose high half the odd one's. On
    the GPU one packed conversion and one packed compare a pair (cvt.rn.f16x2.f32, then set on
    |h| < inf), where a compare and a select an element took twice the instructions."""
    if _INTERPRETED:
        return (_below(ve, 65520.0, "0f477FF000") & 0xFFFF) | (_below(vo, 65520.0, "0f477FF000") & 0xFFFF0000)
    return tl.inline_asm_elementwise(
        "{ .reg .b32 h, a, inf; cvt.rn.f16x2.f32 h, $2, $1; abs.f16x2 a, h; "
        "mov.b32 inf, 0x7C007C00; set.lt.u32.f16x2 $0, a, inf; }",
        "=r,r,r",
        [ve, vo],
        dtype=tl.uint32,
        is_pure=True,
        pack=1,
    )


@triton.jit
def _stochastic_round_f16(v, w0, w1, BLOCK_N: tl.constexpr, GROUPED: tl.constexpr):
    """The fp32 tile v ([BLOCK_M, BLOCK_N], or grouped [BLOCK_N / 4, BLOCK_M, 4]; BLOCK_N a
    multiple of 4) rounded to float16 stochastically with its calls' Philox words w0, w1
    (_random_words): the bits of _stochastic_round with _random_bits' 13 bits, an element's
    random bits masked a pair at a time (_finite_f16_pairs). Columns 4g, 4g + 1 take word w0
    of call g, 4g + 2, 4g + 3 word w1: the tile is split into its even and odd columns, so that
    each pair meets its word whatever the layout."""
    G: tl.constexpr = BLOCK_N // 4
    if GROUPED:
        a: tl.constexpr = G
        b: tl.constexpr = v.shape[1]
    else:
        a: tl.constexpr = v.shape[0]
        b: tl.constexpr = G
    ve, vo = tl.split(tl.reshape(v, (a, b, 2, 2)))  # [a, b, 2]: pair j of each call
    w = tl.join(tl.reshape(w0, (a, b)), tl.reshape(w1, (a, b)))  # [a, b, 2]: pair j's word
    m = w & _finite_f16_pairs(ve, vo)
    te = _f16_scaled(ve) + (m & 0x1FFF)  # the even column's bits 0-12
    to = _f16_scaled(vo) + (m >> 19)  # the odd one's bits 19-31
    h = tl.reshape(tl.join(_f16_toward_zero(te), _f16_toward_zero(to)), (a, b, 4))
    if GROUPED:
        return h
    else:
        return tl.reshape(h, (a, BLOCK_N))


@triton.jit
def stored(
    v,
    dtype: tl.constexpr,
    seed,
    o_row,
    STREAM: tl.constexpr,
    STOCHASTIC: tl.constexpr,
    ROUNDS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUPED: tl.constexpr,
):
    """The fp32 tile v as a store into a dtype tensor writes it: rounded to nearest, or with
    STOCHASTIC (a 16-bit dtype) rounded stochastically with the random bits of seed, the
    offsets o_row [BLOCK_M] of the tile's rows in the tensor and STREAM (see the module
    docstring). GROUPED: v is the ordered sum's grouped tile [BLOCK_N / 4, BLOCK_M, 4]."""
    if STOCHASTIC and dtype != tl.float32:
        if dtype == tl.float16 and BLOCK_N % 4 == 0:
            w0, w1, _ = _random_words(seed, o_row, BLOCK_N, STREAM, ROUNDS, GROUPED)
            return _stochastic_round_f16(v, w0, w1, BLOCK_N, GROUPED)
        r = _random_bits(seed, o_row, 16 if dtype == tl.bfloat16 else 13, BLOCK_N, STREAM, ROUNDS, GROUPED)
        return _stochastic_round(v, r, dtype)
    else:
        return v.to(dtype)


@triton.jit
def wrap(pos, ring):
    """pos mod ring for pos in [0, 2 ring) (a replay ring's row: start is clamped into
    [0, ring), offsets are below ring): a compare and a select instead of a signed remainder."""
    return tl.where(pos >= ring, pos - ring, pos)
