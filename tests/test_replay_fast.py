"""selective_state_replay(..., exact=False), the fast route, against the float64 recurrence on
the CPU (Triton's interpreter): out within 1 bf16 ulp of the float64 value and no worse on
average than bf16 rounding itself, a flushed state within 1e-5 max|state|; the same rings,
cursors and flushed checkpoints as the exact route (bit for bit); decode (T = 1) and verify
(T = 2, 4, 8) over many steps with replay_advance; no flush, flush, steady state, pads, packed
drafts, ring wrap-around, 16-bit states with stochastic rounding, odd shapes, G < H.
@pytest.mark.gpu: the headline shape at batch 64 and 512, run-to-run bits, CUDA graphs."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from conftest import DEVICE, bits
from ssmdecode import LaunchConfig
from ssmdecode.config import lookup_config, replay_fast_config, table_key
from ssmdecode.numerics import FAST_MEAN_RATIO, FAST_OUT_ULPS, FAST_STATE_REL, out_resolution
from ssmdecode.ops.selective_state_update import (
    replay_advance,
    replay_fast,
    replay_flush,
    selective_state_replay,
    selective_state_replay_reference,
)
from ssmdecode.ops.selective_state_update.launch import Launch
from ssmdecode.ops.selective_state_update.replay import prepare as replay_prepare
from test_replay import PAD, Replay, make_drafts, make_pool

# The accuracy bars of the fast route (docs/numerics.md), one definition for the tests and the
# tuner's admission (ssmdecode.numerics).
OUT_ULPS, MEAN_RATIO, STATE_REL = FAST_OUT_ULPS, FAST_MEAN_RATIO, FAST_STATE_REL


def assert_out_accurate(got: torch.Tensor, want: torch.Tensor, what: str = "out") -> None:
    """got against the float64 want: within OUT_ULPS bf16 ulps everywhere and a mean error at
    most MEAN_RATIO times that of want rounded to bf16. A float32 got is rounded to bf16 here
    (to nearest, as the GPU's store does; Triton's interpreter converts float32 to bf16 toward
    zero, so the CPU tests store float32 out)."""
    want = want.double().to(got.device)
    if got.dtype == torch.float32:
        got = got.to(torch.bfloat16)
    err = (got.double() - want).abs()
    assert not got.isnan().any(), f"{what}: NaN (an element never written)"
    worst = (err / out_resolution(want)).max().item()
    assert worst <= OUT_ULPS, f"{what}: {worst:.3f} bf16 ulps (floored: out_resolution) off the float64 value"
    base = (want.to(torch.bfloat16).double() - want).abs().mean().item()
    assert err.mean().item() <= MEAN_RATIO * base + 1e-30, f"{what}: mean error {err.mean()} vs bf16's {base}"


def assert_state_accurate(got: torch.Tensor, want: torch.Tensor, what: str = "state") -> None:
    want = want.double().to(got.device)
    scale = want.abs().max().item()
    worst = (got.double() - want).abs().max().item()
    assert worst <= STATE_REL * scale, (
        f"{what}: {worst:.3g} off, {worst / scale:.3g} of max|state| {scale:.3g}"
    )


def assert_same_writes(
    pool: dict, twin: dict, config: LaunchConfig, what: str = "", dual: bool | None = None
) -> None:
    """The fast route's writes (pool) against the exact route's from the same pool (twin): the
    rings bit for bit; the state bit for bit where the fast route's flush replays the cached
    tokens with the exact kernel's operations (dual False; None: replay_fast.dual_flush of
    config off), else (the dual form's matmul: other roundings) within twice STATE_REL of
    max|state| of each other (float32; each is held to STATE_REL of float64 apart) or one ulp of
    a 16-bit state."""
    for name in ("x_cache", "B_cache", "dt_cache"):
        assert torch.equal(bits(pool[name]), bits(twin[name])), f"{what}{name}: fast and exact routes differ"
    fast, exact = pool["state"], twin["state"]
    if dual is None:
        dual = replay_fast.dual_flush(config, fast.shape[-1])
    if not dual:
        assert torch.equal(bits(fast), bits(exact)), f"{what}state: fast and exact routes differ"
        return
    a, b = fast.double(), exact.double()
    if fast.dtype == torch.float32:
        bound = 2 * STATE_REL * b.abs().max().item()
    else:
        bound = torch.finfo(fast.dtype).eps * torch.maximum(a.abs(), b.abs())
    assert ((a - b).abs() <= bound).all(), f"{what}state: the routes' flushed states differ past the bars"


def _config(case: Replay) -> LaunchConfig:
    """One program a (request, head) on the CPU (the interpreter's cost is per program)."""
    return LaunchConfig(max(16, 1 << (case.headdim - 1).bit_length()), 4)


def _kwargs(pool: dict, drafts: dict) -> dict:
    return dict(pool, **drafts, dt_softplus=True, pad_slot_id=PAD)


def _set_cursors(pool: dict, case: Replay, cached: str, seed: int, wrap: bool = False) -> None:
    """num_cached of every slot: 'none' (0), 'keep' (the most that does not flush), 'flush'
    (past the flush rule), 'steady' (uniform over 0 .. window); wrap: rings starting at R - 1
    or R - 2, so that the cached tokens and the drafts wrap around."""
    g = torch.Generator().manual_seed(seed)
    S, R, T = pool["state"].shape[0], case.ring, case.tokens
    if cached == "none":
        n = torch.zeros(S, dtype=torch.int32)
    elif cached == "keep":
        n = torch.full((S,), R - 2 * T, dtype=torch.int32)
    elif cached == "flush":
        n = torch.randint(R - 2 * T + 1, case.window + 1, (S,), generator=g).to(torch.int32)
    else:
        n = torch.randint(0, case.window + 1, (S,), generator=g).to(torch.int32)
    pool["num_cached"].copy_(n)
    if wrap:
        pool["ring_start"].copy_(R - 1 - torch.randint(0, 2, (S,), generator=g).to(torch.int32))


WRITTEN = ("state", "x_cache", "B_cache", "dt_cache", "ring_start", "num_cached")


def _packed(drafts: dict, lengths: list[int]) -> dict:
    """The drafts [B, T, ...] as a cu_seqlens call takes them: request b's first lengths[b]
    tokens, one request after the other; dt a head, broadcast over the head dim (a view)."""
    packed = {
        k: (torch.cat([v[b, :n] for b, n in enumerate(lengths)]) if v is not None else None)
        for k, v in drafts.items()
    }
    packed["dt"] = packed["dt"][..., :1].expand(*packed["dt"].shape)
    return packed


def _packed_call(drafts: dict, lengths: list[int], max_seqlen: int) -> tuple[dict, dict, torch.Tensor]:
    """The drafts packed as _packed does, the call's cu_seqlens and max_seqlen, and each packed
    token's request."""
    ends = torch.tensor(lengths).cumsum(0).tolist()
    cu = torch.tensor([0, *ends], dtype=torch.int32, device=DEVICE)
    request = torch.arange(len(lengths)).repeat_interleave(torch.tensor(lengths))
    return _packed(drafts, lengths), {"cu_seqlens": cu, "max_seqlen": max_seqlen}, request


def _twin(pool: dict) -> dict:
    """The pool with its own copies of what a call or replay_advance writes (A, D, dt_bias stay
    the tied broadcasts they are)."""
    return {k: v.clone() if k in WRITTEN else v for k, v in pool.items()}


def _run(kw: dict, config: LaunchConfig, exact: bool, **extra: object) -> torch.Tensor:
    """One call into a NaN-poisoned out, float32 on the CPU (see assert_out_accurate)."""
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    out = torch.full(kw["x"].shape, float("nan"), dtype=dtype, device=DEVICE)
    assert selective_state_replay(**kw, out=out, config=config, exact=exact, **extra) is out
    return out


def _fast_against_float64(kw: dict, config: LaunchConfig, case: Replay) -> torch.Tensor:
    """The fast route's call on kw at config, its out (the live requests') and the state it
    leaves in kw's pool held to the bars against the float64 recurrence of the same inputs;
    returns the live requests' out."""
    want = selective_state_replay_reference(**kw)
    out = _run(kw, config, exact=False)
    live = torch.tensor([r not in case.pad_rows for r in range(case.batch)], device=DEVICE)
    assert_out_accurate(out[live], want[0][live])
    assert_state_accurate(kw["state"], want[1])
    return out[live]


CASES = [
    (Replay(tokens=1, window=7, ngroups=1), "steady"),  # decode
    (Replay(tokens=1, window=15, nheads=2, ngroups=1), "keep"),  # vLLM's ring of 16, no flush
    (Replay(tokens=1, window=15, nheads=2, ngroups=1), "flush"),
    (Replay(tokens=2, window=4), "none"),
    (Replay(tokens=4, window=12, nheads=2, ngroups=1), "keep"),  # flashinfer's window of 12
    (Replay(tokens=4, window=12, nheads=2, ngroups=1), "flush"),
    (Replay(tokens=4, window=12, nheads=2, ngroups=1, pad_rows=(1,)), "steady"),
    (Replay(tokens=8, window=8, nheads=2, ngroups=1, batch=2), "steady"),
    (Replay(tokens=3, window=5, headdim=6, dstate=12, ngroups=1, has_z=False), "steady"),  # masks
    (Replay(tokens=2, window=6, headdim=12, dstate=24, nheads=4, ngroups=2), "steady"),  # odd P, N
    (Replay(tokens=4, window=28, nheads=2, ngroups=1), "steady"),  # past 16: a ring of 32 rows (RP)
    (Replay(tokens=1, window=31, nheads=2, ngroups=1), "flush"),
]


def _id(case: Replay, cached: str, wrap: bool) -> str:
    parts = [f"B{case.batch}", f"T{case.tokens}", f"W{case.window}", f"H{case.nheads}", f"P{case.headdim}"]
    parts += [f"N{case.dstate}", f"G{case.ngroups}", cached]
    return "-".join(parts + ["pad"] * bool(case.pad_rows) + ["noz"] * (not case.has_z) + ["wrap"] * wrap)


WRAPPED = [(CASES[0][0], "steady"), (CASES[5][0], "flush"), (CASES[4][0], "keep"), (CASES[10][0], "flush")]
PARAMS = [(c, n, False) for c, n in CASES] + [(c, n, True) for c, n in WRAPPED]


@pytest.mark.parametrize(("case", "cached", "wrap"), [pytest.param(*p, id=_id(*p)) for p in PARAMS])
def test_one_call_against_float64(case: Replay, cached: str, wrap: bool) -> None:
    """out to 1 bf16 ulp, the flushed state to 1e-5 max|state|, the rings as the reference's;
    the slots that do not flush (and those of no request) keep their state bit for bit; the
    exact route, from the same pool, writes the same rings and the same flushed bits."""
    pool, drafts = make_pool(case), make_drafts(case, 0)
    _set_cursors(pool, case, cached, 0, wrap)
    twin = _twin(pool)
    before = {k: v.clone() for k, v in pool.items() if isinstance(v, torch.Tensor)}
    kw = _kwargs(pool, drafts)
    want = selective_state_replay_reference(**kw)
    out = _run(kw, _config(case), exact=False)
    live = torch.tensor([r not in case.pad_rows for r in range(case.batch)], device=DEVICE)
    assert_out_accurate(out[live], want[0][live])
    assert (out[~live] == 0).all(), "pad requests' out"
    assert_state_accurate(pool["state"], want[1])
    for name, got in zip(("x_cache", "B_cache"), want[2:4], strict=True):
        assert torch.equal(bits(pool[name]), bits(got.to(DEVICE))), name
    torch.testing.assert_close(pool["dt_cache"], want[4].to(DEVICE), rtol=1e-6, atol=1e-7)
    for name in ("ring_start", "num_cached"):
        assert torch.equal(pool[name], before[name]), f"{name} is the engine's to advance"
    flushed = (before["num_cached"] + 2 * case.tokens > case.ring).cpu()
    written = (bits(pool["state"]) != bits(before["state"])).flatten(1).any(1).cpu()
    used = [s for s in pool["state_batch_indices"].tolist() if s != PAD]
    for s in range(pool["state"].shape[0]):
        assert bool(written[s]) == (s in used and bool(flushed[s])), f"slot {s}: written iff flushed"
    _run(_kwargs(twin, drafts), _config(case), exact=True)
    assert_same_writes(pool, twin, _config(case))


@pytest.mark.parametrize(
    ("tokens", "window", "path"),
    [(1, 31, "decode"), (4, 28, "draft-by-draft"), (8, 24, "tiles")],
    ids=["T1-W31-decode", "T4-W28-draft-by-draft", "T8-W24-tiles"],
)
def test_windows_past_16_on_the_large_batch_paths(
    tokens: int, window: int, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ring of 32 rows (RP 32, a window past 16) on the launches a large batch takes, forced
    at 4 requests: the Grams' kernel before the main kernel; at T = 1 the main grid's flush
    programs and the flushes beside; at T >= 2 the flush programs beside, draft by draft or
    beside the tiles' passes over columns. Out and the flushed states within the bars of
    float64, the rings the reference's, the exact route's writes (assert_same_writes)."""
    monkeypatch.setattr(replay_fast, "GRAM_MIN_REQUESTS", 1)
    if path == "decode":
        monkeypatch.setattr(replay_fast, "FLUSH_PROGRAMS_MIN_REQUESTS", 1)
        monkeypatch.setattr(replay_fast, "SIDE_DECODE_MIN_REQUESTS", 1)
    else:
        tiles = path == "tiles"
        monkeypatch.setattr(replay_fast, "TILES_FROM_TOKENS", 2 if tiles else 10**9)
        monkeypatch.setattr(replay_fast, "TILES_MAX_REQUESTS", 10**9 if tiles else 0)
        monkeypatch.setattr(replay_fast, "TILES_COLS_MIN_REQUESTS", 1)
        monkeypatch.setattr(replay_fast, "BESIDE_TILES", tiles)
        monkeypatch.setattr(replay_fast, "BESIDE_MIN_REQUESTS", 1)
        monkeypatch.setattr(replay_fast, "BESIDE_TILES_MIN_REQUESTS", 1)
    case = Replay(tokens=tokens, window=window, nheads=2, ngroups=1, headdim=16, batch=4, pad_rows=(2,))
    pool, drafts = make_pool(case), make_drafts(case, 5)
    _set_cursors(pool, case, "steady", 5, wrap=True)
    pool["num_cached"][pool["state_batch_indices"][[0, 3]]] = case.window  # these two flush
    kw = _kwargs(pool, drafts)
    twin = _twin(pool)
    _, launch = replay_prepare(**kw, config=_config(case), exact=False)
    assert launch.before is not None and launch.beside is not None, "the large batch's launches"
    want = selective_state_replay_reference(**kw)
    out = _run(kw, _config(case), exact=False)
    live = torch.tensor([r not in case.pad_rows for r in range(case.batch)], device=DEVICE)
    assert_out_accurate(out[live], want[0][live])
    assert_state_accurate(pool["state"], want[1])
    for name, got in zip(("x_cache", "B_cache"), want[2:4], strict=True):
        assert torch.equal(bits(pool[name]), bits(got.to(DEVICE))), name
    _run(_kwargs(twin, drafts), _config(case), exact=True)
    assert_same_writes(pool, twin, _config(case), dual=_dual_flushes(kw, _config(case)))


@pytest.mark.parametrize("config", ["8,1", "16,2"])
def test_draft_by_draft_at_fewer_rows_a_warp(config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The draft-by-draft verify step at configs that hold less of the state tile a thread than
    its default (16,1): 8 rows a warp (no tile of 16 rows: a flush here takes the exact
    kernel's operations) and 16 rows over 2 warps (its row sums across warps), with the Grams'
    kernel before and the flushing requests' programs beside; out, the flushed states and the
    rings within the bars of float64; two row blocks a head, a pad request, rings that wrap."""
    monkeypatch.setattr(replay_fast, "TILES_MAX_REQUESTS", 0)
    monkeypatch.setattr(replay_fast, "BESIDE_MIN_REQUESTS", 1)
    monkeypatch.setattr(replay_fast, "GRAM_MIN_REQUESTS", 1)
    case = Replay(tokens=4, window=12, nheads=2, ngroups=1, headdim=16, batch=3, pad_rows=(1,))
    pool, drafts = make_pool(case), make_drafts(case, 3)
    _set_cursors(pool, case, "steady", 3, wrap=True)
    pool["num_cached"][pool["state_batch_indices"][0]] = case.window  # this one flushes
    kw = _kwargs(pool, drafts)
    _, launch = replay_prepare(**kw, config=LaunchConfig.parse(config), exact=False)
    assert (launch.kwargs["ROLE"], launch.beside.kwargs["ROLE"]) == (5, 7)
    assert launch.before is not None and not launch.kwargs["TILES"]
    want = selective_state_replay_reference(**kw)
    out = _run(kw, LaunchConfig.parse(config), exact=False)
    live = torch.tensor([r not in case.pad_rows for r in range(case.batch)], device=DEVICE)
    assert_out_accurate(out[live], want[0][live])
    assert_state_accurate(pool["state"], want[1])
    for name, got in zip(("x_cache", "B_cache"), want[2:4], strict=True):
        assert torch.equal(bits(pool[name]), bits(got.to(DEVICE))), name


@pytest.mark.parametrize("cached", ["steady", "flush"])
@pytest.mark.parametrize(
    ("tiles", "dstate", "cols", "state"),
    [
        (True, 16, 0, torch.float32),
        (True, 40, 16, torch.float32),
        (True, 40, 16, torch.bfloat16),
        (True, 40, -16, torch.float32),
        (False, 16, 0, torch.float32),
        (False, 72, 0, torch.float32),
    ],
    ids=[
        "tiles",
        "tiles-cols16-N40",
        "tiles-cols16-N40-bf16-state",
        "tiles-cols16-N40-pipelined",
        "draft-by-draft",
        "chunked-N72",
    ],
)
def test_both_verify_paths_against_float64(
    tiles: bool, dstate: int, cols: int, state: torch.dtype, cached: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """T >= 2 with out as tiles on the tensor cores and draft by draft (replay_fast._tiles'
    rule forced either way; the tiles also reading the state tile 16 columns a pass,
    replay_fast.TILES_COLS: four passes at dstate 40, the last masked past 40, a flush stored
    pass by pass, also into a bf16 pool, rounded to nearest, and (cols -16) with Triton's
    pipelining of the passes instead of TILES_COLS_AHEAD's loads; draft by draft with its
    chunked state tile, replay_fast.CHUNK: one chunk at dstate 16, four of 32 columns at dstate
    72, the last masked past 72), packed
    requests of 3, 0, 1 and 2 drafts, G < H, a pad request, rings that wrap: out and the
    flushed state within the bars, the rings the exact route's, the flushed states as the exact
    route's (assert_same_writes)."""
    monkeypatch.setattr(replay_fast, "TILES_FROM_TOKENS", 2 if tiles else 10**9)
    monkeypatch.setattr(replay_fast, "TILES_MAX_REQUESTS", 10**9 if tiles else 0)
    monkeypatch.setattr(replay_fast, "TILES_COLS", abs(cols))
    monkeypatch.setattr(replay_fast, "TILES_COLS_AHEAD", cols >= 0)
    monkeypatch.setattr(replay_fast, "TILES_COLS_MIN_REQUESTS", 1)
    case = Replay(tokens=3, window=7, nheads=4, ngroups=2, batch=4, pad_rows=(2,), dstate=dstate, state=state)
    pool, drafts = make_pool(case), make_drafts(case, 7)
    _set_cursors(pool, case, cached, 7, wrap=True)
    lengths = [3, 0, 1, 2]
    packed = _packed(drafts, lengths)
    cu = torch.tensor([0, 3, 3, 4, 6], dtype=torch.int32, device=DEVICE)
    twin = _twin(pool)
    kw = {**_kwargs(pool, packed), "cu_seqlens": cu, "max_seqlen": 3}
    want = selective_state_replay_reference(**kw)
    config = _config(case)
    _, launch = replay_prepare(**kw, config=config, exact=False)
    assert (launch.kwargs["TILES"], launch.kwargs["COLS"]) == (tiles, abs(cols))
    assert launch.kwargs.get("COLS_AHEAD", False) == (cols > 0)
    out = _run(kw, config, exact=False)
    live = (torch.arange(4).repeat_interleave(torch.tensor(lengths)) != 2).to(DEVICE)
    assert_out_accurate(out[live], want[0][live])
    if state == torch.float32:  # a 16-bit checkpoint: against the exact route's (below)
        assert_state_accurate(pool["state"], want[1])
    _run({**_kwargs(twin, packed), "cu_seqlens": cu, "max_seqlen": 3}, config, exact=True)
    assert_same_writes(pool, twin, config)


@pytest.mark.parametrize("cached", ["steady", "flush"])
@pytest.mark.parametrize(
    ("tokens", "headdim", "dstate", "packed"),
    [
        (4, 8, 16, False),
        (2, 12, 72, False),
        (3, 8, 40, True),
        (4, 8, 32, "bf16"),
        (4, 8, 16, "tiles"),
        (4, 8, 40, "flush-tiles"),
        (3, 12, 40, "flush-tiles-cu_seqlens"),
        (4, 8, 16, "tiles-bf16-seeded"),
    ],
    ids=[
        "T4",
        "T2-P12-N72",
        "T3-N40-cu_seqlens",
        "T4-bf16-state",
        "T4-tiles",
        "T4-N40-flush-tiles",
        "T3-P12-N40-flush-tiles-cu_seqlens",
        "T4-tiles-bf16-seeded",
    ],
)
def test_flushes_beside_the_main_kernel(
    tokens: int, headdim: int, dstate: int, packed: bool | str, cached: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The draft-by-draft verify step's flushing requests taken whole by flush programs beside
    the main kernel (replay_fast.VERIFY_FLUSH_BESIDE, ROLE 7; the main kernel the others', ROLE
    5): the flush first, on the tile, as one matmul (_absorb_mma), out from the new checkpoint.
    Out and the flushed state within the bars of float64, the rings and the flushed states as
    the exact route's (assert_same_writes, dual), a state written iff its request flushes; G <
    H, a pad request, rings that wrap, packed requests of 3, 0, 1 and 2 drafts, head dim 12 and
    dstate 72 and 40 (rows and columns masked), a bf16 pool (its checkpoint rounded to
    nearest); and beside the tiles' main kernel (BESIDE_TILES, the main kernel's state tile
    read 16 columns a pass: TILES_COLS), the flush programs draft by draft or tiles too, their
    tile read and flushed in the same passes (BESIDE_FLUSH_TILES, _tiles_cols' FIRST; four
    passes at dstate 40, the last masked), but with a seed (a bf16 pool stochastically rounded)
    the whole tile in both, the flush programs draft by draft."""
    flush_tiles = isinstance(packed, str) and packed.startswith("flush-tiles")
    seeded = packed == "tiles-bf16-seeded"
    tiles = packed == "tiles" or flush_tiles or seeded
    monkeypatch.setattr(replay_fast, "BESIDE_FLUSH_TILES", flush_tiles or seeded)
    monkeypatch.setattr(replay_fast, "TILES_COLS", 16)
    monkeypatch.setattr(replay_fast, "TILES_COLS_MIN_REQUESTS", 1)
    monkeypatch.setattr(replay_fast, "TILES_FROM_TOKENS", 2 if tiles else 10**9)  # else draft by draft
    monkeypatch.setattr(replay_fast, "TILES_MAX_REQUESTS", 10**9 if tiles else 0)
    monkeypatch.setattr(replay_fast, "BESIDE_TILES", tiles)
    monkeypatch.setattr(replay_fast, "BESIDE_MIN_REQUESTS", 1)
    monkeypatch.setattr(replay_fast, "BESIDE_TILES_MIN_REQUESTS", 1)
    state = torch.bfloat16 if packed in ("bf16", "tiles-bf16-seeded") else torch.float32
    packed = packed is True or packed == "flush-tiles-cu_seqlens"
    case = Replay(
        tokens=tokens, window=7, nheads=4, ngroups=2, batch=4, pad_rows=(2,), headdim=headdim, dstate=dstate,
        state=state,
    )  # fmt: skip
    pool, drafts = make_pool(case), make_drafts(case, 9)
    _set_cursors(pool, case, cached, 9, wrap=True)
    extra: dict = {"rand_seed": torch.tensor([12345], dtype=torch.int64, device=DEVICE)} if seeded else {}
    lengths = [tokens] * case.batch
    if packed:
        lengths = [3, 0, 1, 2]
        drafts = _packed(drafts, lengths)
        cu = torch.tensor([0, 3, 3, 4, 6], dtype=torch.int32, device=DEVICE)
        extra = {"cu_seqlens": cu, "max_seqlen": 3}
    config = _config(case)
    _, launch = replay_prepare(**_kwargs(pool, drafts), **extra, config=config, exact=False)
    assert (launch.kwargs["ROLE"], launch.beside.kwargs["ROLE"], launch.after) == (5, 7, None)
    assert (launch.kwargs["TILES"], launch.beside.kwargs["TILES"]) == (tiles, flush_tiles)
    assert (launch.kwargs["COLS"], launch.beside.kwargs["COLS"]) == (
        16 if tiles and not seeded else 0,
        16 if flush_tiles else 0,
    )
    twin = _twin(pool)
    before = bits(pool["state"]).clone()
    kw = {**_kwargs(pool, drafts), **extra}
    want = selective_state_replay_reference(**{k: v for k, v in kw.items() if k != "rand_seed"})
    out = _run(kw, config, exact=False)
    live = (torch.arange(case.batch).repeat_interleave(torch.tensor(lengths)) != 2).to(DEVICE)
    live = live.view(out.shape[: 1 if packed else 2])  # request 2: the pad
    assert_out_accurate(out[live], want[0][live])
    if state == torch.float32:  # a 16-bit checkpoint: against the exact route's (below)
        assert_state_accurate(pool["state"], want[1])
    _run({**_kwargs(twin, drafts), **extra}, config, exact=True)
    assert_same_writes(pool, twin, config, dual=True)
    # a state is written iff its request flushed (the exact route's writes say which)
    exact_written = (bits(twin["state"]) != before).flatten(1).any(1)
    fast_written = (bits(pool["state"]) != before).flatten(1).any(1)
    assert torch.equal(exact_written, fast_written)
    assert bool(fast_written.any()) or cached != "flush"


@pytest.mark.parametrize("cached", ["steady", "flush"])
@pytest.mark.parametrize(
    "tokens, layout",
    [(1, "list"), (3, "grid"), (3, "list")],
    ids=["T1", "T3-grid", "T3-list"],
)
def test_flushes_in_a_kernel_of_their_own(
    tokens: int, layout: str, cached: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """replay_fast.SPLIT_FLUSH (SPLIT_DECODE at T = 1): out and the appends by the main kernel
    for every request (the dual form, no state store), the flushes' checkpoints by a second
    kernel after it: out and the flushed state within the bars of float64, the rings and the
    flushed states the one-kernel route's bits where both flush token by token or both in the
    dual form; G < H, a pad request, rings that wrap. At T >= 2 the flush kernel a program a
    (request, rows, head) (grid) or the flushing requests from a list (VERIFY_FLUSH_LIST)."""
    case = Replay(tokens=tokens, window=7, nheads=4, ngroups=2, batch=4, pad_rows=(2,))
    monkeypatch.setattr(replay_fast, "VERIFY_FLUSH_LIST", layout != "grid")
    results = []
    for split in (True, False):
        monkeypatch.setattr(replay_fast, "SPLIT_FLUSH", split)
        monkeypatch.setattr(replay_fast, "SPLIT_DECODE", split)
        monkeypatch.setattr(replay_fast, "SPLIT_DECODE_MIN_REQUESTS", 1)
        monkeypatch.setattr(replay_fast, "SPLIT_MIN_REQUESTS", 1)
        monkeypatch.setattr(replay_fast, "SPLIT_FROM_TOKENS", 1)  # the split at T = 1 and 3 too
        monkeypatch.setattr(replay_fast, "TILES_MAX_REQUESTS", 0)  # draft by draft: the split's path
        monkeypatch.setattr(replay_fast, "FLUSH_CONFIG", _config(case))
        pool, drafts = make_pool(case), make_drafts(case, 8)
        _set_cursors(pool, case, cached, 8, wrap=True)
        kw = _kwargs(pool, drafts)
        want = selective_state_replay_reference(**kw)
        out = _run(kw, _config(case), exact=False)
        live = torch.tensor([r not in case.pad_rows for r in range(case.batch)], device=DEVICE)
        assert_out_accurate(out[live], want[0][live])
        assert_state_accurate(pool["state"], want[1])
        results.append([bits(pool[n]).clone() for n in ("state", "x_cache", "B_cache", "dt_cache")])
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


def _alignment_told(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """What the host tells each launch's own-program flushes of the pool's alignment
    (replay_fast._aligned16, called only where the flush programs are capped), in order."""
    seen: list[bool] = []
    aligned16 = replay_fast._aligned16

    def told(call: object) -> bool:
        seen.append(aligned16(call))
        return seen[-1]

    monkeypatch.setattr(replay_fast, "_aligned16", told)
    return seen


@pytest.mark.parametrize(
    "where",
    [
        "programs",
        "programs-ahead",
        "programs-take",
        "programs-take-unaligned",
        "kernel",
        "beside",
        "beside-after",
        "after-ahead",
    ],
)
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "cu_seqlens"])
@pytest.mark.parametrize("shares", [1, 2, 6])
def test_decode_flush_kernel_shares_the_flushing_requests(
    shares: int, packed: bool, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decode step's flush programs (replay_fast._decode_flushes): the flushing requests
    ranked and shared out over J programs a (rows, head) (J = 1, 2 and 6 for 6 requests: one
    program taking all, rank mod J, more programs than flushes), each flushing slot stored
    once; the programs first in the main kernel's grid, taking the flushing requests' whole
    steps (programs), a kernel of their own after the main kernel (kernel), or one taking the
    flushing requests' whole steps on a stream beside the main kernel (beside), the first of
    them there and the others in a kernel after the main kernel (beside-after), or all of them
    after it (after); -ahead: each program's requests pipelined (_decode_flushes_ahead). Out and
    the flushed states within the bars of float64, and the same bits as the one-kernel route
    with its flushes in the dual form; a pad request, a packed request of no token (which
    neither flushes nor appends), rings that wrap; -take: each flush program takes one flushing
    request at most, the others flush in their own programs of the grid (replay_fast.PROGRAMS_TAKE),
    with a pool whose alignment the own flush restates (P = 16, a ring of 16) and, -unaligned,
    one whose ring stride (P = 8) it must not."""
    take = "-take" in where
    aligned = where == "programs-take"
    case = Replay(
        tokens=1,
        window=15 if aligned else 7,
        nheads=2,
        headdim=16 if aligned else 8,
        ngroups=1,
        batch=6,
        pad_rows=(2,),
    )
    seen = _alignment_told(monkeypatch)
    lengths = [1, 1, 1, 0, 1, 1]
    results = []
    monkeypatch.setattr(replay_fast, "GRAM_MIN_REQUESTS", 1)  # as from 16 requests on
    monkeypatch.setattr(replay_fast, "FLUSH_PROGRAMS_MIN_REQUESTS", 1)
    monkeypatch.setattr(replay_fast, "SPLIT_DECODE_MIN_REQUESTS", 1 if where == "kernel" else 10**9)
    side = where.startswith(("beside", "after"))
    monkeypatch.setattr(replay_fast, "SIDE_DECODE_MIN_REQUESTS", 1 if side else 10**9)
    monkeypatch.setattr(replay_fast, "SIDE_AHEAD", where.endswith("ahead"))
    monkeypatch.setattr(replay_fast, "AFTER_AHEAD", where.endswith("ahead"))
    monkeypatch.setattr(replay_fast, "PROGRAMS_AHEAD", where.endswith("ahead"))
    monkeypatch.setattr(replay_fast, "PROGRAMS_TAKE", 1 if take else 0)
    # beside: every flushing request to the programs beside; beside-after: the first there, the rest after
    monkeypatch.setattr(replay_fast, "SIDE_CAP_SHARE", case.batch if where == "beside-after" else 1)
    for split in (True, False):
        monkeypatch.setattr(replay_fast, "SPLIT_DECODE", split)
        monkeypatch.setattr(replay_fast, "FLUSH_PROGRAMS", split)
        monkeypatch.setattr(replay_fast, "SIDE_DECODE", split)
        monkeypatch.setattr(replay_fast, "FLUSH_SHARE", -(-case.batch // shares))
        monkeypatch.setattr(replay_fast, "PROGRAMS_SHARE", -(-case.batch // shares))
        monkeypatch.setattr(replay_fast, "SIDE_PROGRAMS", 0 if where.startswith("after") else shares)
        monkeypatch.setattr(replay_fast, "SIDE_AFTER_PROGRAMS", shares)
        monkeypatch.setattr(replay_fast, "FLUSH_CONFIG", _config(case))
        monkeypatch.setattr(replay_fast, "SIDE_CONFIG", _config(case))
        pool, drafts = make_pool(case), make_drafts(case, 5)
        _set_cursors(pool, case, "steady", 5, wrap=True)
        pool["num_cached"][pool["state_batch_indices"][[0, 3, 4]]] = case.window  # these flush
        kw = _kwargs(pool, drafts)
        if packed:
            tokens = _packed(drafts, lengths)
            cu = torch.tensor([0, 1, 2, 3, 3, 4, 5], dtype=torch.int32, device=DEVICE)
            kw = {**_kwargs(pool, tokens), "cu_seqlens": cu, "max_seqlen": 1}
        want = selective_state_replay_reference(**kw)
        out = _run(kw, replace(_config(case), slot_major=True), exact=False)
        rows = [r for r, n in enumerate(lengths) if n or not packed]
        live = torch.tensor([r not in case.pad_rows for r in rows], device=DEVICE)
        assert_out_accurate(out[live], want[0][live])
        assert_state_accurate(pool["state"], want[1])
        results.append([bits(pool[n]).clone() for n in ("state", "x_cache", "B_cache", "dt_cache")])
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)
    assert seen == ([aligned] if take else [])  # the split run's flush programs, not the one kernel


@pytest.mark.parametrize("where", ["main", "programs", "programs-ahead", "after-ahead", "kernel"])
def test_decode_flushes_onto_the_tile(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """replay_fast.DECODE_FLUSH_ON_TILE = 2: the decode step's flushes in the dual form onto the
    decayed tile (_absorb_mma) even at (16,1) with N = 128, where the dual form beside the tile
    is ruled out (64 elements a thread: token by token, the exact route's bits): in the main
    kernel's own programs (main), the flush programs first in its grid (programs, -ahead
    pipelined), the flush programs after it (after-ahead) and the split's flush kernel (kernel).
    Out and the flushed states within the bars of float64; the rings and cursors the same bits
    as with the knob off, the flushed states not (another form ran); a pad request, rings that
    wrap, G < H."""
    case = Replay(tokens=1, window=7, nheads=2, headdim=16, ngroups=1, batch=4, pad_rows=(2,), dstate=128)
    config = LaunchConfig(16, 1, True, True)
    assert not replay_fast.dual_flush(config, case.dstate)
    monkeypatch.setattr(replay_fast, "GRAM_MIN_REQUESTS", 1)
    monkeypatch.setattr(replay_fast, "FLUSH_PROGRAMS", where.startswith("programs"))
    monkeypatch.setattr(replay_fast, "FLUSH_PROGRAMS_MIN_REQUESTS", 1)
    monkeypatch.setattr(replay_fast, "PROGRAMS_DUAL", False)  # (16,1): token by token with the knob off
    monkeypatch.setattr(replay_fast, "PROGRAMS_AHEAD", where == "programs-ahead")
    monkeypatch.setattr(replay_fast, "PROGRAMS_TAKE", 0)
    monkeypatch.setattr(replay_fast, "SIDE_DECODE", where.startswith("after"))
    monkeypatch.setattr(replay_fast, "SIDE_DECODE_MIN_REQUESTS", 1)
    monkeypatch.setattr(replay_fast, "SIDE_PROGRAMS", 0)
    monkeypatch.setattr(replay_fast, "SIDE_AFTER_PROGRAMS", 2)
    monkeypatch.setattr(replay_fast, "SIDE_CONFIG", config)
    monkeypatch.setattr(replay_fast, "SPLIT_DECODE", where == "kernel")
    monkeypatch.setattr(replay_fast, "SPLIT_DECODE_MIN_REQUESTS", 1)
    monkeypatch.setattr(replay_fast, "FLUSH_CONFIG", config)
    results = []
    for form in (0, 2):
        monkeypatch.setattr(replay_fast, "DECODE_FLUSH_ON_TILE", form)
        if where == "after-ahead":  # (the pipelined flushes take the dual form: with the knob only)
            monkeypatch.setattr(replay_fast, "AFTER_AHEAD", form == 2)
        pool, drafts = make_pool(case), make_drafts(case, 5)
        _set_cursors(pool, case, "steady", 5, wrap=True)
        pool["num_cached"][pool["state_batch_indices"][[0, 3]]] = case.window  # these flush
        _fast_against_float64(_kwargs(pool, drafts), config, case)
        results.append([bits(pool[n]).clone() for n in WRITTEN])
    (state_off, *rest_off), (state_on, *rest_on) = results
    for a, b in zip(rest_off, rest_on, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(state_off, state_on)


@pytest.mark.parametrize("where", ["main", "kernel"])
def test_draft_by_draft_flushes_onto_the_tile(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """replay_fast.DRAFTS_FLUSH_ON_TILE = 2: the draft-by-draft verify step's (T = 3) flushes in
    the dual form onto the decayed tile at (16,1) with N = 128, token by token with the knob off:
    in the main kernel's programs (main) and in the split's flush kernel after it (kernel). Out
    and the flushed states within the bars of float64; the rings and cursors the same bits as
    with the knob off, the flushed states not; a pad request, rings that wrap."""
    case = Replay(tokens=3, window=7, nheads=2, headdim=16, ngroups=1, batch=3, pad_rows=(1,), dstate=128)
    config = LaunchConfig(16, 1, True, True)
    assert not replay_fast.dual_flush(config, case.dstate)
    monkeypatch.setattr(replay_fast, "TILES_MAX_REQUESTS", 0)  # draft by draft
    monkeypatch.setattr(replay_fast, "VERIFY_FLUSH_BESIDE", False)
    monkeypatch.setattr(replay_fast, "SPLIT_FLUSH", where == "kernel")
    monkeypatch.setattr(replay_fast, "SPLIT_MIN_REQUESTS", 1)
    monkeypatch.setattr(replay_fast, "SPLIT_FROM_TOKENS", 1)
    monkeypatch.setattr(replay_fast, "FLUSH_CONFIG", config)
    results = []
    for form in (0, 2):
        monkeypatch.setattr(replay_fast, "DRAFTS_FLUSH_ON_TILE", form)
        pool, drafts = make_pool(case), make_drafts(case, 7)
        _set_cursors(pool, case, "flush", 7, wrap=True)
        kw = _kwargs(pool, drafts)
        _, launch = replay_prepare(**kw, config=config, exact=False)
        flush, role = (launch, 0) if where == "main" else (launch.after, 2)
        assert (flush.kwargs["ROLE"], flush.kwargs["DUAL_FLUSH"]) == (role, form or False)
        _fast_against_float64(kw, config, case)
        results.append([bits(pool[n]).clone() for n in WRITTEN])
    (state_off, *rest_off), (state_on, *rest_on) = results
    for a, b in zip(rest_off, rest_on, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(state_off, state_on)


def test_own_flush_restates_alignment_only_where_the_pool_has_it() -> None:
    """replay_fast._aligned16, the host's check behind _own_flush's ALIGNED: a contiguous pool
    with P = N = 16 and a ring of 16 has it; a state pool starting 4 bytes in, a ring stride of
    8 elements (P = 8), a ring's x transposed (P not innermost) and a dt ring strided do not."""
    S, H, P, N, R = 3, 2, 16, 16, 16

    def pool(**over: torch.Tensor) -> SimpleNamespace:
        t = dict(
            state=torch.zeros(S, H, P, N),
            x_cache=torch.zeros(S, H, R, P, dtype=torch.bfloat16),
            B_cache=torch.zeros(S, 1, R, N, dtype=torch.bfloat16),
            dt_cache=torch.zeros(S, H, R),
        )
        return SimpleNamespace(**{**t, **over})

    assert replay_fast._aligned16(pool())
    assert not replay_fast._aligned16(pool(state=torch.zeros(S * H * P * N + 1)[1:].view(S, H, P, N)))
    assert not replay_fast._aligned16(pool(x_cache=torch.zeros(S, H, R, 8, dtype=torch.bfloat16)))
    assert not replay_fast._aligned16(pool(x_cache=pool().x_cache.transpose(2, 3)))
    assert not replay_fast._aligned16(pool(dt_cache=torch.zeros(S, H, 2 * R)[..., ::2]))


@pytest.mark.parametrize("tokens", [1, 4], ids=["T1", "T4"])
def test_small_tiles_flush_token_by_token(tokens: int) -> None:
    """Tiles of fewer than 16 rows (no matmul: replay_fast.dual_flush off) flush with the exact
    kernel's operations, so the flushed states are the exact route's bits; out to the bars."""
    case = Replay(tokens=tokens, window=12 if tokens == 4 else 15, nheads=2, ngroups=1, pad_rows=(1,))
    config = LaunchConfig(4, 1, True, True)
    assert not replay_fast.dual_flush(config, case.dstate)
    pool, drafts = make_pool(case), make_drafts(case, 6)
    _set_cursors(pool, case, "flush", 6)
    twin = _twin(pool)
    _fast_against_float64(_kwargs(pool, drafts), config, case)
    _run(_kwargs(twin, drafts), config, exact=True)
    assert_same_writes(pool, twin, config)


@pytest.mark.parametrize("cached", ["steady", "flush"])
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "cu_seqlens"])
@pytest.mark.parametrize("tiles", [False, True], ids=["draft-by-draft", "tiles-cols"])
def test_drafts_loads_ahead_or_in_turn(
    tiles: bool, cached: str, packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the verify step's loads go: draft by draft, every draft's (C_t, its Grams, x_t,
    z_t) in turn after each draft's out or all before the first out (replay_fast.DRAFTS_AHEAD);
    with the tiles (in passes of 16 columns) the next pass's columns of C and of the ring's B
    with its state columns or in the pass (TILES_COLS_INPUTS_AHEAD); draft by draft the drafts'
    B at the start or only by the program that appends it (DRAFTS_B_LATE). The main kernel with
    the precomputed Grams (the wait for their kernel between the drafts' inputs and their Grams),
    the flushing requests' programs beside it without: each within the bars of float64, all the
    same writes bit for bit; G < H, z, a pad request, rings that wrap, packed requests of 3, 0,
    1 and 2 drafts."""
    monkeypatch.setattr(replay_fast, "TILES_FROM_TOKENS", 2 if tiles else 10**9)
    monkeypatch.setattr(replay_fast, "TILES_MAX_REQUESTS", 10**9 if tiles else 0)
    monkeypatch.setattr(replay_fast, "TILES_COLS", 16)
    monkeypatch.setattr(replay_fast, "TILES_COLS_MIN_REQUESTS", 1)
    monkeypatch.setattr(replay_fast, "BESIDE_TILES", tiles)
    monkeypatch.setattr(replay_fast, "BESIDE_MIN_REQUESTS", 1)
    monkeypatch.setattr(replay_fast, "BESIDE_TILES_MIN_REQUESTS", 1)
    monkeypatch.setattr(replay_fast, "GRAM_MIN_REQUESTS", 1)
    case = Replay(tokens=3, window=7, nheads=4, ngroups=2, batch=4, pad_rows=(2,), dstate=40)
    lengths = [3, 0, 1, 2] if packed else [3] * case.batch
    results = []
    for ahead, late in ((False, False), (True, False), (True, True)):
        monkeypatch.setattr(replay_fast, "DRAFTS_AHEAD", ahead)
        monkeypatch.setattr(replay_fast, "TILES_COLS_INPUTS_AHEAD", ahead)
        monkeypatch.setattr(replay_fast, "DRAFTS_B_LATE", late)
        pool, drafts = make_pool(case), make_drafts(case, 4)
        _set_cursors(pool, case, cached, 4, wrap=True)
        assert drafts["z"] is not None
        extra: dict = {}
        if packed:
            drafts = _packed(drafts, lengths)
            cu = torch.tensor([0, 3, 3, 4, 6], dtype=torch.int32, device=DEVICE)
            extra = {"cu_seqlens": cu, "max_seqlen": 3}
        kw = {**_kwargs(pool, drafts), **extra}
        _, launch = replay_prepare(**kw, config=_config(case), exact=False)
        assert (launch.kwargs["ROLE"], launch.beside.kwargs["ROLE"]) == (5, 7)
        assert (launch.kwargs["TILES"], launch.kwargs["COLS"]) == (tiles, 16 if tiles else 0)
        assert launch.kwargs["DRAFTS_AHEAD"] == (ahead and not tiles)
        assert launch.kwargs.get("COLS_IN_AHEAD", False) == (ahead and tiles)
        assert (launch.kwargs["B_LATE"], launch.beside.kwargs["B_LATE"]) == (late and not tiles,) * 2
        assert launch.before is not None  # the Grams' kernel
        want = selective_state_replay_reference(**kw)
        out = _run(kw, _config(case), exact=False)
        live = (torch.arange(case.batch).repeat_interleave(torch.tensor(lengths)) != 2).to(DEVICE)
        live = live.view(out.shape[: 1 if packed else 2])  # request 2: the pad
        assert_out_accurate(out[live], want[0][live])
        assert_state_accurate(pool["state"], want[1])
        results.append([bits(out[live]).clone()] + [bits(pool[n]).clone() for n in WRITTEN])
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            assert torch.equal(a, b)


def _small_tiles_step(case: Replay, cached: str, seed: int) -> tuple[Launch, list[torch.Tensor]]:
    """One fast verify step of case (cursors `cached`, rings that wrap) against float64
    (_fast_against_float64): its launch, and the bits of its live out then of each WRITTEN
    tensor."""
    pool, drafts = make_pool(case), make_drafts(case, seed)
    _set_cursors(pool, case, cached, seed, wrap=True)
    kw = _kwargs(pool, drafts)
    _, launch = replay_prepare(**kw, config=_config(case), exact=False)
    out = _fast_against_float64(kw, _config(case), case)
    return launch, [bits(out).clone()] + [bits(pool[n]).clone() for n in WRITTEN]


@pytest.mark.parametrize("cached", ["steady", "flush"])
def test_small_batch_tiles_flush_reuses_the_rings_B(cached: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-tile tiles kernel with its flushes in it (few requests: no Grams' kernel, ROLE
    0): the flush's ring B rows loaded again after out's store or taken from out's Grams
    (replay_fast.TILES_FLUSH_B_REUSE); both within the bars of float64 and the same writes bit
    for bit; G < H, a pad request, rings that wrap, dstate 40 (columns masked)."""
    case = Replay(tokens=4, window=7, nheads=4, ngroups=2, batch=4, pad_rows=(2,), dstate=40)
    results = []
    for reuse in (False, True):
        monkeypatch.setattr(replay_fast, "TILES_FLUSH_B_REUSE", reuse)
        launch, written = _small_tiles_step(case, cached, 8)
        assert (launch.kwargs["TILES"], launch.kwargs["ROLE"], launch.kwargs["B_REUSE"]) == (True, 0, reuse)
        assert launch.kwargs["DUAL_FLUSH"] and launch.kwargs.get("COLS", 0) == 0  # (the dual form: B_ring)
        assert launch.before is None and launch.beside is None  # no Grams' kernel, the flushes in the kernel
        results.append(written)
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("reuse", [False, True], ids=["B-loaded", "B-reused"])
def test_small_batch_tiles_flush_onto_the_tile(reuse: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-tile tiles kernel's flush absorbing the ring onto the decayed tile (_absorb_mma,
    replay_fast.TILES_FLUSH_ON_TILE) or beside it (_dual_absorb): each within the bars of float64,
    the same out and ring bit for bit (only the flushed states' roundings may differ); G < H, a
    pad request, rings that wrap, dstate 40 (columns masked)."""
    case = Replay(tokens=4, window=7, nheads=4, ngroups=2, batch=4, pad_rows=(2,), dstate=40)
    monkeypatch.setattr(replay_fast, "TILES_FLUSH_B_REUSE", reuse)
    results = []
    for on_tile in (False, True):
        monkeypatch.setattr(replay_fast, "TILES_FLUSH_ON_TILE", on_tile)
        launch, written = _small_tiles_step(case, "flush", 8)
        form = 2 if on_tile else True  # (_flush_form's: 2 onto the tile, the ring's bf16 B on the MMAs)
        assert (launch.kwargs["TILES"], launch.kwargs["ROLE"], launch.kwargs["DUAL_FLUSH"]) == (True, 0, form)
        results.append([written[0], *written[2:]])  # (out and the rings: not the flushed states)
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("cached", ["steady", "flush", "keep"])
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "cu_seqlens"])
@pytest.mark.parametrize("tokens", [1, 3], ids=["T1", "T3"])
def test_with_and_without_the_precomputed_grams(
    tokens: int, cached: str, packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Grams of each (request, group) precomputed (_gram_kernel: at T = 1 from
    GRAM_MIN_REQUESTS requests on, at T >= 2 with GRAM_VERIFY too) and not:
    both within the bars of the float64 recurrence, the same rings and flushed states bit for
    bit; G < H, a pad request, rings that wrap, packed requests of up to T tokens or none."""
    case = Replay(tokens=tokens, window=7, nheads=4, ngroups=2, batch=4, pad_rows=(2,))
    lengths = [tokens, 0, 1, max(1, tokens - 1)]  # packed: request 1 has no token
    results = []
    for grams in (True, False):
        monkeypatch.setattr(replay_fast, "GRAM_MIN_REQUESTS", 1 if grams else 10**9)
        monkeypatch.setattr(replay_fast, "GRAM_VERIFY", grams)
        pool, drafts = make_pool(case), make_drafts(case, 1)
        _set_cursors(pool, case, cached, 1, wrap=True)
        extra: dict = {}
        request = torch.arange(case.batch).repeat_interleave(tokens)  # each token's request
        if packed:
            drafts, extra, request = _packed_call(drafts, lengths, tokens)
        kw = {**_kwargs(pool, drafts), **extra}
        want = selective_state_replay_reference(**kw)
        out = _run(kw, _config(case), exact=False)
        live = (request != 2).view(out.shape[: 1 if packed else 2]).to(DEVICE)  # request 2: the pad
        assert_out_accurate(out[live], want[0][live])
        assert_state_accurate(pool["state"], want[1])
        results.append([bits(pool[n]).clone() for n in ("state", "x_cache", "B_cache", "dt_cache")])
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


# (route, T): where the flushes go while the Grams' kernel weighs (replay_fast.WEIGHTS): in the
# main kernel (inline), first in its grid (programs: ROLE 4), beside it and after it (beside:
# ROLE 5 and 6; at T >= 2 ROLE 5 and the flush programs of ROLE 7), in a kernel after it
# (split: ROLE 1 and 2).
WEIGHT_ROUTES = [
    ("inline", 1), ("programs", 1), ("beside", 1), ("split", 1), ("inline", 3), ("beside", 3), ("split", 3),
]  # fmt: skip


def _weights_route(monkeypatch: pytest.MonkeyPatch, route: str, weights: bool) -> None:
    set_ = monkeypatch.setattr
    set_(replay_fast, "WEIGHTS", weights)
    set_(replay_fast, "GRAM_MIN_REQUESTS", 1)  # the Grams' kernel (as from 16 requests on)
    set_(replay_fast, "TILES_MAX_REQUESTS", 0)  # draft by draft, the weights' path
    set_(replay_fast, "FLUSH_PROGRAMS_MIN_REQUESTS", 1 if route == "programs" else 10**9)
    set_(replay_fast, "SIDE_DECODE_MIN_REQUESTS", 1 if route == "beside" else 10**9)
    set_(replay_fast, "BESIDE_MIN_REQUESTS", 1 if route == "beside" else 10**9)  # (T >= 2)
    set_(replay_fast, "BESIDE_CONFIG", LaunchConfig(16, 1, True, True))
    set_(replay_fast, "SIDE_PROGRAMS", 1)
    set_(replay_fast, "SIDE_CAP_SHARE", 2)  # the first flushing request beside, the rest after
    split = route == "split"
    set_(replay_fast, "SPLIT_DECODE_MIN_REQUESTS", 1 if split else 10**9)
    set_(replay_fast, "SPLIT_MIN_REQUESTS", 1 if split else 10**9)
    set_(replay_fast, "SPLIT_FROM_TOKENS", 1 if split else 10**9)
    for name in ("FLUSH_CONFIG", "SIDE_CONFIG"):
        set_(replay_fast, name, LaunchConfig(16, 4))


@pytest.mark.parametrize("packed", [False, True], ids=["dense", "cu_seqlens"])
@pytest.mark.parametrize(("route", "tokens"), WEIGHT_ROUTES, ids=[f"{r}-T{t}" for r, t in WEIGHT_ROUTES])
def test_with_and_without_the_precomputed_weights(
    route: str, tokens: int, packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dual form's weights of each (request, head) computed by the Grams' kernel, which
    then appends the drafts' dt' and B (replay_fast.WEIGHTS), and by the main kernel's
    programs: both within the bars of the float64 recurrence, the same out, rings and
    flushed states bit for bit (the same operations; on the CPU, where the sums' order is the
    same too), with the flushes inline, first in the main grid, beside it or after it; steady
    cursors with two requests flushing, G < H, a pad request, rings that wrap, packed requests
    of up to T tokens or none."""
    case = Replay(tokens=tokens, window=7, nheads=4, ngroups=2, batch=4, pad_rows=(2,))
    lengths = [tokens, 0, 1, max(1, tokens - 1)]  # packed: request 1 has no token
    results = []
    for weights in (True, False):
        _weights_route(monkeypatch, route, weights)
        pool, drafts = make_pool(case), make_drafts(case, 9)
        _set_cursors(pool, case, "steady", 9, wrap=True)
        pool["num_cached"][pool["state_batch_indices"][[0, 3]]] = case.window  # these flush
        extra: dict = {}
        request = torch.arange(case.batch).repeat_interleave(tokens)
        if packed:
            drafts, extra, request = _packed_call(drafts, lengths, tokens)
        kw = {**_kwargs(pool, drafts), **extra}
        want = selective_state_replay_reference(**kw)
        _, launch = replay_prepare(**kw, config=LaunchConfig(16, 1, True, True), exact=False)
        role = {"inline": 0, "programs": 4, "beside": 5, "split": 1}[route]
        assert (launch.kwargs["ROLE"], launch.kwargs["WEIGHTS"]) == (role, weights)  # the route under test
        # beside at T >= 2 the flush programs weigh their own, and the Grams' kernel leaves them
        if route == "beside" and tokens > 1:
            assert (launch.beside.kwargs["ROLE"], launch.beside.kwargs["WEIGHTS"]) == (7, False)
            assert launch.before.kwargs.get("LEAVE_FLUSHING", False) == weights
        out = _run(kw, LaunchConfig(16, 1, True, True), exact=False)
        live = (request != 2).view(out.shape[: 1 if packed else 2]).to(DEVICE)  # request 2: the pad
        assert_out_accurate(out[live], want[0][live])
        assert_state_accurate(pool["state"], want[1])
        results.append(
            [bits(t).clone() for t in (out, *(pool[n] for n in ("state", "x_cache", "B_cache", "dt_cache")))]
        )
    for name, a, b in zip(("out", "state", "x_cache", "B_cache", "dt_cache"), *results, strict=True):
        assert torch.equal(a, b), f"{name}: with and without the precomputed weights"


@pytest.mark.parametrize("state", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("seeded", [False, True], ids=["nearest", "stochastic"])
def test_16bit_state_flushes_as_the_exact_route(state: torch.dtype, seeded: bool) -> None:
    """A 16-bit checkpoint: the flush stores what the exact route stores (with a seed, the same
    stochastic rounding; assert_same_writes); out within 1 bf16 ulp of the float64 value."""
    case = Replay(tokens=2, window=4, state=state)
    pool, drafts = make_pool(case), make_drafts(case, 3)
    _set_cursors(pool, case, "steady", 3)
    twin = _twin(pool)
    extra = {"rand_seed": torch.tensor([987654321], dtype=torch.int64, device=DEVICE)} if seeded else {}
    want = selective_state_replay_reference(**_kwargs(pool, drafts))
    out = _run(_kwargs(pool, drafts), _config(case), exact=False, **extra)
    assert_out_accurate(out, want[0])
    _run(_kwargs(twin, drafts), _config(case), exact=True, **extra)
    assert_same_writes(pool, twin, _config(case))


@pytest.mark.parametrize("tokens", [1, 3], ids=["T1", "T3"])
@pytest.mark.parametrize("inputs", [torch.float32, torch.float16], ids=["fp32in", "fp16in"])
def test_other_input_dtypes_and_no_slot_indices(tokens: int, inputs: torch.dtype) -> None:
    """float32 and float16 inputs and rings (the Grams and sums by float32 FMAs, or fp16
    tensor-core products), request b on slot b (no state_batch_indices)."""
    case = Replay(tokens=tokens, window=5, nheads=2, ngroups=1)
    pool, drafts = make_pool(case), make_drafts(case, 4)
    _set_cursors(pool, case, "steady", 4)
    pool["state_batch_indices"] = None
    for name in ("x_cache", "B_cache"):
        pool[name] = pool[name].to(inputs)
    drafts = {k: None if v is None else v.to(inputs) for k, v in drafts.items()}
    drafts["dt"] = drafts["dt"][..., :1].expand(*drafts["dt"].shape)  # tied over P again
    twin = _twin(pool)
    want = selective_state_replay_reference(**_kwargs(pool, drafts))
    out = _run(_kwargs(pool, drafts), _config(case), exact=False)
    assert_out_accurate(out, want[0])
    assert_state_accurate(pool["state"], want[1])
    _run(_kwargs(twin, drafts), _config(case), exact=True)
    assert_same_writes(pool, twin, _config(case))


def test_packed_drafts_against_float64() -> None:
    """cu_seqlens: requests of 3, 0, 1 and 2 drafts (max_seqlen 3); a request of none is left
    alone, each flushes by its own count."""
    case = Replay(batch=4, tokens=3, window=5, nheads=2, ngroups=1)
    pool, drafts = make_pool(case), make_drafts(case, 1)
    _set_cursors(pool, case, "steady", 1)
    lengths = [3, 0, 1, 2]
    packed = _packed(drafts, lengths)
    cu = torch.tensor([0, 3, 3, 4, 6], dtype=torch.int32, device=DEVICE)
    kw = _kwargs(pool, packed)
    twin = _twin(pool)
    want = selective_state_replay_reference(**kw, cu_seqlens=cu, max_seqlen=3)
    out = torch.full(packed["x"].shape, float("nan"), dtype=torch.float32, device=DEVICE)
    selective_state_replay(**kw, out=out, cu_seqlens=cu, max_seqlen=3, config=_config(case), exact=False)
    assert_out_accurate(out, want[0])
    assert_state_accurate(pool["state"], want[1])
    selective_state_replay(
        **_kwargs(twin, packed), cu_seqlens=cu, max_seqlen=3, config=_config(case), exact=True
    )
    assert_same_writes(pool, twin, _config(case))


def _materialize(state: torch.Tensor, pool: dict, slots: list[int], case: Replay) -> torch.Tensor:
    """float64: each slot's checkpoint plus its cached ring tokens (what replay_flush writes)."""
    s = state.clone()
    A = pool["A"][:, 0, 0].double()
    hpg = case.nheads // case.ngroups
    for slot in slots:
        for k in range(int(pool["num_cached"][slot])):
            pos = (int(pool["ring_start"][slot]) + k) % case.ring
            d = pool["dt_cache"][slot, :, pos].double()
            Bk = pool["B_cache"][slot, :, pos].double().repeat_interleave(hpg, 0)
            xk = pool["x_cache"][slot, :, pos].double()
            s[slot] = (
                s[slot] * torch.exp(A * d)[:, None, None] + (d[:, None] * Bk)[:, None, :] * xk[..., None]
            )
    return s


@pytest.mark.parametrize("tokens", [1, 4], ids=["decode-T1", "verify-T4"])
def test_steps_track_float64_and_the_exact_route(tokens: int) -> None:
    """40 steps from a prefilled pool (num_cached 0), a random acceptance each (T = 1: one),
    replay_advance after each: every step's out within 1 bf16 ulp of the float64 recurrence
    (a float64 mirror of the pool run by the reference), the fast and exact routes' rings,
    cursors and states bit for bit equal at every step, and the materialized state within
    1e-5 max|state| of float64 at the end."""
    case = Replay(batch=3, tokens=tokens, window=7 if tokens == 1 else 8, nheads=2, headdim=8, ngroups=1,
                  pad_rows=(1,))  # fmt: skip
    pool = make_pool(case, 5)
    pool["num_cached"].zero_()  # after prefill: the checkpoint is the state
    twin = _twin(pool)
    mirror = pool["state"].double()  # the float64 checkpoints, on the same rings and cursors
    slots = pool["state_batch_indices"]
    used = [s for s in slots.tolist() if s != PAD]
    live = slots != PAD
    g = torch.Generator().manual_seed(5)
    config = _config(case)
    for step in range(40):
        drafts = make_drafts(case, step)
        want = selective_state_replay_reference(**_kwargs(dict(pool, state=mirror), drafts))
        out = _run(_kwargs(pool, drafts), config, exact=False)
        _run(_kwargs(twin, drafts), config, exact=True)
        assert_out_accurate(out[live], want[0][live], f"step {step}: out")
        mirror = want[1]
        accepted = torch.randint(1, tokens + 1, (case.batch,), generator=g).to(torch.int32).to(DEVICE)
        for p in (pool, twin):
            replay_advance(p["ring_start"], p["num_cached"], accepted, tokens, case.ring, slots, PAD)
        for name in ("ring_start", "num_cached"):
            assert torch.equal(pool[name], twin[name]), f"step {step}: {name} differs by route"
        assert_same_writes(pool, twin, config, f"step {step}: ")
    truth = _materialize(mirror, pool, used, case)
    replay_flush(*(pool[k] for k in ("state", "x_cache", "B_cache", "dt_cache", "ring_start", "num_cached")),
                 pool["A"], slots, PAD, config)  # fmt: skip
    assert_state_accurate(pool["state"][used], truth[used], "materialized state")


def test_same_inputs_same_bits() -> None:
    """No atomics: two runs from the same pool give the same bits (on the GPU too:
    test_gpu_run_to_run_bits)."""
    case = Replay(tokens=4, window=12, nheads=2, ngroups=1)
    results = []
    for _ in range(2):
        pool, drafts = make_pool(case), make_drafts(case, 2)
        _set_cursors(pool, case, "steady", 2)
        out = _run(_kwargs(pool, drafts), _config(case), exact=False)
        results.append([bits(t).clone() for t in (out, pool["state"], pool["x_cache"], pool["dt_cache"])])
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


def test_bad_calls_raise_and_write_nothing() -> None:
    """Mamba1's layout (dt not tied over the head dim) and an ordered-sum config are refused;
    exact must be a bool; nothing written."""
    case = Replay()
    pool, drafts = make_pool(case), make_drafts(case, 0)
    before = [v.clone() for v in pool.values() if isinstance(v, torch.Tensor)]
    kw = _kwargs(pool, drafts)
    with pytest.raises(ValueError, match="tied over the head dim"):
        selective_state_replay(**dict(kw, dt=kw["dt"].contiguous()), exact=False, config=_config(case))
    with pytest.raises(ValueError, match="the fast replay route sums rows in its own layout"):
        selective_state_replay(**kw, exact=False, config=LaunchConfig.parse("8,1,slot,evict,ordered"))
    with pytest.raises(TypeError, match="exact must be a bool"):
        selective_state_replay(**kw, exact=0)
    for v, b in zip([v for v in pool.values() if isinstance(v, torch.Tensor)], before, strict=True):
        assert torch.equal(v, b)


def test_default_config_of_the_fast_route() -> None:
    """With no table entry: 16 rows and one warp at T = 1 above batch 8 (with the precomputed
    Grams), 16 rows and 4 warps at small batch; T >= 3 at small batch (tiles) 32 rows and 2
    warps from batch 3, 4 warps below; T = 2 there 16 rows and 2 warps; 64 rows and 4 warps
    from T = 8 (tiles), else 16 rows and one warp (draft by draft); its own key in the tables."""
    assert replay_fast_config(64, 128, 512, tokens=1) == LaunchConfig(16, 1, True, True)
    assert replay_fast_config(64, 128, batch=8, tokens=1) == LaunchConfig(16, 4, True, True)
    assert replay_fast_config(64, 128, 512, tokens=4) == LaunchConfig(16, 1, True, True)
    assert replay_fast_config(64, 128, 512, tokens=8) == LaunchConfig(64, 4, True, True)
    assert replay_fast_config(64, 128, 8, tokens=4) == LaunchConfig(32, 2, True, True)
    assert replay_fast_config(64, 128, 3, tokens=8) == LaunchConfig(32, 2, True, True)
    assert replay_fast_config(64, 128, 2, tokens=4) == LaunchConfig(32, 4, True, True)
    assert replay_fast_config(64, 128, 1, tokens=3) == LaunchConfig(32, 4, True, True)
    assert replay_fast_config(12, 24, 4, tokens=3) == LaunchConfig(16, 2, True, True)
    assert replay_fast_config(64, 128, 8, tokens=2) == LaunchConfig(16, 2, True, True)
    assert table_key(64, 128, torch.float32, "replay-fast", 4).endswith("mode=replay-fast tokens=4")
    got = lookup_config(64, 128, torch.float32, 64, "cpu", mode="replay-fast", tokens=1)
    assert got == replay_fast_config(64, 128, 64, 1)


@pytest.mark.parametrize(
    ("tokens", "batch", "route"),
    [
        (4, 64, (16, 1)),
        (4, 128, (64, 4)),
        (4, 512, (64, 4)),
        (2, 64, (64, 4)),
        (3, 512, (64, 4)),
        (4, 32, (16, 1)),
        (4, 16, (16, 1)),
        (2, 32, (64, 4)),
        (2, 16, (64, 4)),
        (4, 12, "inline"),
        (2, 12, "inline"),
        (4, 32, "split"),
        (8, 512, "tiles"),
        (8, 64, "tiles"),
        (8, 32, "tiles-inline"),
        (8, 8, "tiles-inline"),
    ],
)
def test_where_the_verify_steps_flushes_run(
    tokens: int, batch: int, route: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default routes of the verify step's flushes (no kernel runs): from 2 drafts and
    BESIDE_MIN_REQUESTS requests (BESIDE_TILES_MIN_REQUESTS in the tiles' step, T = 8) the
    flushing requests' whole steps beside the main kernel (ROLE 7 beside ROLE 5, beside_config's
    rows and warps, both capped at 128 registers); below it the main kernel's own. With the
    flush programs beside off, the split flush kernel after the main kernel at T = 4. The tiles'
    main kernel and its flush programs read the state tile in passes of TILES_COLS columns from
    TILES_COLS_MIN_REQUESTS requests on, the flush programs at (64,4) (and never with a seed:
    stochastic rounding keys its bits by whole rows; the flush programs then draft by draft)."""
    if route == "split":
        monkeypatch.setattr(replay_fast, "VERIFY_FLUSH_BESIDE", False)
    case = Replay(
        tokens=tokens, window=16, nheads=2, ngroups=1, batch=batch, headdim=64, dstate=128, pad_rows=()
    )
    _, launch = replay_prepare(**_kwargs(make_pool(case), make_drafts(case, 0)), exact=False)
    main, beside, after = launch.kwargs, launch.beside, launch.after
    if isinstance(route, tuple):
        assert (main["ROLE"], beside.kwargs["ROLE"], after) == (5, 7, None)
        assert (beside.kwargs["BLOCK_M"], beside.kwargs["num_warps"]) == route
        assert launch.before is not None  # the Grams' kernel, ahead of the main kernel
    elif route == "split":
        assert (main["ROLE"], after.kwargs["ROLE"], beside) == (1, 2, None)
    elif route == "tiles":
        assert (main["ROLE"], beside.kwargs["ROLE"], after, main["TILES"], beside.kwargs["TILES"]) == (
            5, 7, None, True, True,
        )  # fmt: skip
        assert (beside.kwargs["BLOCK_M"], beside.kwargs["num_warps"], beside.kwargs["maxnreg"]) == (
            64,
            4,
            128,
        )
        assert (main["COLS"], beside.kwargs["COLS"], main["COLS_AHEAD"]) == (32, 32, True)
        seed = torch.tensor([1], dtype=torch.int64, device=DEVICE)
        bf16 = replace(case, state=torch.bfloat16)
        kw = _kwargs(make_pool(bf16), make_drafts(bf16, 0))
        _, seeded = replay_prepare(**kw, rand_seed=seed, exact=False)
        _, nearest = replay_prepare(**kw, exact=False)
        assert (seeded.kwargs["COLS"], seeded.beside.kwargs["COLS"], seeded.beside.kwargs["TILES"]) == (
            0,
            0,
            False,
        )
        assert (nearest.kwargs["COLS"], nearest.beside.kwargs["COLS"]) == (32, 32)
    else:
        assert (main["ROLE"], after, beside, main["TILES"], main["COLS"]) == (
            0,
            None,
            None,
            route == "tiles-inline",
            0,
        )


def test_tiles_flush_in_the_dual_form_inline() -> None:
    """The tiles' verify step (T = 8) with 64 accumulator elements a thread (16 rows, one warp,
    N = 128) flushes in its own programs in the dual form (replay_fast.TILES_DUAL_MAX_ELEMENTS;
    the draft-by-draft step at that config token by token): out and the flushed states within
    the bars of float64, the rings the exact route's bits, the states within the dual form's
    bound of the exact route's."""
    case = Replay(tokens=8, window=8, nheads=2, ngroups=1, batch=2, headdim=16, dstate=128, pad_rows=())
    config = LaunchConfig(16, 1, True, True)
    assert replay_fast.dual_flush(config, case.dstate, tiles=True)
    assert not replay_fast.dual_flush(config, case.dstate)
    pool, drafts = make_pool(case), make_drafts(case, 4)
    _set_cursors(pool, case, "steady", 4, wrap=True)
    pool["num_cached"][pool["state_batch_indices"][0]] = case.window  # one request flushes at least
    twin = _twin(pool)
    kw = _kwargs(pool, drafts)
    _, launch = replay_prepare(**kw, config=config, exact=False)
    assert launch.kwargs["TILES"] and launch.kwargs["DUAL_FLUSH"] and launch.after is None
    want = selective_state_replay_reference(**kw)
    out = _run(kw, config, exact=False)
    assert_out_accurate(out, want[0])
    assert_state_accurate(pool["state"], want[1])
    _run(_kwargs(twin, drafts), config, exact=True)
    assert_same_writes(pool, twin, config, dual=True)


@pytest.mark.parametrize(
    "tokens, batch, tiles",
    [(2, 8, False), (3, 8, True), (4, 8, True), (2, 9, False), (4, 9, False), (8, 9, True)],
)
def test_verify_path_by_drafts_and_batch(tokens: int, batch: int, tiles: bool) -> None:
    """With the default config the verify step's out is tiles at small batch (8 requests or
    fewer) from T = 3 on and at any batch from T = 8 on, else draft by draft (the launch is
    prepared, not run)."""
    case = Replay(tokens=tokens, window=8, nheads=2, ngroups=1, batch=batch)
    pool, drafts = make_pool(case), make_drafts(case, 3)
    kw = _kwargs(pool, drafts)
    config = replay_fast_config(case.headdim, case.dstate, batch, tokens)
    _, launch = replay_prepare(**kw, exact=False)
    assert launch.kwargs["TILES"] is tiles, (config, launch.kwargs["TILES"])


# ---------------------------------------------------------------------------------------------
# GPU

HEADLINE = Replay(batch=64, tokens=4, window=16, nheads=16, headdim=64, dstate=128, ngroups=1, pad_rows=(5,))


def _headline(batch: int, tokens: int, seed: int = 0, window: int | None = None) -> tuple[dict, dict, Replay]:
    """The headline pool and drafts, steady cursors; window: vLLM's ring of 16 at T = 1 and
    the engines' 16 above, unless given."""
    if window is None:
        window = 15 if tokens == 1 else 16
    case = replace(HEADLINE, batch=batch, tokens=tokens, window=window)
    pool, drafts = make_pool(case, seed), make_drafts(case, seed)
    _set_cursors(pool, case, "steady", seed)
    return pool, drafts, case


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [64, 512])
@pytest.mark.parametrize("tokens", [1, 4, 8])
def test_gpu_headline_against_float64(batch: int, tokens: int) -> None:
    """H16 P64 N128 G1, fp32 state, bf16 inputs, steady state: the accuracy bars at the
    device's table config (or the fast default), and the exact route's rings and flushed
    bits."""
    _headline_step_checked(batch, tokens)


def _headline_step_checked(batch: int, tokens: int, window: int | None = None) -> list[torch.Tensor]:
    """One fast step at the headline (_headline's pool and drafts) held to the accuracy bars
    against float64 and to the exact route's writes (assert_same_writes); returns the bits of
    its out, state and rings."""
    pool, drafts, _ = _headline(batch, tokens, window=window)
    twin = _twin(pool)
    want = selective_state_replay_reference(**_kwargs(pool, drafts))
    out = torch.full(drafts["x"].shape, float("nan"), dtype=torch.bfloat16, device=DEVICE)
    selective_state_replay(**_kwargs(pool, drafts), out=out, exact=False)
    live = pool["state_batch_indices"] != PAD
    assert_out_accurate(out[live], want[0][live])
    assert_state_accurate(pool["state"], want[1])
    selective_state_replay(**_kwargs(twin, drafts), exact=True)
    config = lookup_config(64, 128, torch.float32, batch, DEVICE, mode="replay-fast", tokens=tokens)
    assert_same_writes(pool, twin, config, dual=_dual_flushes(_kwargs(pool, drafts), config))
    return [bits(t).clone() for t in (out, pool["state"], pool["x_cache"], pool["dt_cache"])]


def _dual_flushes(kw: dict, config: LaunchConfig) -> bool:
    """Whether the programs that store a fast-route call's flushes absorb the ring in the dual
    form: those of the flush kernel where the call splits them off (a launch after the main
    kernel, replay_fast._split_flush), the flush programs beside it (decode's ROLE 6, or the
    verify step's ROLE 7, whose flush is one matmul), else the main kernel's (its flush
    programs', ROLE 4)."""
    _, launch = replay_prepare(**kw, config=config, exact=False)
    flags = (launch.beside or launch.after or launch).kwargs
    return bool(flags["DUAL_FLUSH"] or flags["ROLE"] == 7)


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [64, 512])
@pytest.mark.parametrize("tokens", [2, 4, 8])
def test_gpu_flushes_beside_the_main_kernel(tokens: int, batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """replay_fast.VERIFY_FLUSH_BESIDE at the headline, steady state (at T = 8 beside the
    tiles' main kernel, BESIDE_TILES forced): the accuracy bars, the exact route's rings, its
    flushed states within the dual form's bars, and the same bits run to run."""
    monkeypatch.setattr(replay_fast, "BESIDE_TILES", tokens >= replay_fast.TILES_FROM_TOKENS)
    results = []
    for _ in range(2):
        pool, drafts, _ = _headline(batch, tokens)
        twin = _twin(pool)
        want = selective_state_replay_reference(**_kwargs(pool, drafts))
        out = torch.full(drafts["x"].shape, float("nan"), dtype=torch.bfloat16, device=DEVICE)
        _, launch = replay_prepare(**_kwargs(pool, drafts), exact=False)
        assert (launch.kwargs["ROLE"], launch.beside.kwargs["ROLE"], launch.after) == (5, 7, None)
        selective_state_replay(**_kwargs(pool, drafts), out=out, exact=False)
        live = pool["state_batch_indices"] != PAD
        assert_out_accurate(out[live], want[0][live])
        assert_state_accurate(pool["state"], want[1])
        selective_state_replay(**_kwargs(twin, drafts), exact=True)
        config = lookup_config(64, 128, torch.float32, batch, DEVICE, mode="replay-fast", tokens=tokens)
        assert_same_writes(pool, twin, config, dual=True)
        results.append([bits(t).clone() for t in (out, pool["state"], pool["x_cache"], pool["dt_cache"])])
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 4])
def test_gpu_window_past_16(tokens: int) -> None:
    """A window of 32 at the headline (the ring's 32 rows, RP 32), batch 64, steady state: the
    accuracy bars against float64, the exact route's rings and flushed states within the dual
    form's bars, and the same bits run to run."""
    first, second = (_headline_step_checked(64, tokens, window=32) for _ in range(2))
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [64, 127, 256])
def test_gpu_decode_step_with_every_slot_flushing(batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """T = 1 at the headline shape with every slot flushing, as requests admitted together do
    every R - 1 steps: the main grid's flush programs take PROGRAMS_TAKE flushing requests each
    and the others flush in their own programs (_own_flush, told by the host that the pool is
    aligned). Out and the flushed states within the bars of float64, the rings the exact
    route's, the flushed states within its bars of the exact route's."""
    pool, drafts, case = _headline(batch, 1)
    _set_cursors(pool, case, "flush", 0)
    assert (pool["num_cached"] == case.window).all()  # every slot flushes
    seen = _alignment_told(monkeypatch)
    twin = _twin(pool)
    want = selective_state_replay_reference(**_kwargs(pool, drafts))
    out = torch.full(drafts["x"].shape, float("nan"), dtype=torch.bfloat16, device=DEVICE)
    selective_state_replay(**_kwargs(pool, drafts), out=out, exact=False)
    assert seen == [True]  # the main grid's flush programs, capped, and the own flushes aligned
    live = pool["state_batch_indices"] != PAD
    assert_out_accurate(out[live], want[0][live])
    assert_state_accurate(pool["state"], want[1])
    selective_state_replay(**_kwargs(twin, drafts), exact=True)
    config = lookup_config(64, 128, torch.float32, batch, DEVICE, mode="replay-fast", tokens=1)
    assert_same_writes(pool, twin, config, dual=_dual_flushes(_kwargs(pool, drafts), config))


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 4, 8])
def test_gpu_run_to_run_bits(tokens: int) -> None:
    """The same inputs, the same bits, five runs (no atomics; every config of the grid is
    fixed)."""
    results = []
    for _ in range(5):
        pool, drafts, _ = _headline(512, tokens)
        out = torch.empty(drafts["x"].shape, dtype=torch.bfloat16, device=DEVICE)
        selective_state_replay(**_kwargs(pool, drafts), out=out, exact=False)
        torch.cuda.synchronize()
        results.append([bits(t).clone() for t in (out, pool["state"], pool["x_cache"], pool["dt_cache"])])
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [64, 512])
@pytest.mark.parametrize(
    ("tokens", "beside"),
    [(1, False), (2, False), (4, False), (2, True), (4, True)],
    ids=["T1", "T2", "T4", "T2-beside", "T4-beside"],
)
def test_gpu_precomputed_weights(
    tokens: int, beside: bool, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The headline steady step with the dual form's weights from the Grams' kernel
    (replay_fast.WEIGHTS): out within the bars of float64, the rings and flushed states the
    bits of the step without them (their operations are the same; out may differ by the order
    of the weights' float32 sums, which the two kernels lay out differently), and the same
    bits run to run. The verify step's flushes in the split's flush kernel, or (beside, as
    shipped) in the flush programs beside the main kernel, which weigh their own both ways."""
    monkeypatch.setattr(replay_fast, "VERIFY_FLUSH_BESIDE", beside)
    results = []
    for weights in (False, True, True):
        monkeypatch.setattr(replay_fast, "WEIGHTS", weights)
        pool, drafts, _ = _headline(batch, tokens)
        checked = weights and len(results) == 1  # the first step with the weights, against float64
        want = selective_state_replay_reference(**_kwargs(pool, drafts)) if checked else None
        out = torch.full(drafts["x"].shape, float("nan"), dtype=torch.bfloat16, device=DEVICE)
        selective_state_replay(**_kwargs(pool, drafts), out=out, exact=False)
        torch.cuda.synchronize()
        if want is not None:
            live = pool["state_batch_indices"] != PAD
            assert_out_accurate(out[live], want[0][live])
            assert_state_accurate(pool["state"], want[1])
        results.append(
            [bits(t).clone() for t in (out, *(pool[k] for k in ("state", "x_cache", "B_cache", "dt_cache")))]
        )
    without, first, second = results
    for name, a, b, c in zip(
        ("out", "state", "x_cache", "B_cache", "dt_cache"), without, first, second, strict=True
    ):
        assert torch.equal(b, c), f"{name}: run to run"
        if name != "out":
            assert torch.equal(a, b), f"{name}: with and without the precomputed weights"


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [64, 512])
@pytest.mark.parametrize("tokens", [1, 4])
def test_gpu_cuda_graph_of_fast_steps(tokens: int, batch: int) -> None:
    """A fast step and its bookkeeping capture in a CUDA graph and replay to the eager bits (at
    batch 512 decode's flushes run on a stream beside the main kernel: replay_fast._side_flush)."""
    pool, drafts, case = _headline(batch, tokens)
    accepted = torch.full((case.batch,), 1, dtype=torch.int32, device=DEVICE)
    written = ("state", "x_cache", "B_cache", "dt_cache", "ring_start", "num_cached")
    snapshot = {k: pool[k].clone() for k in written}

    def step(out: torch.Tensor) -> None:
        selective_state_replay(**_kwargs(pool, drafts), out=out, exact=False)
        replay_advance(
            pool["ring_start"],
            pool["num_cached"],
            accepted,
            tokens,
            case.ring,
            pool["state_batch_indices"],
            PAD,
        )

    eager = torch.empty(drafts["x"].shape, dtype=torch.bfloat16, device=DEVICE)
    step(eager)
    want = {k: pool[k].clone() for k in written}
    out = torch.empty_like(eager)
    stream = torch.cuda.Stream()
    for k, v in snapshot.items():
        pool[k].copy_(v)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step(out)  # warm-up (compiles) outside the capture
    torch.cuda.current_stream().wait_stream(stream)
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


@pytest.mark.gpu
def test_gpu_exact_route_is_the_default() -> None:
    """exact=True is the default and keeps the exact route's bits (test_replay.py holds them
    against the multi-token kernel; benchmarks/ptx_snapshot.py holds its PTX)."""
    pool, drafts, _ = _headline(64, 4)
    twin = _twin(pool)
    a = selective_state_replay(**_kwargs(pool, drafts))
    b = selective_state_replay(**_kwargs(twin, drafts), exact=True)
    for x, y in ((a, b), *((pool[k], twin[k]) for k in ("state", "x_cache", "B_cache", "dt_cache"))):
        assert torch.equal(bits(x), bits(y))
