"""Stochastic rounding of 16-bit state stores (rand_seed): the kernels' bits against the
reference (ssmdecode.ops.selective_state_update.naive: Philox and the rounding, written in
NumPy), its statistics (unbiased, the spread of a Bernoulli draw, the drift round-to-nearest
cannot follow), the seed's determinism, the argument checks, and the engine adapters' rules.

The exact value before rounding is what the same call writes into a float32 copy of the pool:
the kernels compute in float32 whatever the state's dtype, and a 16-bit state loads exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from conftest import DEVICE
from ssmdecode import LaunchConfig, selective_state_update
from ssmdecode.compat import sglang, vllm
from ssmdecode.numerics import bits
from ssmdecode.ops.selective_state_update import replay_flush
from ssmdecode.ops.selective_state_update.checks import DEFAULT_PHILOX_ROUNDS
from ssmdecode.ops.selective_state_update.common import _philox2x32, _stochastic_round, _stochastic_round_f16
from ssmdecode.ops.selective_state_update.naive import (
    philox2x32,
    random_bits,
    row_offsets,
    stochastic_round,
)

STATE, BUFFER = 0, 1  # the kernels' Philox streams (common.STREAM_STATE, STREAM_BUFFER)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# One program a (request, head) at these sizes: the interpreter's cost is the program count.
CONFIGS = [LaunchConfig(block_m=4, num_warps=1), LaunchConfig.parse("4,1,slot,evict,ordered")]


def _seed(value: int) -> torch.Tensor:
    return torch.tensor([value], dtype=torch.int64, device=DEVICE)


def _inputs(batch: int = 2, nheads: int = 2, headdim: int = 4, dstate: int = 16, slots: int = 5):
    """A Mamba2 call's tensors (float32 state pool) with states spread over many binades, from
    fp16's subnormals up, so that every path of the rounding is taken."""
    g = torch.Generator().manual_seed(0)
    magnitude = torch.pow(10.0, torch.empty(slots, nheads, headdim, dstate).uniform_(-7, 2, generator=g))
    sign = torch.where(torch.rand(slots, nheads, headdim, dstate, generator=g) < 0.5, -1.0, 1.0)
    kw = dict(
        x=torch.randn(batch, nheads, headdim, generator=g),
        dt=torch.rand(batch, nheads, headdim, generator=g) * 0.1,
        A=-torch.rand(nheads, headdim, dstate, generator=g),
        B=torch.randn(batch, 1, dstate, generator=g) * 1e-3,
        C=torch.randn(batch, 1, dstate, generator=g),
        D=torch.randn(nheads, headdim, generator=g),
        dt_bias=torch.zeros(nheads, headdim),
        state_batch_indices=torch.tensor([3, 1][:batch], dtype=torch.int32),
    )
    kw = {k: v.to(DEVICE) for k, v in kw.items()}
    return (magnitude * sign).to(DEVICE), kw


def _exact_and_rounded(dtype, config, philox_rounds=DEFAULT_PHILOX_ROUNDS, seed=1234, **extra):
    """(float32 pool after the call, dtype pool after the call with rand_seed, the 16-bit
    pool before, the outs of both)."""
    state32, kw = _inputs()
    state16 = state32.to(dtype)
    exact = state16.float()
    out_exact = selective_state_update(exact, **kw, **extra, config=config)
    rounded = state16.clone()
    out_rounded = selective_state_update(
        rounded, **kw, **extra, config=config, rand_seed=_seed(seed), philox_rounds=philox_rounds
    )
    return exact, rounded, state16, out_exact, out_rounded, kw


def _expected(
    exact: torch.Tensor,
    pool: torch.Tensor,
    slots: torch.Tensor,
    seed: int,
    rounds: int = DEFAULT_PHILOX_ROUNDS,
):
    """The reference's rounding of the exact states of these slots, as the kernels key it."""
    heads = torch.arange(pool.shape[1])
    rows = row_offsets(pool, (slots.long()[:, None].cpu(), heads[None, :]))
    r = random_bits(seed, rows, pool.shape[-1], STATE, pool.dtype, rounds)
    return stochastic_round(exact[slots.long()], r, pool.dtype)


# Random123's known answers for philox2x32 (its tests/kat_vectors): counter, key, rounds, words.
PHILOX2X32_KAT = [
    ((0x00000000, 0x00000000), 0x00000000, 7, (0x257A3673, 0xCD26BE2A)),
    ((0xFFFFFFFF, 0xFFFFFFFF), 0xFFFFFFFF, 7, (0xAB302C4D, 0x3DC9D239)),
    ((0x243F6A88, 0x85A308D3), 0x13198A2E, 7, (0xBEDBBE6B, 0xE4C770B3)),
    ((0x00000000, 0x00000000), 0x00000000, 10, (0xFF1DAE59, 0x6CD10DF2)),
    ((0xFFFFFFFF, 0xFFFFFFFF), 0xFFFFFFFF, 10, (0x2C3F628B, 0xAB4FD7AD)),
    ((0x243F6A88, 0x85A308D3), 0x13198A2E, 10, (0xDD7CE038, 0xF62A4C12)),
]


@pytest.mark.parametrize("counter,key,rounds,want", PHILOX2X32_KAT)
def test_philox2x32_reference_gives_random123s_known_answers(counter, key, rounds, want) -> None:
    # the reference's key is the seed's halves XORed: a seed of high word 0 is the key itself
    words = philox2x32(key, np.uint32(counter[0]), np.uint32(counter[1]), rounds)
    assert tuple(int(w) for w in words) == want


def _word_statistics(rounds: int, n: int = 1 << 16) -> tuple[float, float, float]:
    """Of naive.philox2x32's words at these rounds, over n counters laid out as the kernels
    lay them (consecutive row offsets, the column groups in the second word): the fraction of
    output bits a one-bit change of the counter flips (worst bit), the worst chi-square over 16
    buckets of the top 4 bits of each field the stores take (bits 0-15 and 16-31 for bf16,
    0-12 and 19-31 for fp16), and the correlation of neighbouring rows' words."""
    rows = np.arange(n, dtype=np.uint64) * np.uint64(128)
    c1 = (np.arange(n, dtype=np.uint64) % np.uint64(32)) << np.uint64(16)
    w = np.stack(philox2x32(99, rows, c1, rounds), axis=-1).astype(np.uint64)
    flips = []
    for bit in (0, 7, 11, 20, 31):
        o = np.stack(philox2x32(99, rows ^ np.uint64(1 << bit), c1, rounds), axis=-1).astype(np.uint64)
        x = w ^ o
        flips.append(sum(float(((x >> np.uint64(b)) & np.uint64(1)).sum()) for b in range(32)) / (n * 64))
    chi2 = 0.0
    for top in (12, 28, 9):  # the fields' top 4 bits start there (28: both high fields)
        nibbles = ((w >> np.uint64(top)) & np.uint64(15)).reshape(-1)
        counts = np.bincount(nibbles.astype(np.int64), minlength=16)
        chi2 = max(chi2, float(((counts - nibbles.size / 16) ** 2 / (nibbles.size / 16)).sum()))
    a = w[:, 0].astype(np.float64)
    corr = float(np.corrcoef(a[:-1], a[1:])[0, 1])
    return max(abs(f - 0.5) for f in flips), chi2, corr


@pytest.mark.parametrize("rounds", [10, 7, 4])
def test_philox_words_look_random_at_the_offered_rounds(rounds: int) -> None:
    """Half the output bits flip for any one-bit change of the counter, each field's top bits
    fill 16 buckets evenly (chi-square with 15 degrees of freedom under 50: p < 1e-5 otherwise), and
    neighbouring rows' words are uncorrelated (within 5 standard errors)."""
    worst_flip, chi2, corr = _word_statistics(rounds)
    assert worst_flip < 0.01 and chi2 < 50 and abs(corr) < 5 / np.sqrt(1 << 16)


def test_philox_word_statistics_catch_too_few_rounds() -> None:
    """The checks above fail for one round: they can tell."""
    worst_flip, _, corr = _word_statistics(1)
    assert worst_flip > 0.1 or abs(corr) > 0.5


def _drift(rounds: int | None, steps: int = 1024, elements: int = 8192) -> float:
    """The relative error against float64 of a bf16 state of `elements` slow-decaying elements
    (s = 0.999 s + b x, x varying per step) after `steps` steps, each store rounded
    stochastically with the kernels' bits (naive.random_bits, a fresh seed a step, rows of
    128 columns) at these Philox rounds, or with NumPy's generator (rounds None)."""
    rng = np.random.default_rng(0)
    rows = np.arange(elements // 128, dtype=np.int64) * 128
    a, b = np.float32(0.999), (rng.standard_normal(elements) * 1e-3).astype(np.float32)
    s64, s = np.zeros(elements), torch.zeros(elements, dtype=torch.bfloat16)
    seeds = np.random.default_rng(1)
    for t in range(steps):
        x = np.float32(np.sin(t * 0.01) + 1.0)
        v = torch.from_numpy((s.float().numpy() * a + b * x).astype(np.float32))
        s64 = s64 * float(a) + b.astype(np.float64) * float(x)
        if rounds is None:
            r = seeds.integers(0, 1 << 16, elements).astype(np.uint32)
        else:
            r = random_bits(int(seeds.integers(0, 2**62)), rows, 128, STATE, torch.bfloat16, rounds).reshape(
                -1
            )
        s = stochastic_round(v, r, torch.bfloat16)
    return float(np.linalg.norm(s.double().numpy() - s64) / np.linalg.norm(s64))


def test_few_philox_rounds_drift_as_an_ideal_generator_does() -> None:
    """Over a long decode the rounding error of 4 and 10 Philox rounds is an ideal generator's
    (within 15%); of 1 round, with its words far from random, it is several times larger."""
    ideal = _drift(None)
    for rounds in (10, 4):
        assert abs(_drift(rounds) / ideal - 1) < 0.15, rounds
    assert _drift(1) > 3 * ideal


@triton.jit
def _philox_kernel(p_out, p_seed, N: tl.constexpr, ROUNDS: tl.constexpr):
    i = tl.arange(0, N)
    seed = tl.load(p_seed)
    key = (seed ^ (seed >> 32)).to(tl.uint32)
    w0, w1 = _philox2x32((i * 1640531527).to(tl.uint32), (i * 7 + 3).to(tl.uint32), key, ROUNDS)
    tl.store(p_out + i * 2, w0.to(tl.int32, bitcast=True))
    tl.store(p_out + i * 2 + 1, w1.to(tl.int32, bitcast=True))


@triton.jit
def _rounding_kernel(p_out, p_v, p_r, N: tl.constexpr, DTYPE: tl.constexpr):
    i = tl.arange(0, N)
    v = tl.load(p_v + i)
    r = tl.load(p_r + i).to(tl.uint32, bitcast=True)
    tl.store(p_out + i, _stochastic_round(v, r, DTYPE))


def test_kernel_philox_is_the_reference() -> None:
    """common._philox2x32 (the 64-bit product, the key of a 64-bit seed) against
    naive.philox2x32, in the interpreter (or on the GPU)."""
    n = 16
    i = np.arange(n, dtype=np.uint64)
    for seed, rounds in ((0, 10), (2**40 + 12345, 10), (-7, 5), (2**62 + 3, 7)):
        out = torch.empty(n * 2, dtype=torch.int32, device=DEVICE)
        _philox_kernel[(1,)](out, _seed(seed), N=n, ROUNDS=rounds)
        want = np.stack(philox2x32(seed, (i * 1640531527) & 0xFFFFFFFF, i * 7 + 3, rounds), axis=-1)
        assert np.array_equal(out.cpu().numpy().view(np.uint32), want.reshape(-1)), (seed, rounds)


def test_each_dtype_takes_its_fields_of_the_words() -> None:
    """naive.random_bits: column 4g + k of a row takes word k // 2 of call g, bits 0-15 / 16-31
    of it for bf16 and bits 0-12 / 19-31 for fp16; stochastic_round refuses wider bits."""
    rows = np.array([0, 4096, 2**33 + 128], dtype=np.int64)
    o = rows.astype(np.uint64)[:, None]
    c1 = ((o >> np.uint64(32)) & np.uint64(0xFFFF)) | (np.arange(3, dtype=np.uint64) << np.uint64(16))
    w0, w1 = (
        w.astype(np.uint64) for w in philox2x32(5, o & np.uint64(0xFFFFFFFF), c1, DEFAULT_PHILOX_ROUNDS)
    )
    fields = {torch.bfloat16: (0xFFFF, 16), torch.float16: (0x1FFF, 19)}
    for dtype, (low, shift) in fields.items():
        want = np.stack(
            [w0 & np.uint64(low), w0 >> np.uint64(shift), w1 & np.uint64(low), w1 >> np.uint64(shift)], -1
        )
        got = random_bits(5, rows, 12, STATE, dtype)
        assert np.array_equal(got, want.reshape(3, 12)), dtype
    with pytest.raises(ValueError, match="13 random bits"):
        stochastic_round(torch.ones(4), np.full(4, 0x2000, dtype=np.uint32), torch.float16)
    with pytest.raises(ValueError, match="float16 and bfloat16"):
        random_bits(5, rows, 12, STATE, torch.float32)


@pytest.mark.parametrize("name", list(DTYPES))
def test_special_values_round_as_the_reference(name: str) -> None:
    """The rounding alone on the values at its edges: zeros, fp16's subnormals and its smallest
    normal, the largest finite values and what lies past them, the infinities and NaN, each
    with random bits at both ends of their range and between."""
    dtype = DTYPES[name]
    top = torch.finfo(dtype).max
    edges = [0.0, -0.0, 2.0**-24, 3 * 2.0**-26, 2.0**-14 - 2.0**-30, 2.0**-14, 1.0, -1.5, 1 + 2.0**-9,
             top, -top, top * (1 - 2.0**-12), top * (1 + 2.0**-12), 3.0e38, 3.4e38, float("inf"),
             -float("inf"), float("nan"), 1e-30, -7e-9]  # fmt: skip
    v = torch.tensor(edges, dtype=torch.float32).repeat_interleave(4)
    top_r = (1 << (16 if dtype == torch.bfloat16 else 13)) - 1  # the random bits a store takes
    r = torch.tensor([0, top_r, (top_r + 1) // 2, 0x1234 & top_r] * len(edges), dtype=torch.int32)
    n = 128
    v = torch.cat([v, torch.ones(n - len(v))])
    r = torch.cat([r, torch.zeros(n - len(r), dtype=torch.int32)])
    out = torch.empty(n, dtype=dtype, device=DEVICE)
    _rounding_kernel[(1,)](
        out, v.to(DEVICE), r.to(DEVICE), N=n, DTYPE=tl.bfloat16 if dtype == torch.bfloat16 else tl.float16
    )
    want = stochastic_round(v, r.numpy().astype(np.uint32), dtype)
    got = out.cpu()
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan)
    assert torch.equal(bits(got[~nan]), bits(want[~nan]))
    # past the largest finite value the rounding saturates; the infinities stay
    assert bool((got[torch.isfinite(v) & (v.abs() >= top)].abs() == top).all())
    assert bool(torch.isinf(got[torch.isinf(v)]).all())


@triton.jit
def _pair_rounding_kernel(p_out, p_v, p_w, M: tl.constexpr, N: tl.constexpr, GROUPED: tl.constexpr):
    G: tl.constexpr = N // 4
    call = tl.arange(0, M)[:, None] * G + tl.arange(0, G)[None, :]  # [M, G]
    w0 = tl.load(p_w + 2 * call).to(tl.uint32, bitcast=True)
    w1 = tl.load(p_w + 2 * call + 1).to(tl.uint32, bitcast=True)
    if GROUPED:  # the ordered sum's tile [G, M, 4]
        o = tl.arange(0, G)[:, None, None] * 4 + tl.arange(0, M)[None, :, None] * N
        o += tl.arange(0, 4)[None, None, :]
        w0, w1 = tl.trans(w0)[:, :, None], tl.trans(w1)[:, :, None]
        h = _stochastic_round_f16(tl.load(p_v + o), w0, w1, N, True)
    else:
        o = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
        h = _stochastic_round_f16(tl.load(p_v + o), w0[:, :, None], w1[:, :, None], N, False)
    tl.store(p_out + o, h)


@pytest.mark.parametrize("grouped", [False, True], ids=["tile", "grouped"])
def test_fp16_store_masks_a_pair_at_a_time_as_the_reference(grouped: bool) -> None:
    """The fp16 store of the kernels (a mask a pair of columns, from their Philox word) on the
    edge values beside ordinary ones, in every position of a pair and of a call, with words of
    all ones, all zeros and random ones: the bits of naive.stochastic_round with the fields of
    the words (bits 0-12 of word k // 2 for an even column k of a call, 19-31 for an odd one).
    Between 65504 and 65520 an element takes its random bits, which cannot carry it past the
    largest finite value toward zero: the reference's bits, which take none there."""
    rows, n = 8, 16
    edges = [0.0, -0.0, 2.0**-24, 3 * 2.0**-26, 2.0**-14 - 2.0**-30, 2.0**-14, 1 + 2.0**-9, -1.5, 65472.0,
             65500.0, 65504.0, -65504.0, 65510.0, 65519.99, 65520.0, -65530.0, 70000.0, 3.4e38,
             float("inf"), -float("inf"), float("nan"), 1e-30, -7e-9]  # fmt: skip
    gen = torch.Generator().manual_seed(18)
    v = torch.randn(rows * n, generator=gen) * 3  # an ordinary value beside each edge value
    v[0 : 2 * len(edges) : 2] = torch.tensor(edges)  # an even column, then an odd one
    v[65 : 65 + 2 * len(edges) : 2] = torch.tensor(edges)
    v = v.reshape(rows, n)
    k = np.arange(n) % 4
    for fill in ("ones", "zeros", "random"):
        words = torch.randint(-(2**31), 2**31, (rows, n // 4, 2), generator=gen, dtype=torch.int64)
        if fill != "random":
            words.fill_(-1 if fill == "ones" else 0)
        words = words.to(torch.int32)
        out = torch.empty(rows, n, dtype=torch.float16, device=DEVICE)
        _pair_rounding_kernel[(1,)](out, v.to(DEVICE), words.to(DEVICE), M=rows, N=n, GROUPED=grouped)
        word = words.numpy().view(np.uint32).astype(np.uint64)[:, np.arange(n) // 4, k // 2]  # a column's
        want = stochastic_round(v, np.where(k % 2 == 0, word & 0x1FFF, word >> 19), torch.float16)
        got = out.cpu()
        nan = torch.isnan(want)
        assert torch.equal(torch.isnan(got), nan), fill
        assert torch.equal(bits(got[~nan]), bits(want[~nan])), fill


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.label)
@pytest.mark.parametrize("name", list(DTYPES))
def test_single_token_bits_match_the_reference(name: str, config: LaunchConfig) -> None:
    dtype = DTYPES[name]
    exact, rounded, before, out_exact, out_rounded, kw = _exact_and_rounded(dtype, config)
    slots = kw["state_batch_indices"]
    want = _expected(exact, rounded, slots, 1234)
    assert torch.equal(bits(rounded[slots.long()]), bits(want))
    untouched = [s for s in range(rounded.shape[0]) if s not in slots.tolist()]
    assert torch.equal(bits(rounded[untouched]), bits(before[untouched]))
    assert torch.equal(bits(out_rounded), bits(out_exact))  # out is computed before the store
    # each element is one of the two neighbours of the exact value, and not always the nearest
    s = exact[slots.long()]
    nearest = s.to(dtype)
    other = torch.where(nearest.float() > s, torch.nextafter(nearest, -torch.full_like(nearest, np.inf)),
                        torch.nextafter(nearest, torch.full_like(nearest, np.inf)))  # fmt: skip
    got = rounded[slots.long()]
    assert bool(((got == nearest) | (got == other) | (nearest.float() == s)).all())
    assert 0.2 < float((got != nearest).float().mean()) < 0.8


def test_philox_rounds_are_honoured() -> None:
    config = CONFIGS[0]
    exact, rounded, *_, kw = _exact_and_rounded(torch.bfloat16, config, philox_rounds=5)
    slots = kw["state_batch_indices"]
    got = bits(rounded[slots.long()])
    assert torch.equal(got, bits(_expected(exact, rounded, slots, 1234, rounds=5)))
    assert not torch.equal(got, bits(_expected(exact, rounded, slots, 1234, rounds=10)))


def test_same_seed_same_bits_other_seed_other_bits() -> None:
    config = CONFIGS[0]
    _, a, *_ = _exact_and_rounded(torch.bfloat16, config, seed=99)
    _, b, *_ = _exact_and_rounded(torch.bfloat16, config, seed=99)
    _, c, *_ = _exact_and_rounded(torch.bfloat16, config, seed=100)
    assert torch.equal(bits(a), bits(b))
    assert float((bits(a) != bits(c)).float().mean()) > 0.1


def test_seed_tensor_is_read_on_the_device() -> None:
    """The seed is a tensor the kernel reads: changing its value in place changes the bits
    (what a CUDA graph replay with a refreshed seed relies on)."""
    state32, kw = _inputs()
    seed = _seed(5)
    a = state32.to(torch.bfloat16)
    b = a.clone()
    selective_state_update(a, **kw, config=CONFIGS[0], rand_seed=seed)
    seed.fill_(6)
    selective_state_update(b, **kw, config=CONFIGS[0], rand_seed=seed)
    assert not torch.equal(bits(a), bits(b))


def _verify_inputs(tokens: int = 3):
    state32, kw = _inputs(batch=2)
    g = torch.Generator().manual_seed(7)
    kw = dict(kw)
    for name in ("x", "dt"):
        kw[name] = kw[name][:, None].expand(2, tokens, *kw[name].shape[1:]).contiguous()
    for name in ("B", "C"):
        scale = 1 + torch.rand(2, tokens, 1, 1, generator=g).to(DEVICE)
        kw[name] = (kw[name][:, None] * scale).contiguous()
    return state32, kw


@pytest.mark.parametrize("round_buffer", [True, False])
def test_verify_buffer_and_final_state(round_buffer: bool) -> None:
    """sglang's layout: every token's state into the buffer (stream BUFFER, the buffer's own
    row offsets), the final state into the slot (stream STATE); with _round_buffer=False (the
    sglang adapter) the buffer rounds to nearest."""
    from ssmdecode.ops.selective_state_update import decode
    from ssmdecode.ops.selective_state_update.arguments import UpdateArgs

    tokens, dtype, config = 3, torch.bfloat16, CONFIGS[0]
    state32, kw = _verify_inputs(tokens)
    rows = torch.tensor([2, 0], dtype=torch.int32, device=DEVICE)
    buf16 = torch.zeros(3, tokens, *state32.shape[1:], dtype=dtype, device=DEVICE)
    state16 = state32.to(dtype)
    exact, buf32 = state16.float(), buf16.float()
    selective_state_update(
        exact, **kw, intermediate_states=buf32, intermediate_state_indices=rows, config=config
    )
    rounded = state16.clone()
    args = UpdateArgs(
        state=rounded, **kw, intermediate_states=buf16, intermediate_state_indices=rows, config=config,
        rand_seed=_seed(77),
    )  # fmt: skip
    call, launch = decode.prepare(args, _round_buffer=round_buffer)
    decode.run(call, launch)
    slots = kw["state_batch_indices"]
    assert torch.equal(bits(rounded[slots.long()]), bits(_expected(exact, rounded, slots, 77)))
    heads = torch.arange(state32.shape[1])
    t = torch.arange(tokens)
    offsets = row_offsets(buf16, (rows.long().cpu()[:, None, None], t[None, :, None], heads[None, None, :]))
    if round_buffer:
        r = random_bits(77, offsets, buf16.shape[-1], BUFFER, dtype)
        want = stochastic_round(buf32[rows.long()], r, dtype)
    else:  # the store of a call without rand_seed (the interpreter's conversion truncates)
        plain = torch.zeros_like(buf16)
        selective_state_update(
            state16.clone(), **kw, intermediate_states=plain, intermediate_state_indices=rows, config=config
        )
        want = plain[rows.long()]
    assert torch.equal(bits(buf16[rows.long()]), bits(want))
    assert torch.equal(bits(buf16[1]), bits(torch.zeros_like(buf16[1])))  # the row nobody uses


def test_verify_per_token_slots() -> None:
    """vLLM's layout: token t's state to slot dst[b, t], each rounded with its slot's keys."""
    tokens, dtype, config = 2, torch.float16, CONFIGS[1]
    state32, kw = _verify_inputs(tokens)
    dst = torch.tensor([[0, 2], [4, 1]], dtype=torch.int32, device=DEVICE)
    kw["state_batch_indices"] = torch.tensor([[3, 0], [1, 4]], dtype=torch.int32, device=DEVICE)
    kw["num_accepted_tokens"] = torch.tensor([1, 1], dtype=torch.int32, device=DEVICE)
    state16 = state32.to(dtype)
    exact = state16.float()
    selective_state_update(exact, **kw, dst_state_batch_indices=dst, config=config)
    rounded = state16.clone()
    selective_state_update(rounded, **kw, dst_state_batch_indices=dst, config=config, rand_seed=_seed(3))
    written = dst.reshape(-1)
    assert torch.equal(bits(rounded[written.long()]), bits(_expected(exact, rounded, written, 3)))
    assert torch.equal(bits(rounded[3]), bits(state16[3]))


def test_replay_flush_rounds_the_checkpoint() -> None:
    """replay_flush writes each slot's checkpoint plus its cached tokens, stochastically."""
    dtype, config = torch.bfloat16, CONFIGS[0]
    S, H, P, N, R = 4, 2, 4, 16, 6
    g = torch.Generator().manual_seed(11)
    state16 = torch.randn(S, H, P, N, generator=g).to(dtype).to(DEVICE)
    rings = dict(
        x_cache=torch.randn(S, H, R, P, generator=g).to(DEVICE),
        B_cache=torch.randn(S, 1, R, N, generator=g).to(DEVICE),
        dt_cache=(torch.rand(S, H, R, generator=g) * 0.1).to(DEVICE),
        ring_start=torch.tensor([0, 3, 5, 1], dtype=torch.int32, device=DEVICE),
        num_cached=torch.tensor([2, 4, 1, 3], dtype=torch.int32, device=DEVICE),
    )
    A = (-torch.rand(H, 1, 1, generator=g)).to(DEVICE).expand(H, P, N)  # tied: expand on the device
    slots = torch.tensor([2, 0, 3], dtype=torch.int32, device=DEVICE)
    exact = state16.float()
    copies = {k: v.clone() for k, v in rings.items()}
    replay_flush(exact, **copies, A=A, state_batch_indices=slots, config=config)
    rounded = state16.clone()
    replay_flush(rounded, **rings, A=A, state_batch_indices=slots, config=config, rand_seed=_seed(8))
    assert torch.equal(bits(rounded[slots.long()]), bits(_expected(exact, rounded, slots, 8)))
    assert torch.equal(bits(rounded[1]), bits(state16[1]))


@pytest.mark.parametrize("rounds", [10, 4])
@pytest.mark.parametrize("name", list(DTYPES))
def test_unbiased_with_a_bernoulli_spread(name: str, rounds: int) -> None:
    """Over many seeds each element rounds up with probability f, its distance above the value
    below in steps: the mean error is 0 (round-to-nearest's is not) and its mean square is
    f (1 - f) steps squared; at the default 10 Philox rounds and at the fast 4."""
    dtype, config = DTYPES[name], CONFIGS[0]
    state32, kw = _inputs(batch=1, nheads=1, headdim=4, dstate=16)
    state16 = state32.to(dtype)
    exact = state16.float()
    selective_state_update(exact, **kw, config=config)
    slot = int(kw["state_batch_indices"][0])
    s = exact[slot].double()
    down = s.to(dtype)
    down = torch.where(down.double() > s, torch.nextafter(down, torch.full_like(down, -np.inf)), down)
    up = torch.nextafter(down, torch.full_like(down, np.inf))
    step = up.double() - down.double()
    f = (s - down.double()) / step
    errors = []
    for seed in range(48):
        rounded = state16.clone()
        selective_state_update(rounded, **kw, config=config, rand_seed=_seed(seed), philox_rounds=rounds)
        errors.append((rounded[slot].double() - s) / step)
    e = torch.stack(errors)  # [seeds, elements...] in steps
    n = e.numel()
    sigma = float(torch.sqrt((f * (1 - f)).mean() / n))
    assert abs(float(e.mean())) < 5 * sigma + 1e-4
    assert abs(float((e * e).mean() - (f * (1 - f)).mean())) < 0.1 * float((f * (1 - f)).mean()) + 1e-3
    rtn = (s.to(dtype).double() - s) / step
    assert float((rtn.abs() <= 0.5 + 1e-9).float().mean()) == 1.0


def test_small_increments_accumulate_where_round_to_nearest_stalls() -> None:
    """A bf16 state of 1.0 that gains 0.3 of a step a token (dA = 1): round-to-nearest never
    moves it; stochastic rounding follows the exact sum, 0.3 steps a token on average."""
    config, steps, H, P, N = CONFIGS[0], 64, 1, 4, 16
    step = 2.0**-7  # bf16's spacing in [1, 2)
    kw = dict(
        x=torch.ones(1, H, P, device=DEVICE),
        dt=torch.ones(1, H, P, device=DEVICE),
        A=torch.zeros(H, P, N, device=DEVICE),
        B=torch.full((1, 1, N), 0.3 * step, device=DEVICE),
        C=torch.ones(1, 1, N, device=DEVICE),
    )
    rtn = torch.ones(1, H, P, N, dtype=torch.bfloat16, device=DEVICE)
    sr = rtn.clone()
    seed = _seed(0)
    for t in range(steps):
        selective_state_update(rtn, **kw, config=config)
        seed.fill_(t + 1)
        selective_state_update(sr, **kw, config=config, rand_seed=seed)
    assert bool((rtn == 1.0).all())
    gained = (sr.double() - 1.0) / step  # in steps; the exact gain is 0.3 * steps
    assert abs(float(gained.mean()) - 0.3 * steps) < 0.1 * 0.3 * steps


@pytest.mark.parametrize(
    "edit,error,match",
    [
        (dict(rand_seed=[1]), TypeError, "rand_seed must be a torch.Tensor"),
        (dict(rand_seed=torch.tensor([1.0])), TypeError, "rand_seed has dtype"),
        (dict(rand_seed=torch.tensor([1, 2])), ValueError, "rand_seed has shape"),
        (dict(philox_rounds=0), ValueError, "philox_rounds is 0"),
        (dict(philox_rounds=True), TypeError, "philox_rounds must be an int"),
        (dict(state_dtype=torch.float32), ValueError, "every state store is float32"),
    ],
)
def test_bad_arguments_raise_and_write_nothing(edit: dict, error: type, match: str) -> None:
    edit = dict(edit)
    state32, kw = _inputs()
    state = state32.to(edit.pop("state_dtype", torch.bfloat16))
    before = state.clone()
    args = {"rand_seed": _seed(1), **edit}
    if isinstance(args["rand_seed"], torch.Tensor):
        args["rand_seed"] = args["rand_seed"].to(DEVICE)
    with pytest.raises(error, match=match):
        selective_state_update(state, **kw, config=CONFIGS[0], **args)
    assert torch.equal(bits(state), bits(before))


def _args(kw: dict, adapter: str) -> tuple:
    """The positional arguments after state of an engine's selective_state_update: x, dt, A,
    B, C, D (sglang), then dt_bias (vLLM)."""
    head = (kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], kw["D"])
    return head + ((kw["dt_bias"],) if adapter == "vllm" else ())


def _engine_inputs(dtype: torch.dtype):
    state32, kw = _inputs()
    return state32.to(dtype), kw


def test_vllm_adapter_rounds_the_final_state_with_a_drawn_seed() -> None:
    state, kw = _engine_inputs(torch.float16)
    exact = state.float()
    out = torch.empty_like(kw["x"])
    slots = kw["state_batch_indices"]
    vllm.selective_state_update(exact, *_args(kw, "vllm"), out=out, state_batch_indices=slots)
    torch.manual_seed(21)
    want_seed = int(torch.randint(0, 2**32, (1,), device=DEVICE, dtype=torch.int64))
    torch.manual_seed(21)
    vllm.selective_state_update(
        state, *_args(kw, "vllm"), out=out, state_batch_indices=slots, enable_stochastic_rounding=True
    )
    assert torch.equal(bits(state[slots.long()]), bits(_expected(exact, state, slots, want_seed, rounds=10)))


def test_vllm_adapter_rounds_nothing_stochastically_in_speculative_decoding() -> None:
    state32, kw = _verify_inputs(2)
    state = state32.to(torch.float16)
    src = torch.tensor([[3, 0], [1, 4]], dtype=torch.int32, device=DEVICE)
    accepted = torch.tensor([1, 2], dtype=torch.int32, device=DEVICE)
    outs = []
    for enable in (False, True):
        s = state.clone()
        out = torch.empty_like(kw["x"])
        vllm.selective_state_update(
            s, *_args(kw, "vllm"), out=out, state_batch_indices=src, num_accepted_tokens=accepted,
            enable_stochastic_rounding=enable,
        )  # fmt: skip
        outs.append(s)
    assert torch.equal(bits(outs[0]), bits(outs[1]))


@pytest.mark.parametrize("adapter", ["sglang", "vllm"])
def test_adapters_take_fp16_states_only(adapter: str) -> None:
    state, kw = _engine_inputs(torch.bfloat16)
    before = state.clone()
    out = torch.empty_like(kw["x"])
    fn = sglang.selective_state_update if adapter == "sglang" else vllm.selective_state_update
    with pytest.raises(ValueError, match=r"requires state dtype torch\.float16"):
        fn(state, *_args(kw, adapter), out=out, state_batch_indices=kw["state_batch_indices"],
           enable_stochastic_rounding=True)  # fmt: skip
    assert torch.equal(bits(state), bits(before))


@pytest.mark.parametrize("adapter", ["sglang", "vllm"])
def test_adapters_refuse_negative_philox_rounds(adapter: str) -> None:
    state, kw = _engine_inputs(torch.float16)
    out = torch.empty_like(kw["x"])
    fn = sglang.selective_state_update if adapter == "sglang" else vllm.selective_state_update
    with pytest.raises(ValueError, match="cache_philox_rounds must be non-negative"):
        fn(state, *_args(kw, adapter), out=out, state_batch_indices=kw["state_batch_indices"],
           enable_stochastic_rounding=True, cache_philox_rounds=-1)  # fmt: skip


def test_sglang_adapter_rounds_the_slots_not_the_buffer() -> None:
    tokens, dtype = 2, torch.float16
    state32, kw = _verify_inputs(tokens)
    state = state32.to(dtype)
    rows = torch.tensor([1, 0], dtype=torch.int32, device=DEVICE)
    buf = torch.zeros(2, tokens, *state.shape[1:], dtype=dtype, device=DEVICE)
    exact, buf32 = state.float(), buf.float()
    out = torch.empty_like(kw["x"])
    common = dict(
        state_batch_indices=kw["state_batch_indices"], intermediate_state_indices=rows, cache_steps=tokens
    )
    sglang.selective_state_update(
        exact, *_args(kw, "sglang"), out=out, intermediate_states_buffer=buf32, **common
    )
    torch.manual_seed(5)
    seed = int(torch.randint(0, 2**32, (1,), device=DEVICE, dtype=torch.int64))
    torch.manual_seed(5)
    sglang.selective_state_update(
        state, *_args(kw, "sglang"), out=out, intermediate_states_buffer=buf,
        enable_stochastic_rounding=True, cache_philox_rounds=7, **common,
    )  # fmt: skip
    slots = kw["state_batch_indices"]
    assert torch.equal(bits(state[slots.long()]), bits(_expected(exact, state, slots, seed, rounds=7)))
    plain = torch.zeros_like(buf)  # the buffer as a call without stochastic rounding stores it
    sglang.selective_state_update(
        state32.to(dtype), *_args(kw, "sglang"), out=out, intermediate_states_buffer=plain, **common
    )
    assert torch.equal(bits(buf), bits(plain))


# GPU: real shapes, every config the tables can pick for 16-bit states, CUDA graphs, and the
# speed of the software path (benchmarks/run_gpu.sh, stage bench_sr) is measured by `ssmdecode bench`.


def _real_inputs(dtype: torch.dtype, batch: int = 8):
    from ssmdecode.bench.inputs import make_inputs

    inp = make_inputs(batch, 16, 64, 128, 1, dtype, torch.bfloat16, 4 * batch, "cuda", 0, tie=True)
    return inp, inp.kwargs(0)


def _gpu_configs(dtype: torch.dtype) -> list[LaunchConfig]:
    """Every config this GPU's table picks for the shape (rounding to nearest and
    stochastically), the default and upstream's."""
    from ssmdecode.config import ROUNDINGS, default_config, device_key, load_table, table_key, upstream_config

    table = load_table(device_key()) or {}
    picks = {c for r in ROUNDINGS for c in table.get(table_key(64, 128, dtype, rounding=r), {}).values()}
    return sorted(picks | {default_config(128, dtype), upstream_config(128)}, key=lambda c: c.label)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(DTYPES))
def test_gpu_bits_match_the_reference_at_every_table_config(name: str) -> None:
    dtype = DTYPES[name]
    inp, kw = _real_inputs(dtype)
    slots = kw["state_batch_indices"]
    for config in _gpu_configs(dtype):
        exact = inp.state.float()
        selective_state_update(**{**kw, "state": exact}, config=config)
        rounded = inp.state.clone()
        selective_state_update(**{**kw, "state": rounded}, config=config, rand_seed=_seed(2024))
        want = _expected(exact, rounded, slots, 2024)
        assert torch.equal(bits(rounded[slots.long()]).cpu(), bits(want).cpu()), config.label
        untouched = torch.ones(rounded.shape[0], dtype=torch.bool, device="cuda")
        untouched[slots.long()] = False
        assert torch.equal(bits(rounded[untouched]), bits(inp.state[untouched])), config.label


@pytest.mark.gpu
def test_gpu_cuda_graph_replays_with_a_refreshed_seed() -> None:
    """The seed lives on the device: a graph that refreshes it before the call replays with
    new random bits each time, each replay the reference's rounding for its seed."""
    dtype = torch.bfloat16
    inp, kw = _real_inputs(dtype)
    slots = kw["state_batch_indices"]
    seed = _seed(0)
    pool = inp.state.clone()
    start = pool.clone()
    out = torch.empty_like(kw["out"])
    call = {**kw, "state": pool, "out": out}
    selective_state_update(**call, rand_seed=seed)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        seed.random_(2**62)  # docs/usage.md's refresh: torch's generator, graph-safe
        selective_state_update(**call, rand_seed=seed)
    results = []
    for _ in range(2):
        pool.copy_(start)
        graph.replay()
        torch.cuda.synchronize()
        results.append((int(seed), pool[slots.long()].clone()))
    exact = start.float()
    selective_state_update(**{**kw, "state": exact, "out": torch.empty_like(out)})
    for value, got in results:
        want = _expected(exact, pool, slots, value)
        assert torch.equal(bits(got).cpu(), bits(want).cpu()), value
    assert not torch.equal(bits(results[0][1]), bits(results[1][1]))


@pytest.mark.gpu
def test_gpu_torch_compile_passes_the_seed() -> None:
    dtype = torch.float16
    inp, kw = _real_inputs(dtype)
    seed = _seed(31)

    def step(state: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return selective_state_update(**{**kw, "state": state, "out": out}, rand_seed=seed)

    eager, compiled = inp.state.clone(), inp.state.clone()
    step(eager, torch.empty_like(kw["out"]))
    torch.compile(step, fullgraph=True)(compiled, torch.empty_like(kw["out"]))
    assert torch.equal(bits(eager), bits(compiled))
