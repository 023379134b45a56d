"""selective_state_update(pdl=True): programmatic dependent launch.

The kernel may start under the kernel before it in the stream and loads the slot indices and
the state before that kernel has finished; everything else waits (griddepcontrol.wait). The
GPU tests check the bits against pdl=False, and that the wait holds: a producer kernel that
lets its dependents launch at once, then spins, then writes x, B, C and dt, must be waited for.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from conftest import Case, bits, make_inputs
from ssmdecode import LaunchConfig, selective_state_update

HEADLINE = Case(batch=8, nheads=16, headdim=64, dstate=128, ngroups=1, tie=True, extra_slots=24)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU tensors run only under the interpreter")
def test_pdl_is_ignored_for_cpu_tensors() -> None:
    kw = make_inputs(Case(batch=2, nheads=2, headdim=4, dstate=16, ngroups=1), "cpu")
    state0 = kw["state"].clone()
    config = LaunchConfig(4, 1)
    want = selective_state_update(**kw, config=config).clone()
    want_state = kw["state"].clone()
    kw["state"].copy_(state0)
    got = selective_state_update(**kw, config=config, pdl=True)
    assert torch.equal(bits(got), bits(want))
    assert torch.equal(bits(kw["state"]), bits(want_state))


def test_pdl_must_be_a_bool() -> None:
    kw = make_inputs(Case(batch=1, nheads=1, headdim=4, dstate=16, ngroups=1))
    state0 = kw["state"].clone()
    with pytest.raises(TypeError, match="pdl must be a bool"):
        selective_state_update(**kw, pdl="yes")
    assert torch.equal(bits(kw["state"]), bits(state0))


@pytest.mark.gpu
@pytest.mark.parametrize(
    "config",
    [None, LaunchConfig(16, 1, True, True, True), LaunchConfig(4, 4)],
    ids=lambda c: "table" if c is None else c.label,
)
def test_gpu_pdl_keeps_the_bits(config: LaunchConfig | None) -> None:
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs compute capability 9.0+")
    kw = make_inputs(HEADLINE)
    state0 = kw["state"].clone()
    want = selective_state_update(**kw, config=config).clone()
    want_state = kw["state"].clone()
    kw["state"].copy_(state0)
    torch.cuda.synchronize()  # the copy is not the kernel a pdl call may overlap
    got = selective_state_update(**kw, config=config, pdl=True)
    torch.cuda.synchronize()
    assert torch.equal(bits(got), bits(want))
    assert torch.equal(bits(kw["state"]), bits(want_state))


@triton.jit
def _late_producer(p_src, p_dst, n, spins, BLOCK: tl.constexpr):
    """Let dependents launch at once, spin, then copy src to dst: a kernel whose output a
    dependent sees only if it waits (the spin's result enters as 0 * acc, so it runs)."""
    tl.extra.cuda.gdc_launch_dependents()
    acc = tl.program_id(0).to(tl.float32)
    for _ in range(spins):
        acc = acc * 0.999 + 1.0
    o = tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        m = start + o < n
        v = tl.load(p_src + start + o, mask=m)
        tl.store(p_dst + start + o, v + (0.0 * acc).to(v.dtype), mask=m)


@triton.jit
def _reader_without_wait(p_src, p_dst, n, BLOCK: tl.constexpr):
    """The control: a dependent that copies src without waiting for the kernel before."""
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(p_dst + o, tl.load(p_src + o, mask=o < n), mask=o < n)


@pytest.mark.gpu
@pytest.mark.parametrize("capture", [False, True], ids=["stream", "graph"])
def test_gpu_pdl_waits_for_the_kernel_before(capture: bool) -> None:
    """x is written by the kernel launched just before, which lets its dependents start at
    once and then spins for about a millisecond: read before the wait, x would be zeros."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs compute capability 9.0+")
    kw = make_inputs(Case(batch=8, nheads=16, headdim=64, dstate=128, ngroups=1, extra_slots=8))
    state0 = kw["state"].clone()
    want = selective_state_update(**kw).clone()
    want_state = kw["state"].clone()
    x_true, x = kw["x"].clone(), kw["x"]
    assert x.is_contiguous()

    def step() -> torch.Tensor:
        _late_producer[(1,)](x_true, x, x.numel(), 300_000, BLOCK=1024)
        return selective_state_update(**kw, pdl=True)

    def reset() -> None:
        kw["state"].copy_(state0)
        x.zero_()

    # The control: without the wait, a dependent launched this way reads x before it is written
    seen = torch.empty_like(x)
    for _ in range(2):  # the first call compiles
        x.zero_()
        _late_producer[(1,)](x_true, x, x.numel(), 300_000, BLOCK=1024)
        _reader_without_wait[(triton.cdiv(x.numel(), 1024),)](x, seen, x.numel(), BLOCK=1024, launch_pdl=True)
        torch.cuda.synchronize()
    if torch.equal(seen, x_true):
        pytest.skip("the dependent did not start early here: the wait cannot be tested")

    reset()
    step()  # compile both kernels outside any capture
    reset()
    if capture:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        reset()
        graph.replay()
    else:
        out = step()
    torch.cuda.synchronize()
    assert torch.equal(bits(out), bits(want)), "pdl read x before the kernel before wrote it"
    assert torch.equal(bits(kw["state"]), bits(want_state))
