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

__all__ = [
    "ORDERED_MAX_N",
    "ORDERED_MIN_N",
    "col_offsets",
    "cols",
    "exp_dA",
    "load",
    "rows",
    "rowsum_upstream_order",
    "softplus",
    "state_step",
]

# The state dims (powers of two) the ordered row sum is defined for.
ORDERED_MIN_N = 16
ORDERED_MAX_N = 256

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
def col_offsets(BLOCK_N: tl.constexpr, GROUPED: tl.constexpr):
    """The column indices 0 .. BLOCK_N - 1 of the tile: [BLOCK_N], or [BLOCK_N / 4, 1, 4]
    grouped (column 4g + j at [g, 0, j])."""
    if GROUPED:
        return (tl.arange(0, BLOCK_N // 4)[:, None] * 4 + tl.arange(0, 4)[None, :])[:, None, :]
    else:
        return tl.arange(0, BLOCK_N)


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
