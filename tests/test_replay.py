"""selective_state_replay (the verify step by replay) against its float64 reference, on the CPU
(Triton's interpreter), and against the multi-token kernel over consecutive verify steps:
every draft's out and the state after the accepted drafts, bit for bit, with a float32 state;
the bookkeeping (replay_advance), the flush rule, materializing (replay_flush), pad rows, packed
drafts; the bad calls refused before anything is written. @pytest.mark.gpu: the same sequence
at the headline shape, for every config a table may pick, and under a CUDA graph."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from conftest import DEVICE, bits, to_device
from ssmdecode import LaunchConfig, selective_state_update
from ssmdecode.config import device_key, load_table, table_key, upstream_config
from ssmdecode.numerics import TOLERANCES
from ssmdecode.ops.selective_state_update import (
    replay_advance,
    replay_flush,
    selective_state_replay,
    selective_state_replay_reference,
)

PAD = -1


@dataclass(frozen=True)
class Replay:
    """A pool with rings, and the inputs of verify steps of T drafts for B requests."""

    batch: int = 3
    tokens: int = 2
    window: int = 4  # cached tokens a ring holds besides the T drafts: R = window + T
    nheads: int = 4
    headdim: int = 8
    dstate: int = 16
    ngroups: int = 2
    state: torch.dtype = torch.float32
    has_z: bool = True
    pad_rows: tuple[int, ...] = ()

    @property
    def ring(self) -> int:
        return self.window + self.tokens


def make_pool(case: Replay, seed: int = 0) -> dict:
    """state, the rings (random, as if earlier steps had filled them), bookkeeping with some
    tokens cached in each slot, A, D, dt_bias (tied over P), the request slots."""
    g = torch.Generator().manual_seed(seed)
    S, H, P, N, G, R = 2 * case.batch + 2, case.nheads, case.headdim, case.dstate, case.ngroups, case.ring
    pool = dict(
        state=torch.randn(S, H, P, N, generator=g).to(case.state),
        x_cache=torch.randn(S, H, R, P, generator=g).to(torch.bfloat16),
        B_cache=torch.randn(S, G, R, N, generator=g).to(torch.bfloat16),
        dt_cache=torch.rand(S, H, R, generator=g) * 0.1,
        ring_start=torch.randint(0, R, (S,), generator=g).to(torch.int32),
        num_cached=torch.randint(0, case.window + 1, (S,), generator=g).to(torch.int32),
        A=(-torch.rand(H, generator=g) - 0.5)[:, None, None].expand(H, P, N),
        D=torch.randn(H, generator=g)[:, None].expand(H, P),
        dt_bias=(torch.rand(H, generator=g) - 4.0)[:, None].expand(H, P),
    )
    slots = torch.randperm(S, generator=g)[: case.batch].to(torch.int32)
    for r in case.pad_rows:
        slots[r] = PAD
    pool["state_batch_indices"] = slots
    return {k: to_device(v, DEVICE) for k, v in pool.items()}


def make_drafts(case: Replay, seed: int) -> dict:
    """One verify step's inputs: x, B, C views of one tensor, dt tied over P, z."""
    g = torch.Generator().manual_seed(1000 + seed)
    b, t, H, P, N, G = case.batch, case.tokens, case.nheads, case.headdim, case.dstate, case.ngroups
    xbc = torch.randn(b, t, H * P + 2 * G * N, generator=g).to(torch.bfloat16)
    return {
        k: to_device(v, DEVICE)
        for k, v in dict(
            x=xbc[..., : H * P].unflatten(-1, (H, P)),
            B=xbc[..., H * P : H * P + G * N].unflatten(-1, (G, N)),
            C=xbc[..., H * P + G * N :].unflatten(-1, (G, N)),
            dt=torch.randn(b, t, H, generator=g).to(torch.bfloat16)[..., None].expand(b, t, H, P),
            z=torch.randn(b, t, H, P, generator=g).to(torch.bfloat16) if case.has_z else None,
        ).items()
    }


def _cpu_config(case: Replay) -> LaunchConfig:
    return LaunchConfig(1 << (case.headdim - 1).bit_length(), 4)


def _replay_kwargs(pool: dict, drafts: dict) -> dict:
    return dict(pool, **drafts, dt_softplus=True, pad_slot_id=PAD)


CASES = [
    Replay(),
    Replay(tokens=1, window=1),
    Replay(tokens=3, window=5, pad_rows=(1,)),
    Replay(headdim=6, dstate=12, ngroups=1, has_z=False),  # masked tiles
    Replay(state=torch.bfloat16),
    Replay(tokens=4, window=12, nheads=2, ngroups=1),
]


@pytest.mark.parametrize(
    "case",
    CASES,
    ids=lambda c: (
        f"B{c.batch}-T{c.tokens}-W{c.window}-P{c.headdim}-N{c.dstate}-{str(c.state)[6:]}-pad{len(c.pad_rows)}"
    ),
)
def test_one_call_matches_reference(case: Replay) -> None:
    pool, drafts = make_pool(case), make_drafts(case, 0)
    kw = _replay_kwargs(pool, drafts)
    before = {k: v.clone() for k, v in pool.items() if isinstance(v, torch.Tensor)}
    want = selective_state_replay_reference(**kw)
    out = torch.full(drafts["x"].shape, float("nan"), dtype=torch.bfloat16, device=DEVICE)
    assert selective_state_replay(**kw, out=out, config=_cpu_config(case)) is out
    live = torch.tensor([r not in case.pad_rows for r in range(case.batch)], device=DEVICE)
    torch.testing.assert_close(out[live].double(), want[0][live].to(DEVICE), **TOLERANCES[out.dtype])
    assert (out[~live] == 0).all(), "pad requests' out"
    torch.testing.assert_close(pool["state"].double(), want[1].to(DEVICE), **TOLERANCES[case.state])
    _assert_rings(pool, want)
    for name in ("ring_start", "num_cached"):
        assert torch.equal(pool[name], before[name]), f"{name} is the engine's to advance"
    flushed = (before["num_cached"] + 2 * case.tokens > case.ring).cpu()
    written = (bits(pool["state"]) != bits(before["state"])).flatten(1).any(1).cpu()
    for r, slot in enumerate(pool["state_batch_indices"].tolist()):
        if slot != PAD:
            assert bool(written[slot]) == bool(flushed[slot]), f"request {r}: state written iff flushed"
    others = [s for s in range(pool["state"].shape[0]) if s not in pool["state_batch_indices"].tolist()]
    assert torch.equal(bits(pool["state"][others]), bits(before["state"][others]))


def test_packed_drafts() -> None:
    """cu_seqlens: requests of 2, 0 and 1 drafts (max_seqlen 2)."""
    case = Replay(tokens=2)
    pool, drafts = make_pool(case), make_drafts(case, 1)
    lengths = [2, 0, 1]
    packed = {
        k: (torch.cat([v[b, :n] for b, n in enumerate(lengths)]) if v is not None else None)
        for k, v in drafts.items()
    }
    packed["dt"] = packed["dt"][..., :1].expand(*packed["dt"].shape)
    cu = torch.tensor([0, 2, 2, 3], dtype=torch.int32, device=DEVICE)
    kw = _replay_kwargs(pool, packed)
    want = selective_state_replay_reference(**kw, cu_seqlens=cu, max_seqlen=2)
    out = selective_state_replay(**kw, cu_seqlens=cu, max_seqlen=2, config=_cpu_config(case))
    torch.testing.assert_close(out.double(), want[0].to(DEVICE), **TOLERANCES[out.dtype])
    torch.testing.assert_close(pool["state"].double(), want[1].to(DEVICE), **TOLERANCES[pool["state"].dtype])
    _assert_rings(pool, want)


def _assert_rings(pool: dict, want: tuple) -> None:
    """The rings after a call: x and B are copies (bit for bit); dt' is the kernel's softplus,
    held to float32 rounding against the reference's (one softplus a token, no sum: tighter than
    TOLERANCES[float32], which allows for the row sums over N)."""
    for name, got in zip(("x_cache", "B_cache"), want[2:4], strict=True):
        assert torch.equal(bits(pool[name]), bits(got.to(DEVICE))), name
    torch.testing.assert_close(pool["dt_cache"], want[4].to(DEVICE), rtol=1e-6, atol=1e-7)


def run_steps(case: Replay, config: LaunchConfig, steps: int, seed: int = 0) -> None:
    """Consecutive verify steps, each followed by an acceptance draw, two ways from the same
    start: the multi-token kernel with every draft's state into a buffer and the accepted one
    copied back (the intermediate-state path), and replay with its bookkeeping. Every draft's
    out bit for bit at every step, and (replay_flush) the state after the last step."""
    pool = make_pool(case, seed)
    pool["num_cached"].zero_()  # after prefill: the checkpoint is the state
    slots = pool["state_batch_indices"]
    live = slots != PAD
    truth = pool["state"].clone()  # the intermediate-state path's pool
    buffer = torch.zeros(truth.shape[0], case.tokens, *truth.shape[1:], dtype=truth.dtype, device=DEVICE)
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        drafts = make_drafts(case, step)
        out_replay = torch.full(drafts["x"].shape, float("nan"), device=DEVICE)
        selective_state_replay(**_replay_kwargs(pool, drafts), out=out_replay, config=config)
        out_multi = torch.full(drafts["x"].shape, float("nan"), device=DEVICE)
        selective_state_update(
            truth,
            **{k: v for k, v in drafts.items()},
            A=pool["A"],
            D=pool["D"],
            dt_bias=pool["dt_bias"],
            dt_softplus=True,
            state_batch_indices=slots,
            pad_slot_id=PAD,
            out=out_multi,
            disable_state_update=True,
            intermediate_states=buffer,
            config=config,
        )
        assert torch.equal(bits(out_replay[live]), bits(out_multi[live])), f"step {step}: out"
        accepted = torch.randint(1, case.tokens + 1, (case.batch,), generator=g).to(DEVICE)
        for r in live.nonzero().flatten().tolist():  # the engine's copy of the accepted state
            truth[slots[r]] = buffer[slots[r], int(accepted[r]) - 1]
        replay_advance(pool["ring_start"], pool["num_cached"], accepted, case.tokens, case.ring, slots, PAD)
    replay_flush(
        pool["state"],
        pool["x_cache"],
        pool["B_cache"],
        pool["dt_cache"],
        pool["ring_start"],
        pool["num_cached"],
        pool["A"],
        slots,
        PAD,
        config,
    )
    replay_advance(
        pool["ring_start"],
        pool["num_cached"],
        torch.zeros_like(slots),
        case.tokens,
        case.ring,
        slots,
        PAD,
        flushed=True,
    )
    used = slots[live].long()
    assert torch.equal(bits(pool["state"][used]), bits(truth[used])), "state after the steps"
    assert (pool["num_cached"][used] == 0).all()


def test_consecutive_steps_keep_the_multi_token_bits() -> None:
    run_steps(
        Replay(tokens=2, window=3, pad_rows=(2,), has_z=False),
        LaunchConfig.parse("8,1,slot,evict,ordered"),
        steps=5,
    )


def test_advance_follows_the_flush_rule() -> None:
    """ring 6, T 2: a slot with 3 cached flushes (3 + 4 > 6) and restarts at start + 3 with
    the accepted count; one with 2 cached (2 + 4 = 6) keeps its start and grows."""
    start = torch.tensor([5, 1, 0], dtype=torch.int32)
    cached = torch.tensor([3, 2, 7], dtype=torch.int32)
    replay_advance(
        start, cached, torch.tensor([2, 1]), tokens=2, ring=6, state_batch_indices=torch.tensor([0, 1])
    )
    assert start.tolist() == [2, 1, 0] and cached.tolist() == [2, 3, 7]


def _bad(edit, error, message):
    return edit, error, message


BAD = {
    "untied-dt": _bad(lambda kw: kw.update(dt=kw["dt"].contiguous()), ValueError, "tied over the head dim"),
    "ring-too-short": _bad(
        lambda kw: kw.update(
            x_cache=kw["x_cache"][:, :, :3],
            B_cache=kw["B_cache"][:, :, :3],
            dt_cache=kw["dt_cache"][:, :, :3],
        ),
        ValueError,
        r"x_cache holds a ring of 3 tokens; T = 2 drafts need at least 2 T = 4",
    ),
    "rings-disagree": _bad(
        lambda kw: kw.update(x_cache=kw["x_cache"][:, :, :5]),
        ValueError,
        r"B_cache has shape \(8, 2, 6, 16\); expected \(8, 2, 5, 16\)",
    ),
    "ring-dtype": _bad(lambda kw: kw.update(x_cache=kw["x_cache"].float()), TypeError, r"x_cache has dtype"),
    "dt-cache-dtype": _bad(
        lambda kw: kw.update(dt_cache=kw["dt_cache"].half()), TypeError, r"dt_cache has dtype"
    ),
    "bookkeeping-dtype": _bad(
        lambda kw: kw.update(num_cached=kw["num_cached"].long()),
        TypeError,
        r"num_cached has dtype torch.int64",
    ),
    "max-seqlen-without-cu": _bad(
        lambda kw: kw.update(max_seqlen=2), ValueError, "max_seqlen goes with cu_seqlens"
    ),
    "pad-slot-float": _bad(lambda kw: kw.update(pad_slot_id=-1.0), TypeError, "pad_slot_id must be an int"),
    "x-list": _bad(lambda kw: kw.update(x=kw["x"].tolist()), TypeError, "x must be a torch.Tensor"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_call_raises_and_writes_nothing(name: str) -> None:
    case = Replay()
    pool, drafts = make_pool(case), make_drafts(case, 0)
    kw = _replay_kwargs(pool, drafts)
    kw["out"] = torch.full(drafts["x"].shape, float("nan"), dtype=torch.bfloat16, device=DEVICE)
    edit, error, message = BAD[name]
    edit(kw)
    before = [v.clone() for v in pool.values() if isinstance(v, torch.Tensor)]
    with pytest.raises(error, match=message):
        selective_state_replay(**kw, config=_cpu_config(case))
    for v, b in zip([v for v in pool.values() if isinstance(v, torch.Tensor)], before, strict=True):
        assert torch.equal(v, b)
    assert kw["out"].isnan().all() if isinstance(kw["out"], torch.Tensor) else True


def test_bookkeeping_values_are_checked_on_request() -> None:
    case = Replay()
    pool, drafts = make_pool(case), make_drafts(case, 0)
    pool["num_cached"][int(pool["state_batch_indices"][0])] = case.ring  # past the window
    with pytest.raises(ValueError, match=r"num_cached\[\d+\] = 6 is outside \[0, 4\]"):
        selective_state_replay(
            **_replay_kwargs(pool, drafts), config=_cpu_config(case), validate_indices=True
        )


# ---------------------------------------------------------------------------------------------
# GPU


def _replay_configs() -> list[LaunchConfig]:
    table = load_table(device_key()) or {}
    picks = set()
    for tokens in (2, 4, 8):
        picks |= set(table.get(table_key(64, 128, torch.float32, "replay", tokens), {}).values())
        picks |= set(table.get(table_key(64, 128, torch.float32, "buffer", tokens), {}).values())
    return sorted(
        picks | {upstream_config(128), LaunchConfig.parse("4,1,slot,evict,ordered")}, key=lambda c: c.label
    )


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [2, 4])
def test_gpu_consecutive_steps_keep_the_multi_token_bits(tokens: int) -> None:
    """At the headline shape, for every config a replay or buffer entry of the table may pick:
    every draft's out and the state after the steps, bit for bit against the intermediate-
    state path at the same config."""
    case = Replay(
        batch=20, tokens=tokens, window=8, nheads=16, headdim=64, dstate=128, ngroups=1, pad_rows=(3,)
    )
    for config in _replay_configs():
        run_steps(case, config, steps=6)


@pytest.mark.gpu
def test_gpu_cuda_graph_of_replay_steps() -> None:
    """Every index on the device, no host synchronization: a verify step and its bookkeeping
    capture in a CUDA graph and replay to the eager bits."""
    case = Replay(batch=16, tokens=4, window=8, nheads=16, headdim=64, dstate=128, ngroups=1)
    pool, drafts = make_pool(case), make_drafts(case, 0)
    accepted = torch.full((case.batch,), 2, device=DEVICE)
    written = ("state", "x_cache", "B_cache", "dt_cache", "ring_start", "num_cached")
    snapshot = {k: pool[k].clone() for k in written}

    def step(out: torch.Tensor) -> None:
        selective_state_replay(**_replay_kwargs(pool, drafts), out=out)
        replay_advance(
            pool["ring_start"],
            pool["num_cached"],
            accepted,
            case.tokens,
            case.ring,
            pool["state_batch_indices"],
            PAD,
        )

    eager = torch.empty(drafts["x"].shape, dtype=torch.bfloat16, device=DEVICE)
    step(eager)
    want = {k: pool[k].clone() for k in written}
    for k, v in snapshot.items():
        pool[k].copy_(v)
    out = torch.empty_like(eager)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step(out)
    torch.cuda.current_stream().wait_stream(stream)
    for k, v in snapshot.items():
        pool[k].copy_(v)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(out)
    for k, v in snapshot.items():
        pool[k].copy_(v)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(bits(out), bits(eager))
    for k, v in want.items():
        assert torch.equal(bits(pool[k]), bits(v)), k
