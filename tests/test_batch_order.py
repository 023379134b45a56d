"""selective_state_update(batch_order=...): programs take the batch rows in a given order. Each
row's arithmetic is its own, so any permutation must give the same bits as none."""

from __future__ import annotations

import pytest
import torch

from conftest import DEVICE, Case, bits, make_inputs, run_bits
from ssmdecode import LaunchConfig, selective_state_update, slot_order

CPU_CASE = Case(batch=5, nheads=2, headdim=4, dstate=16, ngroups=1, pad_rows=(1,), dst=True)


@pytest.mark.parametrize(
    "config", [LaunchConfig(4, 1), LaunchConfig(4, 1, slot_major=True)], ids=lambda c: c.label
)
def test_any_order_gives_the_same_bits(config: LaunchConfig) -> None:
    kw = make_inputs(CPU_CASE)
    state0 = kw["state"].clone()
    want = run_bits(kw, state0, config)
    for order in (
        slot_order(kw["state_batch_indices"]),
        torch.tensor([4, 2, 0, 3, 1], dtype=torch.int64, device=kw["x"].device),
    ):
        got = run_bits(kw, state0, config, batch_order=order)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_an_order_that_is_not_a_permutation_changes_the_result() -> None:
    """The control: the kernel does follow batch_order (a repeated row leaves one row unset)."""
    kw = make_inputs(CPU_CASE)
    state0 = kw["state"].clone()
    want = run_bits(kw, state0, LaunchConfig(4, 1))
    twice = torch.tensor([0, 0, 2, 3, 4], dtype=torch.int32, device=kw["x"].device)
    got = run_bits(kw, state0, LaunchConfig(4, 1), batch_order=twice)
    assert not torch.equal(got[0], want[0])


def _stable_argsort(values: list[int]) -> list[int]:
    return sorted(range(len(values)), key=lambda i: (values[i], i))


@pytest.mark.parametrize("n", [1, 5, 17, 300, 9000])  # 9000: past one program, torch's sort
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_slot_order_is_a_stable_argsort(n: int, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(n)
    slots = torch.randint(-1, 3 * n, (2 * n,), generator=g).to(dtype)[::2]  # strided, -1 pads
    slots[: n // 4] = -1
    got = slot_order(slots.to(DEVICE))
    assert got.dtype == torch.int32 and got.cpu().tolist() == _stable_argsort(slots.tolist())


def test_slot_order_takes_int64_slots_past_int32() -> None:
    slots = torch.tensor([2**40 + 5, 3, -7, 2**33, 2**40 + 5, -(2**45)], dtype=torch.int64)
    assert slot_order(slots.to(DEVICE)).cpu().tolist() == _stable_argsort(slots.tolist())


@pytest.mark.parametrize("device", sorted({DEVICE, "cpu"}))  # on a GPU machine: CPU slots too
def test_slot_order_sorts_rows_by_slot(device: str) -> None:
    slots = torch.tensor([7, -1, 3, 9, 0], dtype=torch.int32, device=device)
    assert slot_order(slots).tolist() == [1, 4, 2, 0, 3]
    assert slot_order(slots).dtype == torch.int32
    assert slot_order(slots).device == slots.device
    with pytest.raises(TypeError, match="state_batch_indices"):
        slot_order(slots.view(1, 5))


@pytest.mark.parametrize(
    ("order", "error", "message"),
    [
        (torch.arange(4, dtype=torch.int32), ValueError, r"batch_order has shape \(4,\)"),
        (torch.arange(5, dtype=torch.float32), TypeError, "batch_order has dtype torch.float32"),
        ([0, 1, 2, 3, 4], TypeError, "batch_order must be a torch.Tensor"),
    ],
    ids=["shape", "dtype", "type"],
)
def test_bad_batch_order_is_refused_before_anything_is_written(order, error, message) -> None:
    kw = make_inputs(CPU_CASE)
    state0 = kw["state"].clone()
    if isinstance(order, torch.Tensor):
        order = order.to(kw["x"].device)
    with pytest.raises(error, match=message):
        selective_state_update(**kw, batch_order=order)
    assert torch.equal(bits(kw["state"]), bits(state0))


@pytest.mark.parametrize(
    ("order", "missing"),
    [([0, 0, 2, 3, 4], 1), ([-1, 1, 2, 3, 4], 0), ([0, 1, 2, 3, 5], 4)],
    ids=["repeated", "negative", "too-large"],
)
def test_validate_indices_checks_the_permutation(order: list[int], missing: int) -> None:
    kw = make_inputs(CPU_CASE)
    state0 = kw["state"].clone()
    bad = torch.tensor(order, dtype=torch.int32, device=kw["x"].device)
    with pytest.raises(ValueError, match=f"not a permutation of the 5 batch rows: row {missing} is missing"):
        selective_state_update(**kw, batch_order=bad, validate_indices=True)
    assert torch.equal(bits(kw["state"]), bits(state0))
    ok = torch.tensor([4, 3, 2, 1, 0], dtype=torch.int64, device=kw["x"].device)
    selective_state_update(**kw, batch_order=ok, validate_indices=True)  # a permutation passes


def test_strided_order_and_mamba1_layout() -> None:
    case = Case(batch=4, nheads=1, headdim=4, dstate=16, ngroups=1, layout="mamba1")
    kw = make_inputs(case)
    state0 = kw["state"].clone()
    config = LaunchConfig(4, 1, slot_major=True)
    want = run_bits(kw, state0, config)
    strided = torch.tensor([2, -9, 0, -9, 3, -9, 1, -9], dtype=torch.int32, device=kw["x"].device)[::2]
    got = run_bits(kw, state0, config, batch_order=strided)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.gpu
@pytest.mark.parametrize(
    "config", [None, LaunchConfig(4, 4), LaunchConfig(8, 1)], ids=lambda c: "table" if c is None else c.label
)
def test_gpu_slot_order_keeps_the_bits(config: LaunchConfig | None) -> None:
    case = Case(
        batch=64, nheads=16, headdim=64, dstate=128, ngroups=1, tie=True, extra_slots=64, pad_rows=(5,)
    )
    kw = make_inputs(case)
    state0 = kw["state"].clone()
    want = run_bits(kw, state0, config)
    got = run_bits(kw, state0, config, batch_order=slot_order(kw["state_batch_indices"]))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
