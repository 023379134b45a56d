"""The ordered row sum: the upstream reduction tree spelled out (4 columns in a thread, left to
right; a butterfly over the lanes of a row from the widest distance; then the warps of a row).

Under the interpreter every float32 add is NumPy's, so the kernel's bits must equal a NumPy
emulation of that tree exactly; a tree built in another order (pairs of neighbours first, or a
plain left-to-right sum) must not, on the same data. On a GPU the same test also runs compiled,
where it shows the reshapes and splits keep their order through code generation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from conftest import DEVICE, Case, bits, make_inputs
from ssmdecode import LaunchConfig, selective_state_update, selective_state_update_reference
from ssmdecode.ops.selective_state_update import _rowsum_upstream_order


@triton.jit
def _rowsum_kernel(p_in, p_out, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    o_m = tl.arange(0, BLOCK_M)
    o_n = tl.arange(0, BLOCK_N)
    t = tl.load(p_in + o_m[:, None] * BLOCK_N + o_n[None, :])
    tl.store(p_out + o_m, _rowsum_upstream_order(t, BLOCK_M, BLOCK_N))


def upstream_tree(t: np.ndarray) -> np.ndarray:
    """The upstream kernel's row-sum order, in float32 NumPy."""
    rows, n = t.shape
    c = t.reshape(rows, n // 4, 4)
    s = ((c[..., 0] + c[..., 1]) + c[..., 2]) + c[..., 3]
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


def _cancelling_data(rows: int, n: int, seed: int) -> np.ndarray:
    """Terms of mixed sign and magnitude, so that every order rounds differently."""
    rng = np.random.default_rng(seed)
    t = rng.standard_normal((rows, n)) * np.exp2(rng.integers(-12, 12, (rows, n)))
    return t.astype(np.float32)


@pytest.mark.parametrize("block_n", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("block_m", [1, 4])
def test_rowsum_is_the_upstream_tree_bit_for_bit(block_m: int, block_n: int) -> None:
    t = _cancelling_data(block_m, block_n, seed=block_n + block_m)
    got = torch.empty(block_m, dtype=torch.float32, device=DEVICE)
    _rowsum_kernel[(1,)](torch.from_numpy(t).to(DEVICE), got, BLOCK_M=block_m, BLOCK_N=block_n)
    got = got.cpu().numpy()
    want = upstream_tree(t)
    assert np.array_equal(got.view(np.int32), want.view(np.int32)), (got, want)


@pytest.mark.parametrize("block_n", [16, 32, 64, 128, 256])
def test_other_orders_give_other_bits_on_such_data(block_n: int) -> None:
    """So the test above can fail: on 64 rows of the same kind of data, a neighbours-first tree
    and a left-to-right sum each differ from the upstream tree somewhere."""
    t = _cancelling_data(64, block_n, seed=1)
    want = upstream_tree(t).view(np.int32)
    assert not np.array_equal(_neighbours_first(t).view(np.int32), want)
    assert not np.array_equal(np.cumsum(t, axis=1, dtype=np.float32)[:, -1].view(np.int32), want)


ORDERED = [
    LaunchConfig(16, 4, slot_major=True, evict_first=True, ordered_sum=True),
    LaunchConfig(16, 4, slot_major=True, evict_first=True, ordered_sum=True, flat=True),
    LaunchConfig(8, 1, ordered_sum=True, flat=True),
]


@pytest.mark.parametrize("config", ORDERED, ids=lambda c: c.label)
@pytest.mark.parametrize("case", [
    Case(batch=2, nheads=2, ngroups=1, headdim=16, dstate=32, tie=True),
    Case(batch=2, nheads=2, ngroups=2, headdim=12, dstate=24, pad_rows=(1,)),  # masked tile
    Case(batch=2, nheads=2, ngroups=1, headdim=16, dstate=16, state="bf16", dst=True),
], ids=lambda c: c.id)
def test_ordered_and_flat_configs_match_reference(case: Case, config: LaunchConfig) -> None:
    from test_selective_state_update import run_and_check
    run_and_check(case, config)


def test_flat_falls_back_to_a_tile_when_rows_are_not_contiguous() -> None:
    """A state pool whose rows are padded (stride(2) > N) runs the flat config as a 2-D tile
    with the same bits as the contiguous pool."""
    case = Case(batch=2, nheads=2, ngroups=1, headdim=16, dstate=16, tie=True, has_z=False)
    config = LaunchConfig(16, 4, ordered_sum=True, flat=True)
    kw = make_inputs(case)
    padded = torch.full((*kw["state"].shape[:3], 2 * case.dstate), float("nan"), device=DEVICE)
    padded[..., : case.dstate] = kw["state"]
    view = padded[..., : case.dstate]
    ref_out, ref_state = selective_state_update_reference(**kw)
    out_flat = selective_state_update(**kw, config=config).clone()
    out_view = selective_state_update(**{**kw, "state": view}, config=config)
    assert torch.equal(bits(out_view), bits(out_flat))
    torch.testing.assert_close(out_view.double(), ref_out, rtol=1.6e-2, atol=5e-2)
    assert torch.equal(bits(view), bits(kw["state"]))
    assert padded[..., case.dstate:].isnan().all(), "wrote into the row padding"
    torch.testing.assert_close(view.double(), ref_state, rtol=1e-4, atol=1e-4)


def test_ordered_sum_outside_its_dstate_range_is_a_clear_error() -> None:
    case = Case(batch=1, nheads=1, ngroups=1, headdim=4, dstate=8)
    with pytest.raises(ValueError, match="dstate 8"):
        selective_state_update(**make_inputs(case), config=LaunchConfig(4, 1, ordered_sum=True))
