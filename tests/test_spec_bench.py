"""The verify-call inputs of `ssmdecode bench --tokens` (ssmdecode.bench.spec): each mode's
calls are the engines' (checked against the float64 reference), the K sets disjoint, and the
ceilings' streams touch the places the calls touch."""

from __future__ import annotations

import pytest
import torch

from conftest import DEVICE, bits
from ssmdecode import LaunchConfig, selective_state_update_reference
from ssmdecode.bench import spec
from ssmdecode.numerics import TOLERANCES
from ssmdecode.shapes import Shape

SHAPE = Shape(nheads=2, headdim=8, dstate=16, ngroups=1)
CONFIG = LaunchConfig(8, 4)


@pytest.mark.parametrize("mode", ["buffer", "dst"])
def test_verify_calls_match_the_reference(mode: str) -> None:
    s = spec.make_spec_inputs(
        SHAPE, batch=3, tokens=2, mode=mode, device=torch.device(DEVICE), seed=0, rotation=2
    )
    kw = s.kwargs(1)
    before = kw["state"].clone()
    ref_kw = {k: v for k, v in kw.items() if k not in ("out", "fast_exp")}
    want = selective_state_update_reference(**ref_kw)
    spec.call(s, 1, CONFIG)
    torch.testing.assert_close(kw["out"].double(), want[0], **TOLERANCES[kw["out"].dtype])
    torch.testing.assert_close(kw["state"].double(), want[1], **TOLERANCES[kw["state"].dtype])
    if mode == "buffer":
        rows = s.rows[1].long()
        torch.testing.assert_close(s.buffer[rows].double(), want[2][rows], **TOLERANCES[s.buffer.dtype])
        assert torch.equal(bits(kw["state"]), bits(before)), "buffer mode writes no state"
    # the sets are disjoint: call 0 touches none of call 1's slots
    flat = s.src.flatten(1)
    assert not set(flat[0].tolist()) & set(flat[1].tolist())


def test_replay_steps_run_and_the_ceiling_streams_measure() -> None:
    s = spec.make_spec_inputs(
        SHAPE, batch=3, tokens=2, mode="replay", device=torch.device(DEVICE), seed=0, rotation=2, window=2
    )
    cached = s.rings["num_cached"].clone()
    spec.call(s, 0, CONFIG)
    slots = s.src[0].long()
    assert not torch.equal(s.rings["num_cached"][slots], cached[slots]), "the bookkeeping advanced"
    streams = spec.measure_spec_ceiling(s, torch.device(DEVICE))
    assert set(streams) == {"read", "read_write"}
    assert 0.0 <= spec.flush_fraction(s, steps=4) <= 1.0
    # the bookkeeping timed alone runs on copies: the spec's stays as it was
    start, cached = s.rings["ring_start"].clone(), s.rings["num_cached"].clone()
    timing = spec.time_spec_advance(s, torch.device(DEVICE))
    assert timing.us > 0
    assert torch.equal(s.rings["ring_start"], start) and torch.equal(s.rings["num_cached"], cached)


def test_fanout_places_are_the_calls_places() -> None:
    s = spec.make_spec_inputs(
        SHAPE, batch=2, tokens=3, mode="dst", device=torch.device(DEVICE), seed=1, rotation=1
    )
    read, dst, places = s.fanout(0)
    col = s.accepted[0].long() - 1
    assert torch.equal(read, s.src[0][torch.arange(2), col])
    assert dst is s.base.state and torch.equal(places, s.src[0])
    assert spec.spec_bytes(SHAPE, 2, 3, "dst") == 4 * SHAPE.state_bytes(2)


@pytest.mark.parametrize("mode", ["buffer", "dst", "replay"])
def test_reference_check_and_bit_compare(mode: str) -> None:
    s = spec.make_spec_inputs(
        SHAPE, batch=2, tokens=2, mode=mode, device=torch.device(DEVICE), seed=3, rotation=1, window=2
    )
    ok, summary = spec.check_spec_against_reference(s, CONFIG)
    assert ok, summary
    # Under the interpreter a row sum is numpy's for every layout (tl.sum) or the spelled-out
    # upstream tree (ordered): equal within each kind, different across, which the compare
    # must see.
    plain, ordered = LaunchConfig(4, 1), LaunchConfig(8, 1, True, True, True)
    same = spec.compare_spec_configs(s, CONFIG, [plain, ordered])
    assert same == {plain: True, ordered: False}, same
    assert spec.compare_spec_configs(s, LaunchConfig(4, 1, True, True, True), [ordered]) == {ordered: True}
