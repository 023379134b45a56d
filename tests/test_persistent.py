"""The persistent grid (LaunchConfig.stages > 0): the same tiles as the one-tile-a-program grid,
looped over by fewer programs, so the same bits as the same config without stages; every
feature of the API, spare turns of the last programs included (their stores are masked)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import DEVICE, Case, bits, make_inputs
from ssmdecode import LaunchConfig, selective_state_update
from ssmdecode.ops import selective_state_update as ssu
from test_selective_state_update import run_and_check


def test_the_cpu_grid_leaves_spare_turns() -> None:
    """So that the tests below cover the masked spare turns of the last programs."""
    assert DEVICE != "cpu" or (3 * 4 * 3) % ssu._CPU_PROGRAMS != 0

CASES = [
    Case(),  # 3 rows x 4 heads x 3 row blocks (P 12, BLOCK_M 4) = 36 tiles: spare turns
    Case(batch=4, pad_rows=(0, 2)),
    Case(dst=True, pad_rows=(1,)),
    Case(tie=True, has_z=False),
    Case(state="bf16", ngroups=1),
    Case(layout="mamba1", nheads=1, ngroups=1, headdim=10, dstate=16),
]


def _pair(block_m: int, stages: int) -> tuple[LaunchConfig, LaunchConfig]:
    flat = LaunchConfig(block_m, 1, slot_major=True, evict_first=True, ordered_sum=True)
    return flat, dataclasses.replace(flat, stages=stages)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_persistent_matches_reference_and_the_one_tile_grid_bit_for_bit(case: Case) -> None:
    one_tile, persistent = _pair(4, 2)
    run_and_check(case, persistent)
    results = []
    for config in (one_tile, persistent):
        kw = make_inputs(case)
        out = torch.full(kw["x"].shape, float("nan"), dtype=torch.float32, device=DEVICE)
        selective_state_update(**kw, out=out, config=config)
        results.append((bits(out).clone(), bits(kw["state"]).clone()))
    assert torch.equal(results[0][0], results[1][0]), "out differs"
    assert torch.equal(results[0][1], results[1][1]), "state differs"


def test_persistent_without_state_update_writes_no_state() -> None:
    kw = make_inputs(Case())
    state0 = kw["state"].clone()
    selective_state_update(**kw, disable_state_update=True, config=_pair(4, 3)[1])
    assert torch.equal(bits(kw["state"]), bits(state0))


def test_stages_need_the_ordered_slot_major_tile() -> None:
    with pytest.raises(ValueError, match="needs slot_major=True and ordered_sum=True"):
        LaunchConfig(4, 1, stages=2)
    assert LaunchConfig.parse("4,1,slot,evict,ordered,p3").stages == 3
    assert _pair(8, 3)[1].label == "(8,1,slot,evict,ordered,p3)"
