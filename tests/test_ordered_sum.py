"""The ordered row sum: the upstream reduction tree spelled out (4 columns in a thread, left to
right, with upstream's fmas; a butterfly over the lanes of a row from the widest distance;
then the warps of a row).

On a GPU the helper, compiled in other layouts (more or fewer rows, warps, elements a thread),
must give the bits of tl.sum compiled in the upstream layout: that is the whole claim. Under
the interpreter (no GPU), tl.fma is an unfused multiply-add in NumPy, so the kernel's bits must
equal a NumPy emulation of the same tree exactly, and other orders must not: that checks the
reshapes and splits pick the right operands.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from conftest import DEVICE, HAS_GPU, Case, bits, make_inputs
from ssmdecode import LaunchConfig, selective_state_update
from ssmdecode.config import upstream_config
from ssmdecode.ops.selective_state_update.common import rowsum_upstream_order as _rowsum_upstream_order


# fmt: off
@triton.jit
def _rowsum_kernel(p_s, p_c, p_out,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   ORDERED: tl.constexpr, FUSE_LEFT: tl.constexpr):
    o_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    o_n = tl.arange(0, BLOCK_N)
    s = tl.load(p_s + o_m[:, None] * BLOCK_N + o_n[None, :])
    c = tl.load(p_c + o_n)
    if ORDERED:
        r = _rowsum_upstream_order(s, c, BLOCK_M, BLOCK_N, FUSE_LEFT)
    else:  # the upstream kernel's expression
        r = tl.sum(s * c[None, :], axis=1)
    tl.store(p_out + o_m, r)
# fmt: on


def _rowsum(
    s: torch.Tensor, c: torch.Tensor, block_m: int, num_warps: int, ordered: bool, fuse_left: bool = True
) -> torch.Tensor:
    rows, n = s.shape
    out = torch.empty(rows, dtype=torch.float32, device=s.device)
    _rowsum_kernel[(rows // block_m,)](
        s, c, out, BLOCK_M=block_m, BLOCK_N=n, ORDERED=ordered, FUSE_LEFT=fuse_left, num_warps=num_warps
    )
    return out


def _cancelling_data(rows: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Terms of mixed sign and magnitude, so that every order rounds differently."""
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((rows, n)) * np.exp2(rng.integers(-10, 10, (rows, n)))
    c = rng.standard_normal(n) * np.exp2(rng.integers(-10, 10, n))
    return s.astype(np.float32), c.astype(np.float32)


def upstream_tree(t: np.ndarray) -> np.ndarray:
    """The upstream row-sum order over the products t, in float32 NumPy with unfused adds."""
    rows, n = t.shape
    g = t.reshape(rows, n // 4, 4)
    s = ((g[..., 0] + g[..., 1]) + g[..., 2]) + g[..., 3]
    lanes = min(n // 4, 32)
    s = s.reshape(rows, -1, lanes)
    while s.shape[-1] > 1:
        half = s.shape[-1] // 2
        s = s[..., :half] + s[..., half:]
    s = s[..., 0]
    return s[:, 0] + s[:, 1] if s.shape[1] == 2 else s[:, 0]


def _neighbours_first(t: np.ndarray) -> np.ndarray:
    s = t
    while s.shape[-1] > 1:
        s = s[..., 0::2] + s[..., 1::2]
    return s[..., 0]


# (BLOCK_M, num_warps) of the upstream layout at each N: 4 fp32 a thread along N
UPSTREAM_LAYOUT = {
    n: (upstream_config(n).block_m, upstream_config(n).num_warps) for n in (16, 32, 64, 128, 256)
}
OTHER_LAYOUTS = [(1, 1), (2, 8), (16, 1), (16, 4), (64, 2)]


@pytest.mark.skipif(HAS_GPU, reason="NumPy emulation of the interpreter's unfused tl.fma")
@pytest.mark.parametrize("block_n", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("block_m", [1, 4])
def test_rowsum_is_the_upstream_tree_under_the_interpreter(block_m: int, block_n: int) -> None:
    s, c = _cancelling_data(block_m, block_n, seed=block_n + block_m)
    got = _rowsum(torch.from_numpy(s), torch.from_numpy(c), block_m, 1, ordered=True).numpy()
    want = upstream_tree(s * c[None, :])
    assert np.array_equal(got.view(np.int32), want.view(np.int32)), (got, want)


@pytest.mark.parametrize("block_n", [16, 32, 64, 128, 256])
def test_other_orders_give_other_bits_on_such_data(block_n: int) -> None:
    """So the tests here can fail: on 64 rows of the same kind of data, a neighbours-first tree
    and a left-to-right sum each differ from the upstream tree somewhere."""
    s, c = _cancelling_data(64, block_n, seed=1)
    t = s * c[None, :]
    want = upstream_tree(t).view(np.int32)
    assert not np.array_equal(_neighbours_first(t).view(np.int32), want)
    assert not np.array_equal(np.cumsum(t, axis=1, dtype=np.float32)[:, -1].view(np.int32), want)


@pytest.mark.gpu
@pytest.mark.parametrize("block_n", sorted(UPSTREAM_LAYOUT))
def test_gpu_rowsum_in_any_layout_is_tl_sum_in_the_upstream_layout(block_n: int) -> None:
    s, c = (torch.from_numpy(a).to(DEVICE) for a in _cancelling_data(256, block_n, seed=block_n))
    want = _rowsum(s, c, *UPSTREAM_LAYOUT[block_n], ordered=False)
    # the plain sum in other layouts differs somewhere (else this test proves nothing) ...
    assert any(
        not torch.equal(bits(_rowsum(s, c, m, w, ordered=False)), bits(want)) for m, w in OTHER_LAYOUTS
    )
    # ... the ordered sum does not, in any layout, the upstream one included
    for m, w in [UPSTREAM_LAYOUT[block_n], *OTHER_LAYOUTS]:
        got = _rowsum(s, c, m, w, ordered=True)
        assert torch.equal(bits(got), bits(want)), f"BLOCK_M {m}, {w} warps: differs"
    # and fusing the other product first is another order: the test sees the fma placement
    assert not torch.equal(bits(_rowsum(s, c, 16, 1, ordered=True, fuse_left=False)), bits(want))


ORDERED = [
    LaunchConfig(16, 4, slot_major=True, evict_first=True, ordered_sum=True),
    LaunchConfig(8, 1, ordered_sum=True),
]


@pytest.mark.parametrize("config", ORDERED, ids=lambda c: c.label)
@pytest.mark.parametrize(
    "case",
    [
        Case(batch=2, nheads=2, ngroups=1, headdim=16, dstate=32, tie=True),
        Case(batch=2, nheads=2, ngroups=2, headdim=12, dstate=24, pad_rows=(1,)),  # masked tile
        Case(batch=2, nheads=2, ngroups=1, headdim=16, dstate=16, state="bf16", dst=True),
        Case(batch=2, nheads=2, ngroups=1, headdim=8, dstate=16, has_D=False, has_z=False),
    ],
    ids=lambda c: c.id,
)
def test_ordered_configs_match_reference(case: Case, config: LaunchConfig) -> None:
    """The grouped [BLOCK_M, N / 4, 4] tile: untied dt and A, masks, padding, dst slots."""
    from test_selective_state_update import run_and_check

    run_and_check(case, config)


def test_ordered_sum_outside_its_dstate_range_is_a_clear_error() -> None:
    case = Case(batch=1, nheads=1, ngroups=1, headdim=4, dstate=8)
    with pytest.raises(ValueError, match="dstate 8"):
        selective_state_update(**make_inputs(case), config=LaunchConfig(4, 1, ordered_sum=True))
