"""Bad input raises a ValueError or TypeError that names the argument and what was expected,
and writes nothing: the state keeps its bits and a given out keeps its poison."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

from conftest import Case, bits, make_inputs
from ssmdecode import LaunchConfig, selective_state_update

CASE = Case()  # B3-H4-P12-N24-G2, bf16 inputs, fp32 state, int32 indices


def _set(key: str, value: object) -> Callable[[dict], None]:
    def edit(kw: dict) -> None:
        kw[key] = value(kw) if callable(value) else value

    return edit


# fmt: off
BAD = {
    "state-dtype": (_set("state", lambda kw: kw["state"].double()), TypeError, r"state has dtype torch.float64"),
    "state-rank": (_set("state", lambda kw: kw["state"][0]), ValueError, r"x has shape .*expected \[B, P\]"),
    "state-not-tensor": (_set("state", [1.0]), TypeError, r"state must be a torch.Tensor"),
    "x-shape": (_set("x", lambda kw: kw["x"][:, :, :5]), ValueError, r"x has shape \(3, 4, 5\); expected \(3, 4, 12\)"),
    "x-dtype": (_set("x", lambda kw: kw["x"].to(torch.int32)), TypeError, r"x has dtype torch.int32"),
    "dt-shape": (_set("dt", lambda kw: kw["dt"][:2]), ValueError, r"dt has shape \(2, 4, 12\)"),
    "A-shape": (_set("A", lambda kw: kw["A"][:, :, :3]), ValueError, r"A has shape \(4, 12, 3\); expected \(4, 12, 24\)"),
    "B-rank": (_set("B", lambda kw: kw["B"][:, 0]), ValueError, r"B has shape \(3, 24\); expected \[B, G, N\]"),
    "groups": (_set("B", lambda kw: torch.randn(3, 3, 24, dtype=torch.bfloat16)), ValueError,
               r"B has 3 groups, which does not divide the 4 heads"),
    "C-shape": (_set("C", lambda kw: kw["C"][:, :1]), ValueError, r"C has shape \(3, 1, 24\); expected \(3, 2, 24\)"),
    "D-shape": (_set("D", lambda kw: kw["D"][0]), ValueError, r"D has shape \(12,\); expected \(4, 12\)"),
    "z-shape": (_set("z", lambda kw: kw["z"][:, :1]), ValueError, r"z has shape \(3, 1, 12\)"),
    "dt_bias-dtype": (_set("dt_bias", lambda kw: kw["dt_bias"].long()), TypeError, r"dt_bias has dtype torch.int64"),
    "out-shape": (_set("out", torch.empty(3, 4, 11)), ValueError, r"out has shape \(3, 4, 11\); expected \(3, 4, 12\)"),
    "idx-dtype": (_set("state_batch_indices", lambda kw: kw["state_batch_indices"].float()), TypeError,
                  r"state_batch_indices has dtype torch.float32; expected one of int32, int64"),
    "idx-shape": (_set("state_batch_indices", lambda kw: kw["state_batch_indices"][:2]), ValueError,
                  r"state_batch_indices has shape \(2,\); expected \(3,\)"),
    "dst-shape": (_set("dst_state_batch_indices", torch.zeros(4, dtype=torch.int32)), ValueError,
                  r"dst_state_batch_indices has shape \(4,\)"),
    "dst-without-src": (lambda kw: kw.update(state_batch_indices=None,
                                             dst_state_batch_indices=torch.arange(3, dtype=torch.int32)),
                        ValueError, r"dst_state_batch_indices needs state_batch_indices"),
    "pool-too-small": (lambda kw: kw.update(state_batch_indices=None, state=kw["state"][:2]), ValueError,
                       r"state has 2 slots but x has batch 3"),
    "config-type": (_set("config", (8, 1)), TypeError, r"config must be a LaunchConfig"),
    "device": (_set("x", lambda kw: kw["x"].to("meta")), ValueError, r"x is on meta; expected"),
}
# fmt: on


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_raises_and_writes_nothing(name: str) -> None:
    edit, error, message = BAD[name]
    kw = make_inputs(CASE)
    kw["out"] = torch.full(kw["x"].shape, float("nan"), dtype=kw["x"].dtype)
    edit(kw)
    state, out = kw["state"], kw["out"]
    snapshot = [t.clone() for t in (state, out) if isinstance(t, torch.Tensor)]
    with pytest.raises(error, match=message):
        selective_state_update(**kw)
    after = [t for t in (state, out) if isinstance(t, torch.Tensor)]
    for before, now in zip(snapshot, after, strict=True):
        assert torch.equal(before.view(torch.uint8), now.view(torch.uint8)), "bad input wrote memory"


def test_mamba1_shapes_are_named_in_the_callers_layout() -> None:
    case = Case(layout="mamba1", nheads=1, ngroups=1, headdim=10, dstate=16)
    kw = make_inputs(case)
    kw["A"] = kw["A"][:, :8]
    with pytest.raises(ValueError, match=re.escape("A has shape (10, 8); expected (10, 16)")):
        selective_state_update(**kw)


@pytest.mark.parametrize("via", ["flag", "env"])
def test_validate_indices(via: str, monkeypatch: pytest.MonkeyPatch) -> None:
    kw = make_inputs(CASE)
    state0 = kw["state"].clone()
    kw["state_batch_indices"][1] = kw["state"].shape[0]  # one past the pool
    extra = {}
    if via == "flag":
        extra["validate_indices"] = True
    else:
        monkeypatch.setenv("SSMDECODE_VALIDATE_INDICES", "1")
    with pytest.raises(ValueError, match=r"state_batch_indices\[1\] = 6 is outside the state pool \[0, 6\)"):
        selective_state_update(**kw, **extra)
    assert torch.equal(bits(kw["state"]), bits(state0))


def test_validate_indices_accepts_pad_slot() -> None:
    kw = make_inputs(Case(pad_rows=(0,)))
    selective_state_update(**kw, validate_indices=True, config=LaunchConfig(16, 4))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"block_m": 3, "num_warps": 1}, "block_m must be a power of two"),
        ({"block_m": 8, "num_warps": 0}, "num_warps must be a positive int"),
        ({"block_m": 8, "num_warps": 64}, "num_warps must be <= 32"),
        ({"block_m": 8, "num_warps": 1, "slot_major": 1}, "slot_major must be a bool"),
    ],
)
def test_launch_config_rejects_bad_fields(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LaunchConfig(**fields)


@pytest.mark.gpu
def test_cpu_tensors_are_refused_when_triton_compiles_for_the_gpu() -> None:
    kw = make_inputs(CASE, "cpu")
    state0 = kw["state"].clone()
    with pytest.raises(ValueError, match=r"state is on cpu, but Triton compiles for the GPU"):
        selective_state_update(**kw)
    assert torch.equal(bits(kw["state"]), bits(state0))


def test_a_batch_past_the_grid_limit_is_refused() -> None:
    rows, p, n = 65536, 4, 16  # Mamba1 layout, small rows: nothing here is large
    state = torch.randn(2, p, n)
    state0 = state.clone()
    kw = dict(
        state=state,
        x=torch.randn(rows, p),
        dt=torch.randn(rows, p),
        A=torch.randn(p, n),
        B=torch.randn(rows, n),
        C=torch.randn(rows, n),
        state_batch_indices=torch.zeros(rows, dtype=torch.int32),
    )
    with pytest.raises(ValueError, match=r"x has 65536 rows; one call takes at most 65535"):
        selective_state_update(**kw)
    assert torch.equal(bits(state), bits(state0))
