"""The Mamba2 decode stack and LM of ssmdecode.models.mamba2: each piece against a direct
computation, one layer against ssmdecode.reference, and padded greedy decoding against
unpadded runs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ssmdecode.models.mamba2 import (
    NULL_SLOT,
    Mamba2DecodeStack,
    Mamba2Dims,
    Mamba2LM,
    conv_state_update,
    gated_rms_norm,
    greedy_generate,
    rms_norm,
)
from ssmdecode.numerics import TOLERANCES
from ssmdecode.reference import selective_state_update_reference
from ssmdecode.shapes import PRESETS, Shape

# The layer's own pieces (norms, conv, projections), not the kernel's out and state, which
# ssmdecode.numerics.TOLERANCES bounds: torch's float32 and bf16 against a direct computation.
# bf16 is looser than TOLERANCES[bfloat16] because a layer output goes through several bf16
# roundings (the kernel's out, the gated norm, the projection), not the kernel's one.
TOL_BF16 = dict(atol=3e-2, rtol=3e-2)
TOL_FP32 = dict(atol=1e-5, rtol=1e-5)

# H4-P6-N10-G2, d 16: groups < heads, P and N not powers of two.
TINY = Mamba2Dims(Shape(nheads=4, headdim=6, dstate=10, ngroups=2), d_model=16)


def test_dims_of_a_preset() -> None:
    """Nemotron-3-Super at TP8, the seed's shape: 16 heads and 1 group per rank."""
    dims = Mamba2Dims.from_preset(PRESETS["nemotron3-super"], tp=8)
    assert (dims.shape.nheads, dims.shape.ngroups, dims.d_model) == (16, 1, 4096)
    assert (dims.d_inner, dims.conv_dim, dims.in_proj_dim) == (1024, 1280, 2320)
    assert dims.norm_group == 1024


def test_conv_state_update_is_a_causal_conv() -> None:
    """Six steps through conv_state_update equal a causal depthwise conv1d over the sequence;
    slots nobody uses keep their bits."""
    g = torch.Generator().manual_seed(0)
    channels, width, steps, slots = 5, 4, 6, torch.tensor([2, 1])
    seq = torch.randn(2, channels, steps, generator=g)
    weight, bias = torch.randn(channels, width, generator=g), torch.randn(channels, generator=g)
    conv_state = torch.zeros(3, channels, width)
    conv_state[NULL_SLOT] = torch.randn(channels, width, generator=g)
    scratch = conv_state[NULL_SLOT].clone()
    got = torch.stack(
        [conv_state_update(conv_state, seq[:, :, t], weight, bias, slots) for t in range(steps)], dim=-1
    )
    want = F.silu(F.conv1d(seq, weight[:, None, :], bias, padding=width - 1, groups=channels)[..., :steps])
    torch.testing.assert_close(got, want, **TOL_FP32)
    torch.testing.assert_close(conv_state[2], seq[0, :, -width:], atol=0, rtol=0)
    assert torch.equal(conv_state[NULL_SLOT], scratch)


def test_gated_rms_norm_per_group() -> None:
    g = torch.Generator().manual_seed(1)
    y, z, weight = (torch.randn(2, 12, generator=g) for _ in range(3))
    got = gated_rms_norm(y, z, weight[0], group=4, eps=1e-5)
    gated = y * F.silu(z)
    want = torch.cat([rms_norm(gated[:, i : i + 4], torch.ones(4), 1e-5) for i in (0, 4, 8)], -1)
    torch.testing.assert_close(got, want * weight[0], **TOL_FP32)


def test_layer_step_against_reference() -> None:
    """B3-H4-P6-N10-G2: one layer, row 1 padded; hidden out and every state pool slot against a
    direct computation whose SSM step is ssmdecode.reference in float64."""
    stack = Mamba2DecodeStack(TINY, n_layers=1, slots=4, device="cpu", seed=2)
    g = torch.Generator().manual_seed(3)
    ssm = stack.ssm_state[0]
    ssm.copy_(torch.randn(ssm.shape, generator=g))
    stack.conv_state[0].copy_(torch.randn(stack.conv_state[0].shape, generator=g))
    hidden = torch.randn(3, TINY.d_model, generator=g).to(torch.bfloat16)
    slots = torch.tensor([3, NULL_SLOT, 1])
    ssm_before, conv_before = ssm.clone(), stack.conv_state[0].clone()

    got = stack.step(hidden, slots)

    w, s, E = stack.layers[0], TINY.shape, TINY.d_inner
    H, P, N, G = s.nheads, s.headdim, s.dstate, s.ngroups
    zxbcdt = rms_norm(hidden, w.norm, TINY.eps) @ w.in_proj.t()
    z, dt = zxbcdt[:, :E], zxbcdt[:, -H:]
    xbc = conv_state_update(conv_before.clone(), zxbcdt[:, E:-H], w.conv_weight, w.conv_bias, slots)
    x, B, C = xbc[:, :E], xbc[:, E : E + G * N], xbc[:, E + G * N :]
    y, want_ssm = selective_state_update_reference(
        ssm_before,
        x.reshape(3, H, P),
        dt[:, :, None].expand(3, H, P),
        w.A[:, None, None].expand(H, P, N),
        B.reshape(3, G, N),
        C.reshape(3, G, N),
        D=w.D[:, None].expand(H, P),
        dt_bias=w.dt_bias[:, None].expand(H, P),
        dt_softplus=True,
        state_batch_indices=slots,
        pad_slot_id=NULL_SLOT,
    )
    y = gated_rms_norm(y.to(torch.bfloat16).reshape(3, E), z, w.gate_norm, TINY.norm_group, TINY.eps)
    want = hidden + y @ w.out_proj.t()

    torch.testing.assert_close(got.float(), want.float(), **TOL_BF16)
    torch.testing.assert_close(ssm.double(), want_ssm, **TOLERANCES[ssm.dtype])
    for slot in (NULL_SLOT, 2):  # the null slot and a slot no row uses keep their bits
        assert torch.equal(ssm[slot], ssm_before[slot])


def test_padded_greedy_equals_unpadded() -> None:
    """Prompts of 3, 5 and 1 tokens decoded together (right-aligned, padded rows in the null
    slot) give each prompt the tokens and log-probs it gets alone."""
    lm = Mamba2LM(TINY, n_layers=2, vocab_size=48, slots=4, device="cpu", seed=4)
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8], [9]]
    ids, logprobs = greedy_generate(lm, prompts, n_new=3)
    assert ids.shape == logprobs.shape == (3, 3)
    assert bool((logprobs <= 0).all())
    for r, prompt in enumerate(prompts):
        alone_ids, alone_logprobs = greedy_generate(lm, [prompt], n_new=3)
        assert torch.equal(alone_ids[0], ids[r])
        torch.testing.assert_close(alone_logprobs[0], logprobs[r], **TOL_FP32)


def test_with_pools_and_state_of() -> None:
    """A stack's copy by with_pools shares the weights and owns zero pools of its own dtype and
    path; after 20 steps (a window of 16: a flush crossed) the exact replay copy's state_of
    (the checkpoint with its cached tokens replayed, nothing of the stack written) holds the
    single-token path's state bits, the fast route's within 1e-5 of its largest magnitude."""
    dims = Mamba2Dims(Shape(nheads=4, headdim=6, dstate=10, ngroups=2, dtype=torch.float32), d_model=16)
    base = Mamba2DecodeStack(dims, n_layers=1, slots=3, device="cpu", seed=2)
    copies = {p: base.with_pools(3, torch.float32, p) for p in ("table", "replay", "replay-fast")}
    assert all(c.layers is base.layers and c.ssm_state[0] is not base.ssm_state[0] for c in copies.values())
    assert copies["replay"].rings and not copies["table"].rings
    slots = torch.tensor([2, 1])
    g = torch.Generator().manual_seed(3)
    for _ in range(20):
        hidden = torch.randn(2, 16, generator=g)
        for c in copies.values():
            c.step(hidden, slots)
    replay = copies["replay"]
    pool = replay.ssm_state[0].clone()
    want = copies["table"].state_of(0, slots)
    assert torch.equal(want, copies["table"].ssm_state[0][slots])
    assert torch.equal(replay.state_of(0, slots), want)
    assert torch.equal(replay.ssm_state[0], pool), "state_of writes nothing of the stack's"
    fast = copies["replay-fast"].state_of(0, slots)
    assert (fast - want).abs().max() <= 1e-5 * want.abs().max()
    with pytest.raises(ValueError, match="path must be one of"):
        base.with_pools(3, torch.float32, "other")


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["table", "replay-fast"])
def test_step_replays_in_a_cuda_graph(path: str) -> None:
    """The step captured in a CUDA graph computes what it computes eagerly, from the same state
    (and, replaying, rings and cursors), with the slots moved between replays through the
    captured slot tensor."""
    dims = Mamba2Dims.from_preset(PRESETS["nemotron3-super"], tp=8)
    stack = Mamba2DecodeStack(dims, n_layers=2, slots=9, device="cuda", seed=5, path=path, window=3)
    for pool in stack.ssm_state:
        pool.normal_()
    for ring in stack.rings:
        for t in ring.values():
            t.uniform_(0.01, 0.1)
    stack.num_cached.copy_(torch.arange(9, device="cuda") % 4)  # slots 3 and 7 flush (3 + 2 > R = 4)
    stack.ring_start.copy_(torch.arange(9, device="cuda") % 4)
    hidden = torch.randn(4, dims.d_model, device="cuda").to(torch.bfloat16)
    slots = torch.tensor([1, 2, 3, 4], device="cuda")
    rings = [t for ring in stack.rings for t in ring.values()]
    kept = (*stack.ssm_state, *stack.conv_state, *rings, stack.ring_start, stack.num_cached)
    start = [t.clone() for t in kept]

    def restore() -> None:
        for t, saved in zip(kept, start, strict=True):
            t.copy_(saved)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        stack.step(hidden, slots)  # compiles the kernels outside the capture
    torch.cuda.current_stream().wait_stream(side)
    restore()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = stack.step(hidden, slots)
    for slot_set in ([1, 2, 3, 4], [5, 6, 7, 8]):
        restore()
        slots.copy_(torch.tensor(slot_set, device="cuda"))
        eager = stack.step(hidden, slots).clone()
        eager_state = [t.clone() for t in stack.ssm_state]
        eager_rest = [t.clone() for t in (*rings, stack.ring_start, stack.num_cached)]
        restore()
        graph.replay()
        assert torch.equal(captured, eager)
        for got, want in zip(stack.ssm_state, eager_state, strict=True):
            assert torch.equal(got, want)
        for got, want in zip((*rings, stack.ring_start, stack.num_cached), eager_rest, strict=True):
            assert torch.equal(got, want)
        if path != "table":  # each step advanced the cursors of its slots, and only theirs
            moved = (stack.num_cached != start[-1]) | (stack.ring_start != start[-2])
            assert moved[slot_set].all() and int(moved.sum()) == len(slot_set)
