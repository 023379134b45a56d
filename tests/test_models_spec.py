"""The verify-step model of `ssmdecode e2e --spec` (ssmdecode.models.mamba2_spec): the conv over
T tokens against one token at a time, the two ways of keeping the state (intermediate buffer,
replay) giving the same steps bit for bit, greedy speculative decoding identical across them
and to plain greedy decoding's tokens where every draft is right."""

from __future__ import annotations

import torch

from conftest import DEVICE, bits
from ssmdecode.models.mamba2 import Mamba2Dims, Mamba2LM, conv_state_update, greedy_generate
from ssmdecode.models.mamba2_spec import Mamba2VerifyLM, Mamba2VerifyStack, conv_verify, speculative_greedy
from ssmdecode.shapes import Shape

DIMS = Mamba2Dims(shape=Shape(nheads=2, headdim=8, dstate=16, ngroups=1), d_model=32)


def test_conv_verify_is_the_one_token_conv_token_after_token() -> None:
    g = torch.Generator().manual_seed(0)
    X, W, T = 6, 4, 3
    weight, bias = torch.randn(X, W, generator=g), torch.randn(X, generator=g)
    xbc = torch.randn(2, T, X, generator=g)
    slots = torch.tensor([1, 2])
    one = torch.zeros(3, X, W)  # the plain conv state: the last W inputs
    many = torch.zeros(3, X, W - 1 + T)
    offset = torch.full((3,), T)
    want = torch.stack([conv_state_update(one, xbc[:, t], weight, bias, slots) for t in range(T)], 1)
    got = conv_verify(many, offset, xbc, weight, bias, slots)
    # two float32 convs of the same products in another order (not a kernel's result: no
    # TOLERANCES entry applies)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    # accepting 2 of the 3 tokens: the next step starts after input 2
    offset[slots] = 2
    nxt = torch.randn(2, T, X, generator=g)
    got2 = conv_verify(many, offset, nxt, weight, bias, slots)
    one2 = torch.zeros(3, X, W)
    for t in range(2):
        conv_state_update(one2, xbc[:, t], weight, bias, slots)
    want2 = torch.stack([conv_state_update(one2, nxt[:, t], weight, bias, slots) for t in range(T)], 1)
    torch.testing.assert_close(got2, want2, rtol=1e-6, atol=1e-6)


def test_buffer_and_replay_steps_are_the_same_bits() -> None:
    stacks = {
        p: Mamba2VerifyStack(DIMS, 2, slots=5, tokens=2, path=p, device=DEVICE, seed=3, window=2)
        for p in ("buffer", "replay")
    }
    g = torch.Generator().manual_seed(1)
    slots = torch.tensor([3, 1, 0], device=DEVICE)  # slot 0: a padded row
    outs = {p: [] for p in stacks}
    for _ in range(4):
        hidden = torch.randn(3, 2, 32, generator=g).to(torch.bfloat16).to(DEVICE)
        accepted = torch.randint(1, 3, (3,), generator=g).to(DEVICE)
        for path, stack in stacks.items():
            outs[path].append(stack.verify(hidden, slots))
            stack.accept(slots, accepted)
    for a, b in zip(outs["buffer"], outs["replay"], strict=True):
        assert torch.equal(bits(a[:2]), bits(b[:2]))


def test_speculative_greedy_is_the_same_across_paths_and_follows_the_drafts() -> None:
    prompts = torch.randint(0, 64, (3, 4), generator=torch.Generator().manual_seed(2)).to(DEVICE)
    plain = Mamba2LM(DIMS, 2, 64, slots=5, device=DEVICE, seed=7)
    ref_ids, _ = greedy_generate(plain, [p.tolist() for p in prompts.cpu()], n_new=12)
    drafts = ref_ids.clone()
    drafts[:, 5::3] = (drafts[:, 5::3] + 1) % 64  # some drafts wrong: acceptance varies
    runs = {}
    for path in ("buffer", "replay"):
        lm = Mamba2VerifyLM(DIMS, 2, 64, slots=5, tokens=2, path=path, device=DEVICE, seed=7, window=2)
        runs[path] = speculative_greedy(lm, prompts, drafts, n_new=8)
    ids, lps, counts = runs["buffer"]
    assert torch.equal(ids, runs["replay"][0]) and torch.equal(bits(lps), bits(runs["replay"][1]))
    assert torch.equal(counts, runs["replay"][2])
    assert (counts >= 1).all() and (counts <= 2).all() and (counts == 2).any() and (counts == 1).any()
    # the model's own greedy tokens are what plain greedy decoding makes (to its rounding)
    assert (ids == ref_ids[:, :8]).float().mean() > 0.9


def test_a_request_far_ahead_of_the_others_stays_inside_its_buffers() -> None:
    """Request 0's drafts are all right (2 tokens a step), request 1's all wrong (1 a step):
    request 0 runs past n_new + T long before request 1 is done (on the H200 the unclamped
    read of its last token tripped a device-side assert)."""
    prompts = torch.randint(0, 64, (2, 2), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    plain = Mamba2LM(DIMS, 1, 64, slots=3, device=DEVICE, seed=9)
    ref_ids, _ = greedy_generate(plain, [p.tolist() for p in prompts.cpu()], n_new=14)
    drafts = ref_ids.clone()
    drafts[1] = (drafts[1] + 1) % 64
    lm = Mamba2VerifyLM(DIMS, 1, 64, slots=3, tokens=2, path="replay", device=DEVICE, seed=9, window=2)
    ids, _, counts = speculative_greedy(lm, prompts, drafts, n_new=10)
    assert ids.shape == (2, 10) and counts.shape[0] >= 9
    assert (counts[:, 1] == 1).all() and (counts[:6, 0] == 2).all()  # then past its drafts


def test_conv_hands_the_ssm_token_major_rows() -> None:
    """conv_verify returns [B, T, X] laid out a token a row (stride 1 over X), as engines' conv
    kernels write it: its transposed view compiled the verify kernel into 68 registers instead
    of 58 on the H200 (docs/performance.md, "the verify step in the model")."""
    rows, tokens, channels, width = 3, 4, 6, 4
    g = torch.Generator().manual_seed(0)
    conv_state = torch.randn(5, channels, width - 1 + tokens, generator=g)
    offset = torch.full((5,), tokens, dtype=torch.int64)
    xbc = torch.randn(rows, tokens, channels, generator=g)
    weight, bias = torch.randn(channels, width, generator=g), torch.zeros(channels)
    out = conv_verify(conv_state, offset, xbc, weight, bias, torch.tensor([1, 2, 4]))
    assert out.shape == (rows, tokens, channels) and out.is_contiguous()
