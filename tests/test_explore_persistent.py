"""The persistent-grid exploration kernel (benchmarks/explore_persistent.py) computes what the
library computes: same bits as an ordered config, on the bench's inputs (under the interpreter
on CPU, compiled on a GPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from conftest import DEVICE, bits
from ssmdecode import LaunchConfig, selective_state_update
from ssmdecode.bench.inputs import make_inputs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from explore_persistent import Persistent


@pytest.mark.parametrize("block_m,stages", [(4, 1), (8, 3)])
def test_persistent_kernel_matches_the_ordered_config(block_m: int, stages: int) -> None:
    inputs = make_inputs(batch=3, nheads=2, headdim=8, dstate=32, ngroups=1,
                         state_dtype=torch.float32, dtype=torch.bfloat16, pool=8,
                         device=torch.device(DEVICE), seed=3)
    state0 = inputs.state.clone()
    want_out = torch.empty(inputs.out.shape, dtype=torch.float32, device=DEVICE)
    selective_state_update(**inputs.kwargs(0, out=want_out),
                           config=LaunchConfig(block_m, 1, True, True, True))
    want_state = inputs.state.clone()
    inputs.state.copy_(state0)
    got_out = torch.full_like(want_out, float("nan"))
    Persistent(block_m, stages, per_sm=0)(**inputs.kwargs(0, out=got_out))
    assert torch.equal(bits(got_out), bits(want_out))
    assert torch.equal(bits(inputs.state), bits(want_state))
