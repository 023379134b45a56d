"""Multi-token decode (speculative decoding's verify step) against the float64 reference, on
the CPU (Triton's interpreter): the dense [B, T, H, P] layout and the packed one (cu_seqlens),
every write mode (final state, sglang's intermediate-state buffer, vLLM's per-token slots),
vLLM's accepted-token starts, sglang's EAGLE parents, pad rows and empty requests; then the bad
calls, refused before anything is written. On a GPU (@pytest.mark.gpu): T tokens in one call
against T single-token calls, bit for bit, for every config a table may pick.

Every check poisons out (NaN) and the buffer, compares out, the state pool and the buffer with
the reference, and checks that what nobody writes keeps its bits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
import torch

from conftest import DEVICE, bits, to_device
from ssmdecode import LaunchConfig, selective_state_update, selective_state_update_reference
from ssmdecode.config import default_config, device_key, load_table, table_key, upstream_config
from ssmdecode.numerics import TOLERANCES

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PAD = -1


@dataclass(frozen=True)
class Verify:
    """One multi-token problem. lengths: tokens of each request (packed layout when given,
    else the dense T for all). Ids read like B3-T4-H2-P8-N16-buffer-pad."""

    batch: int = 3
    tokens: int = 4
    nheads: int = 2
    headdim: int = 8
    dstate: int = 16
    ngroups: int = 1
    state: str = "fp32"
    inputs: str = "bf16"
    tie: bool = True
    has_z: bool = False
    mode: str = "final"  # final, buffer, dst
    lengths: tuple[int, ...] | None = None  # packed layout (cu_seqlens)
    accepted: bool = False  # vLLM: initial state at column num_accepted - 1
    parents: bool = False  # EAGLE tree (needs the buffer)
    buffer_idx: bool = False
    buffer_dtype: str | None = None
    pad_rows: tuple[int, ...] = ()
    disable: bool = False
    fast_exp: bool = False

    @property
    def id(self) -> str:
        parts = [
            f"B{self.batch}",
            f"T{self.tokens}" if self.lengths is None else "L" + "_".join(map(str, self.lengths)),
            f"H{self.nheads}",
            f"P{self.headdim}",
            f"N{self.dstate}",
            self.state,
            self.mode,
        ]
        flags = [
            ("untied", not self.tie),
            ("z", self.has_z),
            ("accepted", self.accepted),
            ("tree", self.parents),
            ("bufidx", self.buffer_idx),
            (f"buf{self.buffer_dtype}", self.buffer_dtype is not None),
            ("pad", bool(self.pad_rows)),
            ("noupdate", self.disable),
            ("fastexp", self.fast_exp),
        ]
        return "-".join(parts + [name for name, on in flags if on])


def make_verify(case: Verify, device: str = DEVICE, seed: int = 0) -> dict:
    """Keyword arguments of selective_state_update for a case, random data, on device."""
    g = torch.Generator().manual_seed(seed)
    sdt, idt = DTYPES[case.state], DTYPES[case.inputs]
    b, t, h, p, n, grp = case.batch, case.tokens, case.nheads, case.headdim, case.dstate, case.ngroups
    packed = case.lengths is not None
    lead = (sum(case.lengths),) if packed else (b, t)
    slots = 2 * b * t + 3  # room for a row of read slots and a row of written slots a request

    def rn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)

    if case.tie:
        xbc = rn(*lead, h * p + 2 * grp * n, dtype=idt)
        x = xbc[..., : h * p].unflatten(-1, (h, p))
        B = xbc[..., h * p : h * p + grp * n].unflatten(-1, (grp, n))
        C = xbc[..., h * p + grp * n :].unflatten(-1, (grp, n))
        dt = rn(*lead, h, dtype=idt)[..., None].expand(*lead, h, p)
        A = (-torch.rand(h, generator=g) - 0.5)[:, None, None].expand(h, p, n)
        D = rn(h)[:, None].expand(h, p)
        dt_bias = (torch.rand(h, generator=g) - 4.0)[:, None].expand(h, p)
    else:
        x, dt = rn(*lead, h, p, dtype=idt), rn(*lead, h, p, dtype=idt)
        B, C = rn(*lead, grp, n, dtype=idt), rn(*lead, grp, n, dtype=idt)
        A = -torch.rand(h, p, n, generator=g) - 0.5
        D, dt_bias = rn(h, p), torch.rand(h, p, generator=g) - 4.0
    kw = dict(
        state=rn(slots, h, p, n, dtype=sdt),
        x=x,
        dt=dt,
        A=A,
        B=B,
        C=C,
        D=D,
        z=rn(*lead, h, p, dtype=idt) if case.has_z else None,
        dt_bias=dt_bias,
        dt_softplus=True,
        disable_state_update=case.disable,
        pad_slot_id=PAD,
    )
    perm = torch.randperm(slots, generator=g).to(torch.int32)
    if case.accepted or case.mode == "dst":  # a row of slots a request, vLLM's [B, K]
        src = perm[: b * t].view(b, t).clone()
        for r in case.pad_rows:
            src[r] = PAD
        kw["state_batch_indices"] = src
    else:
        src = perm[:b].clone()
        for r in case.pad_rows:
            src[r] = PAD
        kw["state_batch_indices"] = src
    if case.accepted:
        kw["num_accepted_tokens"] = torch.randint(0, t + 1, (b,), generator=g).to(torch.int32)
    if case.mode == "dst":
        dst = perm[b * t : 2 * b * t].view(b, t).clone()
        dst[0, -1] = PAD  # an entry that writes no slot
        kw["dst_state_batch_indices"] = dst
    if case.mode == "buffer":
        rows = slots + 2 if not case.buffer_idx else b + 2
        kw["intermediate_states"] = torch.full(
            (rows, t + 1, h, p, n), float("nan"), dtype=DTYPES[case.buffer_dtype or case.state]
        )
        if case.buffer_idx:
            idx = torch.randperm(rows, generator=g)[:b].to(torch.int64)
            if b > 1:
                idx[-1] = PAD  # a request without a buffer row
            kw["intermediate_state_indices"] = idx
    if case.parents:  # a tree: token k's parent is any token before it (or -1: the previous)
        par = torch.full((b, t), -1, dtype=torch.int64)
        for k in range(1, t):
            par[:, k] = torch.randint(-1, k, (b,), generator=g)
        kw["parent_token_indices"] = par
    if packed:
        kw["cu_seqlens"] = torch.tensor(
            [0, *torch.tensor(case.lengths).cumsum(0).tolist()], dtype=torch.int32
        )
    return {k: to_device(v, device) for k, v in kw.items()}


def _cpu_config(case: Verify) -> LaunchConfig:
    """One program per (request, head) under the interpreter."""
    return LaunchConfig(block_m=1 << (case.headdim - 1).bit_length(), num_warps=4)


def _live_tokens(case: Verify, kw: dict) -> torch.Tensor:
    """[out rows] bool: the tokens of requests that are not padding."""
    src = kw["state_batch_indices"]
    pad = (src == PAD) if src.dim() == 1 else (src == PAD).all(1)
    lengths = case.lengths or (case.tokens,) * case.batch
    live = torch.cat([torch.full((n,), not bool(pad[r])) for r, n in enumerate(lengths)])
    return live if case.lengths is not None else live.view(case.batch, case.tokens)


def run_and_check(case: Verify, config: LaunchConfig | None = None, device: str = DEVICE) -> None:
    kw = make_verify(case, device)
    state0 = kw["state"].clone()
    buf0 = kw["intermediate_states"].clone() if "intermediate_states" in kw else None
    want = selective_state_update_reference(**{k: v for k, v in kw.items()})
    out = torch.full(kw["x"].shape, float("nan"), dtype=kw["x"].dtype, device=device)
    got = selective_state_update(**kw, out=out, config=config or _cpu_config(case), fast_exp=case.fast_exp)
    assert got is out
    live = _live_tokens(case, kw).to(device)
    assert not out[live].isnan().any(), "an out element of a live token was not written"
    # A token that continues from its parent's state as a 16-bit buffer holds it carries that
    # rounding on: the tolerance of the coarser dtype then holds for what follows.
    coarse = DTYPES[case.buffer_dtype] if case.parents and case.buffer_dtype else None

    def tolerance(dtype: torch.dtype) -> dict[str, float]:
        if coarse is None:
            return TOLERANCES[dtype]
        return {k: max(TOLERANCES[dtype][k], TOLERANCES[coarse][k]) for k in ("rtol", "atol")}

    torch.testing.assert_close(out[live].double(), want[0].to(device)[live], **tolerance(out.dtype))
    pad = ~live
    assert (out[pad] == 0).all(), "padded requests' out is not zero"

    changed = (bits(kw["state"]) != bits(state0)).flatten(1).any(1)
    expected = (want[1].to(device) != state0.double()).flatten(1).any(1)
    assert torch.equal(changed, expected), "slots written differ from the reference's"
    torch.testing.assert_close(kw["state"].double(), want[1].to(device), **tolerance(kw["state"].dtype))
    if buf0 is not None:
        buf = kw["intermediate_states"]
        written = ~want[2].isnan().flatten(2).all(2).to(device)
        assert torch.equal(~buf.isnan().flatten(2).all(2), written), "buffer rows written"
        torch.testing.assert_close(buf[written].double(), want[2].to(device)[written], **tolerance(buf.dtype))


CPU_CASES = [
    Verify(),
    Verify(tokens=1),
    Verify(tokens=2, pad_rows=(1,)),
    Verify(tie=False, has_z=True, ngroups=2, nheads=4),
    Verify(headdim=6, dstate=12),  # masked tiles
    Verify(state="bf16"),
    Verify(state="fp16", inputs="fp16", tokens=3),
    Verify(disable=True),
    Verify(mode="buffer"),
    Verify(mode="buffer", disable=True, pad_rows=(0,)),
    Verify(mode="buffer", buffer_idx=True, buffer_dtype="bf16"),
    Verify(mode="buffer", parents=True, tokens=5),
    Verify(mode="buffer", parents=True, buffer_dtype="bf16", buffer_idx=True),
    Verify(mode="dst", accepted=True),
    Verify(mode="dst", accepted=True, pad_rows=(2,), fast_exp=True),
    Verify(mode="dst", accepted=True, lengths=(3, 0, 4)),
    Verify(mode="dst", lengths=(1, 4, 2), tie=False),
    Verify(lengths=(2, 0, 3)),  # final state, packed: a loop over each request's tokens
    Verify(mode="buffer", lengths=(2, 4, 1)),  # packed, unrolled, tokens masked, final state
    Verify(accepted=True, lengths=(2, 3, 1)),
    Verify(batch=1, tokens=17, nheads=1),  # past the unrolled count: a loop
]


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: c.id)
def test_matches_reference(case: Verify) -> None:
    run_and_check(case)


def test_mamba1_packed_layout() -> None:
    """Mamba1 (state [S, P, N], x [total, P], B [total, N]) takes T tokens a request packed."""
    case = Verify(nheads=1, lengths=(2, 3, 1))
    kw = make_verify(case)
    m1 = dict(
        kw,
        state=kw["state"][:, 0],
        x=kw["x"][:, 0],
        dt=kw["dt"][:, 0],
        A=kw["A"][0],
        B=kw["B"][:, 0],
        C=kw["C"][:, 0],
        D=kw["D"][0],
        dt_bias=kw["dt_bias"][0],
    )
    want_out, want_state = selective_state_update_reference(**m1)
    out = selective_state_update(**m1, config=_cpu_config(case))
    assert out.shape == m1["x"].shape
    torch.testing.assert_close(out.double(), want_out, **TOLERANCES[out.dtype])
    torch.testing.assert_close(m1["state"].double(), want_state, **TOLERANCES[m1["state"].dtype])


def test_tokens_in_one_call_are_single_token_calls() -> None:
    """T tokens in one call write the out of T single-token calls and, for a float32 state,
    the same final state (under the interpreter this checks the order of the operations;
    the GPU test below checks the bits of compiled configs)."""
    case = Verify(tokens=3, has_z=True, pad_rows=(1,))
    kw = make_verify(case)
    state0 = kw["state"].clone()
    config = LaunchConfig.parse("8,1,slot,evict,ordered")
    multi = _tokens_vs_single_token(kw, state0, config)
    assert torch.equal(multi[0], multi[2]) and torch.equal(multi[1], multi[3])


def _tokens_vs_single_token(kw: dict, state0: torch.Tensor, config: LaunchConfig) -> tuple[torch.Tensor, ...]:
    """(out bits, pool bits) of one T-token call and of T single-token calls, from state0."""
    kw = dict(kw)
    kw["state"] = state0.clone()
    out = torch.full(kw["x"].shape, float("nan"), dtype=torch.float32, device=state0.device)
    selective_state_update(**kw, out=out, config=config)
    multi = (bits(out).clone(), bits(kw["state"]).clone())
    kw["state"] = state0.clone()
    outs = []
    for t in range(kw["x"].shape[1]):
        step = {
            k: (v[:, t] if k in ("x", "dt", "B", "C", "z") and v is not None else v) for k, v in kw.items()
        }
        o = torch.full(step["x"].shape, float("nan"), dtype=torch.float32, device=state0.device)
        selective_state_update(**step, out=o, config=config)
        outs.append(o)
    return (*multi, bits(torch.stack(outs, 1)), bits(kw["state"]))


# ---------------------------------------------------------------------------------------------
# bad calls: refused, nothing written


def _edit(key: str, value: object):
    def edit(kw: dict) -> None:
        kw[key] = value(kw) if callable(value) else value

    return edit


BAD = {
    "dt-tokens": (
        Verify(),
        _edit("dt", lambda kw: kw["dt"][:, :3]),
        ValueError,
        r"dt has shape \(3, 3, 2, 8\); expected \(3, 4, 2, 8\)",
    ),
    "B-tokens": (Verify(), _edit("B", lambda kw: kw["B"][:, :2]), ValueError, r"B has shape \(3, 2, 1, 16\)"),
    "out-tokens": (
        Verify(),
        _edit("out", torch.empty(3, 5, 2, 8)),
        ValueError,
        r"out has shape \(3, 5, 2, 8\)",
    ),
    "buffer-too-small": (
        Verify(mode="buffer"),
        _edit("intermediate_states", lambda kw: kw["intermediate_states"][:, :3]),
        ValueError,
        r"intermediate_states holds 3 token states a row; the call has 4",
    ),
    "buffer-shape": (
        Verify(mode="buffer"),
        _edit("intermediate_states", lambda kw: kw["intermediate_states"][..., :8]),
        ValueError,
        r"intermediate_states has shape",
    ),
    "buffer-idx-without-buffer": (
        Verify(),
        _edit("intermediate_state_indices", torch.zeros(3, dtype=torch.int32)),
        ValueError,
        r"intermediate_state_indices needs intermediate_states",
    ),
    "parents-without-buffer": (
        Verify(),
        _edit("parent_token_indices", torch.zeros(3, 4, dtype=torch.int32)),
        ValueError,
        r"parent_token_indices needs intermediate_states",
    ),
    "parents-shape": (
        Verify(mode="buffer", parents=True),
        _edit("parent_token_indices", lambda kw: kw["parent_token_indices"][:, :2]),
        ValueError,
        r"parent_token_indices has shape \(3, 2\); expected \[3, >=4\]",
    ),
    "accepted-with-1d-slots": (
        Verify(),
        _edit("num_accepted_tokens", torch.ones(3, dtype=torch.int32)),
        ValueError,
        r"num_accepted_tokens needs state_batch_indices of shape \[>=B, K\]",
    ),
    "accepted-dtype": (
        Verify(mode="dst", accepted=True),
        _edit("num_accepted_tokens", lambda kw: kw["num_accepted_tokens"].float()),
        TypeError,
        r"num_accepted_tokens has dtype torch.float32",
    ),
    "dst-columns": (
        Verify(mode="dst"),
        _edit("dst_state_batch_indices", lambda kw: kw["dst_state_batch_indices"][:, :2]),
        ValueError,
        r"dst_state_batch_indices has shape \(3, 2\); expected \[>=3, >=4\]",
    ),
    "cu-seqlens-dtype": (
        Verify(lengths=(2, 1, 3)),
        _edit("cu_seqlens", lambda kw: kw["cu_seqlens"].float()),
        TypeError,
        r"cu_seqlens has dtype torch.float32",
    ),
    "cu-seqlens-rank": (
        Verify(lengths=(2, 1, 3)),
        _edit("cu_seqlens", lambda kw: kw["cu_seqlens"][None]),
        ValueError,
        r"cu_seqlens has shape \(1, 4\); expected \[B \+ 1\]",
    ),
    "cu-seqlens-with-token-dim": (
        Verify(),
        _edit("cu_seqlens", torch.tensor([0, 4, 8, 12], dtype=torch.int32)),
        ValueError,
        r"with cu_seqlens, x packs the tokens",
    ),
    "pad-slot-tensor": (
        Verify(),
        _edit("pad_slot_id", torch.tensor(-1)),
        TypeError,
        r"pad_slot_id must be an int",
    ),
    "pad-slot-float": (Verify(), _edit("pad_slot_id", -1.0), TypeError, r"pad_slot_id must be an int"),
    "x-list": (
        Verify(),
        _edit("x", lambda kw: kw["x"].tolist()),
        TypeError,
        r"x must be a torch.Tensor, got list",
    ),
    "slots-numpy": (
        Verify(),
        _edit("state_batch_indices", lambda kw: kw["state_batch_indices"].numpy()),
        TypeError,
        r"state_batch_indices must be a torch.Tensor, got ndarray",
    ),
    "batch-order": (
        Verify(),
        _edit("batch_order", torch.arange(3)),
        ValueError,
        r"batch_order is taken by single-token calls only",
    ),
}

# Value checks (validate_indices=True): they read the indices on the host.
BAD_VALUES = {
    "cu-seqlens-not-monotonic": (
        Verify(lengths=(2, 1, 3)),
        _edit("cu_seqlens", torch.tensor([0, 3, 2, 6], dtype=torch.int32)),
        r"cu_seqlens is not monotonic: cu_seqlens\[2\] = 2 < cu_seqlens\[1\] = 3",
    ),
    "cu-seqlens-end": (
        Verify(lengths=(2, 1, 3)),
        _edit("cu_seqlens", torch.tensor([0, 2, 3, 5], dtype=torch.int32)),
        r"cu_seqlens ends at 5; expected the token count of x, 6",
    ),
    "cu-seqlens-start": (
        Verify(lengths=(2, 1, 3)),
        _edit("cu_seqlens", torch.tensor([1, 2, 3, 6], dtype=torch.int32)),
        r"cu_seqlens\[0\] = 1; expected 0",
    ),
    "request-too-long": (
        Verify(mode="dst", lengths=(2, 5, 1)),
        lambda kw: None,  # dst cut to 4 below
        r"cu_seqlens gives request 1 5 tokens; the per-token state writes .* hold 4",
    ),
    "parent-after-token": (
        Verify(mode="buffer", parents=True),
        lambda kw: kw["parent_token_indices"].__setitem__((1, 2), 2),
        r"parent_token_indices\[1, 2\] = 2; expected a token before 2",
    ),
    "accepted-past-columns": (
        Verify(mode="dst", accepted=True),
        lambda kw: kw["num_accepted_tokens"].__setitem__(0, 5),
        r"num_accepted_tokens\[0\] = 5 is outside \[0, 4\]",
    ),
    "slot-outside-pool": (
        Verify(mode="dst", accepted=True),
        lambda kw: kw["dst_state_batch_indices"].__setitem__((1, 1), 999),
        r"dst_state_batch_indices\[1, 1\] = 999 is outside the state pool",
    ),
    "buffer-row-outside": (
        Verify(mode="buffer", buffer_idx=True),
        lambda kw: kw["intermediate_state_indices"].__setitem__(0, 99),
        r"intermediate_state_indices\[0\] = 99 is outside the 5 rows of intermediate_states",
    ),
}


def _assert_nothing_written(kw: dict, call) -> None:
    tensors = [
        v
        for k, v in kw.items()
        if k in ("state", "out", "intermediate_states") and isinstance(v, torch.Tensor)
    ]
    before = [t.clone() for t in tensors]
    call()
    for t, b in zip(tensors, before, strict=True):
        assert torch.equal(t.view(torch.uint8), b.view(torch.uint8)), "bad input wrote memory"


@pytest.mark.parametrize("name", list(BAD))
def test_bad_call_raises_and_writes_nothing(name: str) -> None:
    case, edit, error, message = BAD[name]
    kw = make_verify(case)
    kw.setdefault("out", torch.full(kw["x"].shape, float("nan"), dtype=kw["x"].dtype))
    edit(kw)

    def call() -> None:
        with pytest.raises(error, match=message):
            selective_state_update(**kw, config=_cpu_config(case))

    _assert_nothing_written(kw, call)


@pytest.mark.parametrize("name", list(BAD_VALUES))
def test_bad_values_are_refused_with_validate_indices(name: str) -> None:
    case, edit, message = BAD_VALUES[name]
    kw = make_verify(case)
    if name == "request-too-long":  # dst holds 4 columns; request 1 brings 5 tokens
        kw["dst_state_batch_indices"] = kw["dst_state_batch_indices"][:, :4]
        kw["state_batch_indices"] = kw["state_batch_indices"][:, :4]
    kw["out"] = torch.full(kw["x"].shape, float("nan"), dtype=kw["x"].dtype)
    edit(kw)

    def call() -> None:
        with pytest.raises(ValueError, match=message):
            selective_state_update(**kw, config=_cpu_config(case), validate_indices=True)

    _assert_nothing_written(kw, call)


def test_unchecked_cu_seqlens_stay_inside_x() -> None:
    """Without validate_indices, offsets past the tokens of x are clamped by the kernel:
    nothing outside x and out is touched (an out-of-bounds store would corrupt this process)."""
    case = Verify(lengths=(2, 1, 3))
    kw = make_verify(case)
    kw["cu_seqlens"] = torch.tensor([0, 2, 40, 9], dtype=torch.int32)
    big = torch.full((kw["x"].shape[0] + 4, *kw["x"].shape[1:]), float("nan"), dtype=kw["x"].dtype)
    out = big[:-4]
    selective_state_update(**kw, out=out, config=_cpu_config(case))
    assert big[-4:].isnan().all(), "wrote past out"


# ---------------------------------------------------------------------------------------------
# GPU: real shapes, T tokens against T single-token calls, table configs


def _configs_the_tables_can_pick(state: torch.dtype, mode: str, tokens: int) -> set[LaunchConfig]:
    table = load_table(device_key()) or {}
    picks = set(table.get(table_key(64, 128, state, mode, tokens), {}).values())
    return picks | {default_config(128, state), upstream_config(128)}


GPU_CASES = [
    replace(c, nheads=16, headdim=64, dstate=128, batch=b, tokens=t)
    for c, b, t in [
        (Verify(), 9, 4),
        (Verify(mode="buffer"), 33, 2),
        (Verify(mode="buffer", parents=True, pad_rows=(3,)), 12, 4),
        (Verify(mode="dst", accepted=True, fast_exp=True), 17, 8),
        (Verify(mode="dst", accepted=True, lengths=(4, 0, 2, 3, 4)), 5, 4),
        (Verify(state="bf16", mode="buffer", has_z=True), 8, 4),
    ]
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c.id)
def test_gpu_matches_reference(case: Verify) -> None:
    run_and_check(case, upstream_config(case.dstate))
    run_and_check(case, LaunchConfig.parse("16,1,slot,evict,ordered"))


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [2, 4, 8])
@pytest.mark.parametrize("mode", ["final", "buffer", "dst"])
def test_gpu_tokens_in_one_call_are_single_token_calls(tokens: int, mode: str) -> None:
    """Every config a multi-token table entry may pick (and upstream's, and the default),
    compiled for the GPU: one T-token call writes the out and final state of T single-token
    calls at upstream's config, bit for bit (float32 state, final-state mode), and every
    config writes the same bits as upstream's config in its mode."""
    case = Verify(
        batch=24, tokens=tokens, nheads=16, headdim=64, dstate=128, mode=mode, has_z=True, pad_rows=(5,)
    )
    kw = make_verify(case)
    state0 = kw["state"].clone()
    upstream = upstream_config(128)
    if mode == "final":
        multi = _tokens_vs_single_token(kw, state0, upstream)
        assert torch.equal(multi[0], multi[2]), "out: T tokens in one call vs T calls"
        assert torch.equal(multi[1], multi[3]), "state: T tokens in one call vs T calls"
    want = _bits_of(kw, state0, upstream)
    for config in sorted(_configs_the_tables_can_pick(torch.float32, mode, tokens), key=lambda c: c.label):
        got = _bits_of(kw, state0, config)
        for what, w, g in zip(("out", "state", "buffer"), want, got, strict=True):
            assert torch.equal(w, g), f"{config.label}: {what} differs from upstream's config"


def _bits_of(kw: dict, state0: torch.Tensor, config: LaunchConfig) -> tuple[torch.Tensor, ...]:
    kw = dict(kw)
    kw["state"] = state0.clone()
    if "intermediate_states" in kw:
        kw["intermediate_states"] = torch.full_like(kw["intermediate_states"], float("nan"))
    out = torch.full(kw["x"].shape, float("nan"), dtype=torch.float32, device=state0.device)
    selective_state_update(**kw, out=out, config=config)
    buf = kw.get("intermediate_states")
    return bits(out), bits(kw["state"]), bits(buf) if buf is not None else torch.zeros(1)


@pytest.mark.gpu
def test_gpu_cuda_graph_capture_of_a_verify_step() -> None:
    """Every index a device tensor, no host synchronization: a verify step captures in a CUDA
    graph and replays to the eager call's bits."""
    case = Verify(
        batch=16,
        tokens=4,
        nheads=16,
        headdim=64,
        dstate=128,
        mode="dst",
        accepted=True,
        lengths=(4, 3, 4, 1) * 4,
    )
    kw = make_verify(case)
    state0 = kw["state"].clone()
    eager = selective_state_update(**kw).clone()
    eager_state = kw["state"].clone()
    kw["state"].copy_(state0)
    out = torch.empty_like(eager)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        selective_state_update(**kw, out=out)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        selective_state_update(**kw, out=out)
    kw["state"].copy_(state0)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(bits(out), bits(eager))
    assert torch.equal(bits(kw["state"]), bits(eager_state))
