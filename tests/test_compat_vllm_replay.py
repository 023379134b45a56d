"""ssmdecode.compat.vllm.selective_state_update_replayssm_output_only: vLLM's ReplaySSM decode
(T = 1) with its arguments and its host's cursor contract (write_pos, is_flush a request, the
ring from row 0, a flush absorbing the cached tokens and the current one), run by the fast
replay route, against a float64 implementation of that contract and the plain float64
recurrence over a multi-step decode with flushes. CPU (Triton's interpreter), tiny shapes."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, bits, to_device
from ssmdecode import LaunchConfig
from ssmdecode.compat.vllm import MAX_CACHE_LEN, NULL_BLOCK_ID, selective_state_update_replayssm_output_only
from ssmdecode.ops.selective_state_update import replay_fast
from test_replay_fast import assert_out_accurate, assert_state_accurate

EMPTY = inspect.Parameter.empty
# vllm/model_executor/layers/mamba/ops/selective_state_update_replayssm_output_only.py (055e47c2)
VLLM_PARAMS = [
    ("state", EMPTY), ("x", EMPTY), ("dt", EMPTY), ("A", EMPTY), ("B", EMPTY), ("C", EMPTY),
    ("D", None), ("dt_bias", None), ("z", None), ("dt_softplus", False), ("x_cache", None),
    ("dt_cache", None), ("B_cache", None), ("bc_pre", None), ("write_pos", None), ("is_flush", None),
    ("max_cache_len", 16), ("state_batch_indices", None), ("null_block_id", 0), ("out", None),
    ("enable_stochastic_rounding", False), ("cache_philox_rounds", 0),
]  # fmt: skip

BATCH, H, P, N, G = 3, 2, 8, 16, 1
SLOTS = 6  # slot 0 is vLLM's null block


def make_pool(L: int, seed: int = 0) -> dict:
    """A float32 checkpoint pool after prefill (write_pos 0), empty rings of L rows, per-head
    parameters tied over P, request slots (request 1 on the null block)."""
    g = torch.Generator().manual_seed(seed)
    pool = dict(
        state=torch.randn(SLOTS, H, P, N, generator=g),
        x_cache=torch.zeros(SLOTS, H, L, P, dtype=torch.bfloat16),
        dt_cache=torch.zeros(SLOTS, H, L),
        B_cache=torch.zeros(SLOTS, G, L, N, dtype=torch.bfloat16),
        bc_pre=torch.full((BATCH, G, L), 7.0),
        write_pos=torch.zeros(BATCH, dtype=torch.int32),
        is_flush=torch.zeros(BATCH, dtype=torch.int8),
        A=(-torch.rand(H, generator=g) - 0.5)[:, None, None].expand(H, P, N),
        D=torch.randn(H, generator=g)[:, None].expand(H, P),
        dt_bias=(torch.rand(H, generator=g) - 3.0)[:, None].expand(H, P),
        state_batch_indices=torch.tensor([[4, 9], [NULL_BLOCK_ID, 9], [2, 9]], dtype=torch.int32),
    )
    return {k: to_device(v, DEVICE) for k, v in pool.items()}  # (the expanded A, D, dt_bias stay tied)


def make_token(seed: int) -> dict:
    """One decode step's inputs as Mamba2 passes them: x, B, C views of one row, dt tied."""
    g = torch.Generator().manual_seed(100 + seed)
    xbc = torch.randn(BATCH, H * P + 2 * G * N, generator=g).to(torch.bfloat16).to(DEVICE)
    return dict(
        x=xbc[:, : H * P].unflatten(-1, (H, P)),
        B=xbc[:, H * P : H * P + G * N].unflatten(-1, (G, N)),
        C=xbc[:, H * P + G * N :].unflatten(-1, (G, N)),
        dt=torch.randn(BATCH, H, generator=g).to(torch.bfloat16).to(DEVICE)[..., None].expand(BATCH, H, P),
        z=torch.randn(BATCH, H, P, generator=g).to(torch.bfloat16).to(DEVICE),
    )


def call(pool: dict, tok: dict, out: torch.Tensor, L: int, **extra: object) -> torch.Tensor:
    """The adapter with vLLM's positional order up to dt_softplus, the rest by keyword."""
    return selective_state_update_replayssm_output_only(
        pool["state"], tok["x"], tok["dt"], pool["A"], tok["B"], tok["C"], pool["D"], pool["dt_bias"],
        tok["z"], True, x_cache=pool["x_cache"], dt_cache=pool["dt_cache"], B_cache=pool["B_cache"],
        bc_pre=pool["bc_pre"], write_pos=pool["write_pos"], is_flush=pool["is_flush"], max_cache_len=L,
        state_batch_indices=pool["state_batch_indices"], out=out, config=LaunchConfig(16, 4, True), **extra,
    )  # fmt: skip


def contract_reference(pool: dict, tok: dict) -> tuple[torch.Tensor, ...]:
    """vLLM's contract in float64, pure: (out, state, x_cache, B_cache, dt_cache) after the
    call. Request b on slot s (column 0; null_block_id skipped, out 0) with wp = write_pos[b]
    cached tokens at rows 0 .. wp - 1: the recurrence over them and the current token; on a
    flush (is_flush[b]) that state is written and the ring untouched, otherwise the current
    token's x, B and dt' (float32) written at row wp and the state untouched."""
    f = torch.float64
    state = pool["state"].to(f).clone()
    xc, Bc, dtc = pool["x_cache"].clone(), pool["B_cache"].clone(), pool["dt_cache"].clone()
    A = pool["A"][:, 0, 0].to(f)
    dtp = (tok["dt"][..., 0].float() + pool["dt_bias"][:, 0].float()).to(torch.float32)
    dtp = torch.where(dtp <= 20.0, F.softplus(dtp), dtp)  # [B, H], float32 as the ring holds it
    out = torch.zeros(tok["x"].shape, dtype=f, device=DEVICE)
    for b in range(BATCH):
        s = int(pool["state_batch_indices"][b, 0])
        if s == NULL_BLOCK_ID:
            continue
        wp, flush = int(pool["write_pos"][b]), bool(pool["is_flush"][b])
        h = state[s].clone()
        rows = [(xc[s, :, j], Bc[s, :, j], dtc[s, :, j]) for j in range(wp)]
        rows.append((tok["x"][b], tok["B"][b], dtp[b]))
        for xj, Bj, dj in rows:
            d = dj.to(f)
            Bh = Bj.to(f).repeat_interleave(H // G, 0)
            h = h * torch.exp(A * d)[:, None, None] + (d[:, None] * Bh)[:, None, :] * xj.to(f)[..., None]
        y = (h * tok["C"][b].to(f).repeat_interleave(H // G, 0)[:, None, :]).sum(-1)
        zb = tok["z"][b].to(f)
        out[b] = (y + pool["D"].to(f) * tok["x"][b].to(f)) * zb * torch.sigmoid(zb)
        if flush:
            state[s] = h
        else:
            xc[s, :, wp], Bc[s, :, wp], dtc[s, :, wp] = tok["x"][b], tok["B"][b], dtp[b]
    return out, state, xc, Bc, dtc


def host_cursors(pool: dict, L: int) -> None:
    """vLLM's host after a step: write_pos 0 after a flush, else one more; the next step
    flushes at write_pos = L - 1."""
    wp = torch.where(pool["is_flush"].bool(), 0, pool["write_pos"] + 1).to(torch.int32)
    pool["write_pos"].copy_(wp)
    pool["is_flush"].copy_((wp == L - 1).to(torch.int8))


def test_signature_is_vllms() -> None:
    params = list(inspect.signature(selective_state_update_replayssm_output_only).parameters.values())
    assert [(p.name, p.default) for p in params[:-1]] == VLLM_PARAMS
    assert (params[-1].name, params[-1].kind) == ("config", inspect.Parameter.KEYWORD_ONLY)
    assert MAX_CACHE_LEN == 16


@pytest.mark.parametrize("variant", ["", "grams", "programs", "programs-take", "split"])
@pytest.mark.parametrize("L", [8, 16])
def test_decode_steps_with_vllms_cursors(L: int, variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """2 L + 3 decode steps from prefill, the host's cursors after each (a flush every L
    steps): every step's out, state and rings against the float64 contract; out within 1 bf16
    ulp of the plain float64 recurrence from prefill; the null block's request writes nothing
    and gets zeros; the state after each flush within 1e-5 max|state| of that recurrence; the
    bc_pre scratch untouched. grams: with the fast route's precomputed Grams at any batch;
    programs: with them and the flushing requests' steps taken by flush programs first in the
    main kernel's grid (replay_fast.FLUSH_PROGRAMS), -take: the first of them only, the other in
    its own program of the grid (replay_fast.PROGRAMS_TAKE); split: with them and the flushes in a
    kernel of their own after the main kernel (replay_fast.SPLIT_DECODE); else in the main
    kernel."""
    monkeypatch.setattr(replay_fast, "GRAM_MIN_REQUESTS", 1 if variant != "" else 10**9)
    monkeypatch.setattr(
        replay_fast, "FLUSH_PROGRAMS_MIN_REQUESTS", 1 if variant.startswith("programs") else 10**9
    )
    monkeypatch.setattr(replay_fast, "PROGRAMS_TAKE", 1 if variant == "programs-take" else 0)
    monkeypatch.setattr(replay_fast, "SPLIT_DECODE_MIN_REQUESTS", 1 if variant == "split" else 10**9)
    pool = make_pool(L)
    truth = pool["state"].double()  # the state vLLM means, by the plain recurrence
    live = pool["state_batch_indices"][:, 0] != NULL_BLOCK_ID
    slots = pool["state_batch_indices"][live, 0].long()
    null = {k: pool[k][NULL_BLOCK_ID].clone() for k in ("state", "x_cache", "B_cache", "dt_cache")}
    flushes = 0
    for step in range(2 * L + 3):
        tok = make_token(step)
        want = contract_reference(pool, tok)
        out = torch.full(tok["x"].shape, float("nan"), dtype=torch.float32, device=DEVICE)
        assert call(pool, tok, out, L) is out
        assert_out_accurate(out[live], want[0][live], f"step {step}: out against the contract")
        assert (out[~live] == 0).all(), "the null block's request"
        assert_state_accurate(pool["state"], want[1], f"step {step}: state")
        for name, got in zip(("x_cache", "B_cache"), want[2:4], strict=True):
            assert torch.equal(bits(pool[name]), bits(got)), f"step {step}: {name}"
        torch.testing.assert_close(pool["dt_cache"], want[4], rtol=1e-6, atol=1e-7)
        # the plain recurrence of every step's token
        A = pool["A"][:, 0, 0].double()
        for b in live.nonzero().flatten().tolist():
            s = int(pool["state_batch_indices"][b, 0])
            d = torch.where(
                tok["dt"][b, :, 0].double() + pool["dt_bias"][:, 0].double() <= 20.0,
                F.softplus(tok["dt"][b, :, 0].double() + pool["dt_bias"][:, 0].double()),
                tok["dt"][b, :, 0].double() + pool["dt_bias"][:, 0].double(),
            )
            Bh = tok["B"][b].double().repeat_interleave(H // G, 0)
            truth[s] = (
                truth[s] * torch.exp(A * d)[:, None, None]
                + (d[:, None] * Bh)[:, None, :] * tok["x"][b].double()[..., None]
            )
            y = (truth[s] * tok["C"][b].double().repeat_interleave(H // G, 0)[:, None, :]).sum(-1)
            zb = tok["z"][b].double()
            y = (y + pool["D"].double() * tok["x"][b].double()) * zb * torch.sigmoid(zb)
            assert_out_accurate(out[b], y, f"step {step}: out against the recurrence")
        if bool(pool["is_flush"][live].any()):
            flushes += 1
            assert_state_accurate(pool["state"][slots], truth[slots], f"step {step}: flushed state")
        host_cursors(pool, L)
    assert flushes >= 2
    for name, v in null.items():
        assert torch.equal(bits(pool[name][NULL_BLOCK_ID]), bits(v)), f"the null block's {name}"
    assert bool((pool["bc_pre"] == 7.0).all()), "bc_pre is vLLM's scratch, untouched here"


def test_the_host_decides_the_flush() -> None:
    """A flush wherever the host marks it (write_pos 3 of 16 here), not where ssmdecode's ring
    rule would: the state absorbs the 3 cached tokens and the current one."""
    L = 16
    pool = make_pool(L, 1)
    for step in range(3):
        call(pool, make_token(step), torch.empty(BATCH, H, P, device=DEVICE), L)
        host_cursors(pool, L)
    pool["is_flush"].fill_(1)
    tok = make_token(3)
    want = contract_reference(pool, tok)
    out = torch.full(tok["x"].shape, float("nan"), dtype=torch.float32, device=DEVICE)
    call(pool, tok, out, L)
    live = pool["state_batch_indices"][:, 0] != NULL_BLOCK_ID
    assert_out_accurate(out[live], want[0][live])
    assert_state_accurate(pool["state"], want[1])
    assert torch.equal(bits(pool["x_cache"]), bits(want[2])), "a flush appends nothing"


def test_fp16_state_rounds_the_flush_stochastically() -> None:
    """enable_stochastic_rounding (fp16 states): a flush writes the state; the same torch seed
    gives the same bits, another seed other bits; bf16 states are refused as vLLM refuses them."""
    L = 8
    results = []
    for seed in (0, 0, 1):
        pool = make_pool(L, 2)
        pool["state"] = pool["state"].half()
        pool["write_pos"].fill_(5)
        pool["is_flush"].fill_(1)
        torch.manual_seed(seed)
        call(pool, make_token(0), torch.empty(BATCH, H, P, device=DEVICE), L, enable_stochastic_rounding=True)
        results.append(bits(pool["state"]).clone())
    assert torch.equal(results[0], results[1]) and not torch.equal(results[0], results[2])
    pool = make_pool(L)
    pool["state"] = pool["state"].bfloat16()
    with pytest.raises(ValueError, match=r"requires state dtype torch\.float16"):
        call(pool, make_token(0), torch.empty(BATCH, H, P, device=DEVICE), L, enable_stochastic_rounding=True)


BAD = {
    "no-out": (lambda pool, kw: kw.update(out=None), TypeError, "out is required"),
    "ring-length": (lambda pool, kw: kw.update(L=4), ValueError, r"max_cache_len = 4"),
    "write-pos-dtype": (
        lambda pool, kw: pool.update(write_pos=pool["write_pos"].long()),
        ValueError,
        "write_pos must be int32",
    ),
    "is-flush-dtype": (
        lambda pool, kw: pool.update(is_flush=pool["is_flush"].float()),
        ValueError,
        "is_flush must be int8 or bool",
    ),
    "bc-pre-shape": (
        lambda pool, kw: pool.update(bc_pre=pool["bc_pre"][:, :, :3]),
        ValueError,
        "bc_pre must be",
    ),
    "untied-dt": (lambda pool, kw: kw.update(dt="untied"), ValueError, "tied over the head dim"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_calls_raise_and_write_nothing(name: str) -> None:
    L = 8
    pool, tok = make_pool(L), make_token(0)
    kw = {"out": torch.full((BATCH, H, P), float("nan"), device=DEVICE), "L": L}
    edit, error, message = BAD[name]
    edit(pool, kw)
    if kw.pop("dt", None) == "untied":
        tok["dt"] = tok["dt"].contiguous()
    before = [bits(v).clone() for v in pool.values()]
    with pytest.raises(error, match=message):
        call(pool, tok, kw["out"], kw["L"])
    assert all(torch.equal(bits(v), b) for v, b in zip(pool.values(), before, strict=True))


def test_layout_without_heads_is_one_head() -> None:
    """vLLM's layout without the head dim (state [S, P, N], x [B, P], B [B, N], ...) runs as
    one head: the same out, state and rings as the call with H = 1."""
    L = 8
    pool = make_pool(L, 3)
    tok = make_token(3)
    one = {k: v[:, :1].clone() if k in ("state", "x_cache", "dt_cache") else v for k, v in pool.items()}
    one["A"], one["D"], one["dt_bias"] = pool["A"][:1], pool["D"][:1], pool["dt_bias"][:1]
    one["write_pos"].fill_(3)
    one["is_flush"].copy_(torch.tensor([0, 0, 1], dtype=torch.int8))
    written = ("state", "x_cache", "dt_cache", "B_cache", "write_pos", "is_flush")
    flat = {k: {k2: v2.clone() if k2 in written else v2 for k2, v2 in one.items()} for k in ("heads", "flat")}
    t1 = {k: v[:, :1] for k, v in tok.items()}
    t1["B"], t1["C"] = tok["B"], tok["C"]  # G = 1
    outs = {}
    for name, p in flat.items():
        out = torch.full((BATCH, 1, P), float("nan"), device=DEVICE)
        if name == "heads":
            call(p, t1, out, L)
        else:
            selective_state_update_replayssm_output_only(
                p["state"][:, 0], t1["x"][:, 0], t1["dt"][:, 0], p["A"][0], t1["B"][:, 0], t1["C"][:, 0],
                p["D"][0], p["dt_bias"][0], t1["z"][:, 0], True, x_cache=p["x_cache"], dt_cache=p["dt_cache"],
                B_cache=p["B_cache"], bc_pre=p["bc_pre"], write_pos=p["write_pos"], is_flush=p["is_flush"],
                max_cache_len=L, state_batch_indices=p["state_batch_indices"], out=out[:, 0],
                config=LaunchConfig(16, 4),
            )  # fmt: skip
        outs[name] = out
    assert torch.equal(bits(outs["heads"]), bits(outs["flat"]))
    for k in ("state", "x_cache", "B_cache", "dt_cache"):
        assert torch.equal(bits(flat["heads"][k]), bits(flat["flat"][k])), k
