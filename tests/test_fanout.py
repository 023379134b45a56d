"""The 1 -> T stream (ssmdecode.bench.fanout), the ceiling of multi-token calls: each
request's state read once and written to each of its T places, nothing else touched."""

from __future__ import annotations

import torch

from conftest import DEVICE, bits
from ssmdecode.bench.fanout import fanout_calls, measure_fanout_ceiling


def test_each_place_gets_the_state_and_nothing_else_changes() -> None:
    """Pool of 9 slots [S, 2, 3, 8] fp32 (48 words a slot); 2 requests of T = 3: slots 1 and 4
    read, written to pool slots (vLLM's places) in one call and to buffer rows in another."""
    g = torch.Generator().manual_seed(0)
    state = torch.randn(9, 2, 3, 8, generator=g).to(DEVICE)
    before = state.clone()
    src = torch.tensor([[1, 4]], dtype=torch.int32, device=DEVICE)
    places = torch.tensor([[2, 3, 5], [6, 7, 8]], dtype=torch.int32, device=DEVICE)
    (call,) = fanout_calls(state, src, state, [places], addend=1)
    call()
    for b, slot in enumerate((1, 4)):
        for place in places[b].tolist():
            assert torch.equal(bits(state[place]), bits(before[slot]) + 1), (b, place)
    untouched = [0, 1, 4]
    assert torch.equal(bits(state[untouched]), bits(before[untouched]))

    buffer = torch.zeros(3, 4, 2, 3, 8, device=DEVICE)  # rows of T_c = 4 token states
    rows = torch.tensor(
        [[2 * 4 + t for t in range(3)], [0 * 4 + t for t in range(3)]], dtype=torch.int32, device=DEVICE
    )
    (call,) = fanout_calls(state, src, buffer, [rows])
    call()
    assert torch.equal(bits(buffer[2, :3]), bits(state[1]).expand(3, 2, 3, 8))
    assert torch.equal(bits(buffer[0, :3]), bits(state[4]).expand(3, 2, 3, 8))
    assert (buffer[1] == 0).all() and (buffer[:, 3] == 0).all()


def test_ceiling_copies_and_keeps_the_states_read() -> None:
    state = torch.randn(6, 1, 2, 16).to(DEVICE)
    before = state.clone()
    src = torch.tensor([[0], [3]], dtype=torch.int32, device=DEVICE)
    places = [torch.tensor([[1, 2]], device=DEVICE), torch.tensor([[4, 5]], device=DEVICE)]
    timing = measure_fanout_ceiling(state, src, state, places)
    assert timing.rotation == 2
    assert torch.equal(bits(state[[0, 3]]), bits(before[[0, 3]]))
    assert torch.equal(bits(state[[1, 2]]), bits(before[0]).expand(2, 1, 2, 16))
