"""ssmdecode.compat.flashinfer: flashinfer's checkpointing_ssu convention (names, order,
defaults), run by selective_state_replay. Consecutive verify steps with the host's bookkeeping
written out as flashinfer states it, against ssmdecode's float64 references and bit for bit
against selective_state_replay called natively; packed requests; pad rows; the ignored
arguments; the unsupported and the malformed calls refused with nothing written. CPU, tiny
shapes (Triton's interpreter)."""

from __future__ import annotations

import inspect

import pytest
import torch

from conftest import DEVICE, bits, to_device
from ssmdecode import LaunchConfig
from ssmdecode.compat import flashinfer as flashinfer_adapter
from ssmdecode.compat.flashinfer import checkpointing_ssu
from ssmdecode.numerics import TOLERANCES
from ssmdecode.ops.selective_state_update import (
    replay_advance,
    replay_flush,
    selective_state_replay,
    selective_state_replay_reference,
    selective_state_update_reference,
)

EMPTY = inspect.Parameter.empty
# flashinfer/mamba/checkpointing_ssu.py, checkpointing_ssu (docs/compat.md names the commit).
FLASHINFER_PARAMS = [
    ("state", EMPTY), ("x_cache", EMPTY), ("B_cache", EMPTY), ("dt_cache", EMPTY),
    ("ring_start", EMPTY), ("prev_num_accepted_tokens", EMPTY), ("x", EMPTY), ("dt", EMPTY),
    ("A", EMPTY), ("B", EMPTY), ("C", EMPTY), ("out", EMPTY), ("D", None), ("z", None),
    ("dt_bias", None), ("dt_softplus", False), ("state_batch_indices", None),
    ("pad_slot_id", -1), ("state_scale", None), ("rand_seed", None), ("philox_rounds", 10),
    ("d_split", None), ("cu_seqlens", None), ("max_seqlen", None), ("enable_pdl", False),
    ("cb_scaled", None), ("cumAdt_vec", None), ("cb_old", None),
    ("precompute_heads_per_cta", 0), ("algorithm", "auto"),
]  # fmt: skip

BATCH, T, WINDOW, H, P, N, G = 3, 2, 3, 4, 8, 16, 2
RING = WINDOW + T
SLOTS = 2 * BATCH + 1
PAD = -1
CONFIG = LaunchConfig(16, 4)  # the fast route multiplies tiles of at least 16 rows
TOL_OUT = TOLERANCES[torch.bfloat16]  # out rounded to bf16; references in float64
TOL_STATE = TOLERANCES[torch.float32]


def make_pool(seed: int = 0, pad_row: int | None = 2) -> dict:
    """A float32 state pool with its rings and bookkeeping, as after prefill (nothing cached,
    random ring starts), the per-head parameters tied over the head dim, the request slots."""
    g = torch.Generator().manual_seed(seed)
    slots = torch.randperm(SLOTS, generator=g)[:BATCH].to(torch.int32)
    if pad_row is not None:
        slots[pad_row] = PAD
    pool = dict(
        state=torch.randn(SLOTS, H, P, N, generator=g),
        x_cache=torch.randn(SLOTS, H, RING, P, generator=g).to(torch.bfloat16),
        B_cache=torch.randn(SLOTS, G, RING, N, generator=g).to(torch.bfloat16),
        dt_cache=torch.rand(SLOTS, H, RING, generator=g),
        ring_start=torch.randint(0, RING, (SLOTS,), generator=g).to(torch.int32),
        prev_num_accepted_tokens=torch.zeros(SLOTS, dtype=torch.int32),
        A=(-torch.rand(H, generator=g) - 0.5)[:, None, None].expand(H, P, N),
        D=torch.randn(H, generator=g)[:, None].expand(H, P),
        dt_bias=(torch.rand(H, generator=g) - 3.0)[:, None].expand(H, P),
        state_batch_indices=slots,
    )
    return {k: to_device(v, DEVICE) for k, v in pool.items()}  # (the expanded A, D, dt_bias stay tied)


def make_drafts(seed: int) -> dict:
    """One step's drafts as Mamba2 passes them: x, B, C views of one row, dt tied over P."""
    g = torch.Generator().manual_seed(100 + seed)
    xbc = torch.randn(BATCH, T, H * P + 2 * G * N, generator=g).to(torch.bfloat16).to(DEVICE)
    return dict(
        x=xbc[..., : H * P].unflatten(-1, (H, P)),
        B=xbc[..., H * P : H * P + G * N].unflatten(-1, (G, N)),
        C=xbc[..., H * P + G * N :].unflatten(-1, (G, N)),
        dt=torch.randn(BATCH, T, H, generator=g)
        .to(torch.bfloat16)
        .to(DEVICE)[..., None]
        .expand(BATCH, T, H, P),
        z=torch.randn(BATCH, T, H, P, generator=g).to(torch.bfloat16).to(DEVICE),
    )


def poisoned(like: torch.Tensor) -> torch.Tensor:
    return torch.full(like.shape, float("nan"), dtype=like.dtype, device=like.device)


def call(pool: dict, d: dict, out: torch.Tensor, **extra) -> torch.Tensor:
    """The adapter with flashinfer's positional order up to out, the rest by keyword."""
    return checkpointing_ssu(
        pool["state"], pool["x_cache"], pool["B_cache"], pool["dt_cache"], pool["ring_start"],
        pool["prev_num_accepted_tokens"], d["x"], d["dt"], pool["A"], d["B"], d["C"], out,
        D=pool["D"], z=d["z"], dt_bias=pool["dt_bias"], dt_softplus=True,
        state_batch_indices=pool["state_batch_indices"], pad_slot_id=PAD, config=CONFIG,
        **extra,
    )  # fmt: skip


def native_kwargs(pool: dict, d: dict) -> dict:
    kw = {k: v for k, v in pool.items() if k != "prev_num_accepted_tokens"}
    return dict(kw, num_cached=pool["prev_num_accepted_tokens"], **d, dt_softplus=True, pad_slot_id=PAD)


def flashinfer_bookkeeping(pool: dict, accepted: torch.Tensor) -> None:
    """The host's bookkeeping after a verify step as flashinfer states it (its ring contract):
    a slot whose replayed count plus 2 T overflows the ring flushed, so its ring starts past the
    replayed tokens and holds the accepted drafts; otherwise it holds them as well."""
    start, prev = pool["ring_start"], pool["prev_num_accepted_tokens"]
    for r, slot in enumerate(pool["state_batch_indices"].tolist()):
        if slot == PAD:
            continue
        pnat = int(prev[slot])
        if pnat + 2 * T > RING:
            start[slot] = (int(start[slot]) + pnat) % RING
            pnat = 0
        prev[slot] = pnat + int(accepted[r])


def snapshot(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [bits(t).clone() for t in tensors]


def test_signature_is_flashinfers() -> None:
    params = list(inspect.signature(checkpointing_ssu).parameters.values())
    assert [(p.name, p.default) for p in params[:-2]] == FLASHINFER_PARAMS
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params[:-2])
    assert [(p.name, p.kind, p.default) for p in params[-2:]] == [
        # ssmdecode's: the fast route by default, the exact one on request
        ("exact", inspect.Parameter.KEYWORD_ONLY, False),
        ("config", inspect.Parameter.KEYWORD_ONLY, None),
    ]


@pytest.mark.parametrize("exact", [None, False, True])
def test_route_is_fast_unless_exact_is_asked(exact: bool | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The route reaches selective_state_replay: fast by default (at this tiny shape both
    routes can write the same bits, so the steps below cannot tell them apart)."""
    seen = []

    def replay(*args, **kwargs):
        seen.append(kwargs["exact"])
        return selective_state_replay(*args, **kwargs)

    monkeypatch.setattr(flashinfer_adapter, "selective_state_replay", replay)
    pool, d = make_pool(), make_drafts(0)
    call(pool, d, poisoned(d["x"]), **({} if exact is None else {"exact": exact}))
    assert seen == [bool(exact)]


@pytest.mark.parametrize("exact", [None, True], ids=["default", "exact"])
def test_consecutive_steps_with_flashinfers_bookkeeping(exact: bool | None) -> None:
    """Five steps (flushes among them, a pad row), by the default route (the fast one) and the
    exact one: each step's out and rings against the replay reference, out bit for bit against
    selective_state_replay of the same route on a twin pool kept by replay_advance, whose
    bookkeeping matches flashinfer's; and out and the final state against the per-token
    recurrence of the accepted drafts."""
    _consecutive_steps(exact)


@pytest.mark.gpu
def test_gpu_consecutive_steps_by_the_default_route() -> None:
    """The same five steps on the GPU, by the route a flashinfer caller gets."""
    _consecutive_steps(None)


def _consecutive_steps(exact: bool | None) -> None:
    pool, twin = make_pool(), make_pool()
    slots = pool["state_batch_indices"]
    live = slots != PAD
    truth = pool["state"].double()  # the state the engine means, by the plain recurrence
    g = torch.Generator().manual_seed(7)
    flushes = 0
    for step in range(5):
        d = make_drafts(step)
        want = selective_state_replay_reference(**native_kwargs(pool, d))
        flushes += int(((pool["prev_num_accepted_tokens"][slots[live]] + 2 * T) > RING).sum())
        out = poisoned(d["x"])
        assert call(pool, d, out, **({} if exact is None else {"exact": exact})) is out
        native = selective_state_replay(
            **native_kwargs(twin, d), out=poisoned(d["x"]), config=CONFIG, exact=bool(exact)
        )
        assert torch.equal(bits(out), bits(native)), f"step {step}: out, adapter against native"
        assert (out[~live] == 0).all(), "pad rows"
        torch.testing.assert_close(out[live].double(), want[0][live], **TOL_OUT)
        torch.testing.assert_close(pool["state"].double(), want[1], **TOL_STATE)
        assert torch.equal(bits(pool["x_cache"]), bits(want[2])) and torch.equal(
            bits(pool["B_cache"]), bits(want[3])
        )
        # dt' is one float32 softplus a token, no sum: held to float32 rounding, tighter than
        # TOLERANCES[float32], which allows for the row sums over N
        torch.testing.assert_close(pool["dt_cache"], want[4], rtol=1e-6, atol=1e-7)
        ref_out, _ = selective_state_update_reference(
            truth, d["x"], d["dt"], pool["A"], d["B"], d["C"], D=pool["D"], z=d["z"],
            dt_bias=pool["dt_bias"], dt_softplus=True, state_batch_indices=slots, pad_slot_id=PAD,
        )  # fmt: skip
        torch.testing.assert_close(out[live].double(), ref_out[live], **TOL_OUT)
        accepted = torch.randint(1, T + 1, (BATCH,), generator=g, dtype=torch.int32).to(DEVICE)
        for r in live.nonzero().flatten().tolist():
            n = int(accepted[r])
            _, truth = selective_state_update_reference(
                truth, *(d[k][r : r + 1, :n] for k in ("x", "dt")), pool["A"],
                *(d[k][r : r + 1, :n] for k in ("B", "C")), dt_bias=pool["dt_bias"],
                dt_softplus=True, state_batch_indices=slots[r : r + 1],
            )  # fmt: skip
        flashinfer_bookkeeping(pool, accepted)
        replay_advance(twin["ring_start"], twin["prev_num_accepted_tokens"], accepted, T, RING, slots, PAD)
        for name in ("ring_start", "prev_num_accepted_tokens"):
            assert torch.equal(pool[name], twin[name]), (
                f"step {step}: {name}, flashinfer's rule and replay_advance"
            )
    assert flushes >= 3, "the sequence must cross the flush rule"
    replay_flush(*(pool[k] for k in ("state", "x_cache", "B_cache", "dt_cache", "ring_start")),
                 pool["prev_num_accepted_tokens"], pool["A"], slots, PAD, CONFIG)  # fmt: skip
    used = slots[live].long()
    torch.testing.assert_close(pool["state"][used].double(), truth[used], **TOL_STATE)


def test_packed_requests() -> None:
    """cu_seqlens with every request at max_seqlen: x (1, total, H, P) as flashinfer packs it
    gives the dense call's bits and returns the packed out."""
    dense, packed = make_pool(1, pad_row=None), make_pool(1, pad_row=None)
    dense["prev_num_accepted_tokens"][:] = torch.tensor([0, 1, 2, 3, 0, 2, 1], dtype=torch.int32)
    packed["prev_num_accepted_tokens"].copy_(dense["prev_num_accepted_tokens"])
    d = make_drafts(3)
    want = call(dense, d, poisoned(d["x"]))
    flat = {k: v.flatten(0, 1).unsqueeze(0) for k, v in d.items()}
    flat["dt"] = d["dt"][..., :1].flatten(0, 1).unsqueeze(0).expand(1, BATCH * T, H, P)
    cu = torch.arange(0, BATCH * T + 1, T, dtype=torch.int32, device=DEVICE)
    out = poisoned(flat["x"])
    assert call(packed, flat, out, cu_seqlens=cu, max_seqlen=T) is out
    assert torch.equal(bits(out[0]), bits(want.flatten(0, 1)))
    for name in ("state", "x_cache", "B_cache", "dt_cache"):
        assert torch.equal(bits(packed[name]), bits(dense[name])), name


def test_packed_short_requests_flush_by_their_own_length() -> None:
    """Requests of 2, 0 and 1 drafts (max_seqlen 2), each slot with 2 cached tokens (R = 5):
    the 2-draft request flushes (2 + 2 > 3), the 1-draft one does not (2 + 1 = 3), as flashinfer
    decides (prev + n > max_window); the empty request is left alone; replay_advance with
    cu_seqlens follows the same rule. Against the reference."""
    pool, d = make_pool(2, pad_row=None), make_drafts(4)
    pool["prev_num_accepted_tokens"].fill_(2)
    lengths = [2, 0, 1]
    flat = {k: torch.cat([v[b, :n] for b, n in enumerate(lengths)]).unsqueeze(0) for k, v in d.items()}
    flat["dt"] = flat["dt"][..., :1].expand(*flat["dt"].shape)
    cu = torch.tensor([0, 2, 2, 3], dtype=torch.int32, device=DEVICE)
    before = {k: v.clone() for k, v in pool.items()}
    out = poisoned(flat["x"])
    call(pool, flat, out, cu_seqlens=cu, max_seqlen=T)
    want = selective_state_replay_reference(
        before["state"],
        before["x_cache"],
        before["B_cache"],
        before["dt_cache"],
        before["ring_start"],
        before["prev_num_accepted_tokens"],
        flat["x"][0],
        flat["dt"][0],
        pool["A"],
        flat["B"][0],
        flat["C"][0],
        D=pool["D"],
        z=flat["z"][0],
        dt_bias=pool["dt_bias"],
        dt_softplus=True,
        state_batch_indices=pool["state_batch_indices"],
        cu_seqlens=cu,
        max_seqlen=T,
    )
    torch.testing.assert_close(out[0].double(), want[0], **TOL_OUT)
    torch.testing.assert_close(pool["state"].double(), want[1], **TOL_STATE)
    slots = pool["state_batch_indices"].tolist()
    changed = [not torch.equal(bits(pool["state"][s]), bits(before["state"][s])) for s in slots]
    assert changed == [True, False, False], "flushed: the 2-draft request only"
    for name in ("x_cache", "B_cache", "dt_cache"):
        assert torch.equal(bits(pool[name][slots[1]]), bits(before[name][slots[1]])), name
    start, cached = pool["ring_start"], pool["prev_num_accepted_tokens"]
    replay_advance(
        start,
        cached,
        torch.tensor([1, 0, 1], device=DEVICE),
        T,
        RING,
        pool["state_batch_indices"],
        PAD,
        cu_seqlens=cu,
    )
    assert cached[slots].tolist() == [1, 2, 3]
    assert start[slots].tolist() == [
        (int(before["ring_start"][slots[0]]) + 2) % RING,
        int(before["ring_start"][slots[1]]),
        int(before["ring_start"][slots[2]]),
    ]


def test_ignored_arguments_are_accepted() -> None:
    """The algorithm choice, the two-kernel scratch, d_split, precompute_heads_per_cta,
    philox_rounds without rand_seed and enable_pdl change nothing: the same bits, the scratch
    left alone."""
    base, knobs = make_pool(3), make_pool(3)
    d = make_drafts(5)
    want = call(base, d, poisoned(d["x"]))
    scratch = dict(
        cb_scaled=torch.full((BATCH, H, 32, 8), 3.0, dtype=torch.bfloat16, device=DEVICE),
        cumAdt_vec=torch.full((BATCH, H, 16), 3.0, device=DEVICE),
        cb_old=torch.full((BATCH, H, 32, 4), 3.0, dtype=torch.bfloat16, device=DEVICE),
    )
    got = call(knobs, d, poisoned(d["x"]), algorithm="two-kernel", d_split=2, precompute_heads_per_cta=1,
               philox_rounds=5, enable_pdl=True, **scratch)  # fmt: skip
    assert torch.equal(bits(got), bits(want))
    for name in ("state", "x_cache", "B_cache", "dt_cache"):
        assert torch.equal(bits(knobs[name]), bits(base[name])), name
    assert all(bool((t == 3.0).all()) for t in scratch.values())


UNSUPPORTED = {
    "rand_seed": lambda pool, kw: kw.update(rand_seed=torch.tensor([5], dtype=torch.int64)),
    "state_scale": lambda pool, kw: kw.update(state_scale=torch.ones(SLOTS, H, P)),
    "state": lambda pool, kw: pool.update(state=torch.zeros(SLOTS, H, P, N, dtype=torch.int8)),
}


@pytest.mark.parametrize("argument", list(UNSUPPORTED))
def test_unsupported_raise_and_write_nothing(argument: str) -> None:
    pool, d, kw = make_pool(4), make_drafts(6), {}
    UNSUPPORTED[argument](pool, kw)
    before = snapshot(*pool.values())
    out = poisoned(d["x"])
    with pytest.raises(NotImplementedError, match=rf"flashinfer: {argument} \("):
        call(pool, d, out, **kw)
    assert all(torch.equal(bits(v), b) for v, b in zip(pool.values(), before, strict=True))
    assert out.isnan().all()


def _trio(**only: bool) -> dict:
    return {
        k: torch.zeros(1, device=DEVICE) for k in ("cb_scaled", "cumAdt_vec", "cb_old") if only.get(k, False)
    }


# name: (edit of (pool, drafts, keyword arguments), error, message)
MALFORMED = {
    "out-none": (lambda p, d, kw: kw.update(out=None), TypeError, "out must be a torch.Tensor"),
    "x-list": (lambda p, d, kw: d.update(x=d["x"].tolist()), TypeError, "x must be a torch.Tensor"),
    "ring-start-list": (
        lambda p, d, kw: p.update(ring_start=[0] * SLOTS),
        TypeError,
        "ring_start must be a torch.Tensor",
    ),
    "prev-int64": (
        lambda p, d, kw: p.update(prev_num_accepted_tokens=p["prev_num_accepted_tokens"].long()),
        TypeError,
        "prev_num_accepted_tokens must be int32",
    ),
    "ring-too-short": (
        lambda p, d, kw: p.update({k: p[k][:, :, : 2 * T - 1] for k in ("x_cache", "B_cache", "dt_cache")}),
        ValueError,
        "ring of 3 tokens",
    ),
    "untied-dt": (lambda p, d, kw: d.update(dt=d["dt"].contiguous()), ValueError, "tied over the head dim"),
    "max-seqlen-alone": (
        lambda p, d, kw: kw.update(max_seqlen=T),
        ValueError,
        "max_seqlen goes with cu_seqlens",
    ),
    "packed-x-dense": (
        lambda p, d, kw: kw.update(cu_seqlens=torch.tensor([0, 2, 4, 6], dtype=torch.int32), max_seqlen=T),
        ValueError,
        r"with cu_seqlens, x must be \(1, total_tokens",
    ),
    "scratch-partial": (
        lambda p, d, kw: kw.update(_trio(cb_scaled=True)),
        ValueError,
        "cb_scaled, cumAdt_vec and cb_old go together",
    ),
    "two-kernel-no-scratch": (
        lambda p, d, kw: kw.update(algorithm="two-kernel"),
        ValueError,
        "needs the scratch",
    ),
    "algorithm": (lambda p, d, kw: kw.update(algorithm="fast"), ValueError, "algorithm must be one of"),
    "enable-pdl-int": (lambda p, d, kw: kw.update(enable_pdl=1), TypeError, "enable_pdl must be a bool"),
    "d-split-str": (lambda p, d, kw: kw.update(d_split="2"), TypeError, "d_split must be an int"),
    "heads-per-cta": (
        lambda p, d, kw: kw.update(precompute_heads_per_cta=-1),
        ValueError,
        "precompute_heads_per_cta",
    ),
    "scratch-list": (
        lambda p, d, kw: kw.update(cb_scaled=[0.0]),
        TypeError,
        "cb_scaled must be a torch.Tensor",
    ),
    "prev-shape": (
        lambda p, d, kw: p.update(prev_num_accepted_tokens=p["prev_num_accepted_tokens"][:-1]),
        ValueError,
        r"prev_num_accepted_tokens has shape \(6,\)",
    ),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_raise_and_write_nothing(name: str) -> None:
    pool, d = make_pool(5), make_drafts(7)
    kw = dict(out=poisoned(d["x"]))
    edit, error, message = MALFORMED[name]
    edit(pool, d, kw)
    before = snapshot(*(v for v in pool.values() if isinstance(v, torch.Tensor)))
    out = kw.pop("out")
    with pytest.raises(error, match=message):
        call(pool, d, out, **kw)
    after = [v for v in pool.values() if isinstance(v, torch.Tensor)]
    assert all(torch.equal(bits(v), b) for v, b in zip(after, before, strict=True))
    assert out is None or out.isnan().all()
