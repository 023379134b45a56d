"""Bad input that used to get through, refused at every door that takes it: packed drafts
(cu_seqlens) of selective_state_replay and compat.flashinfer.checkpointing_ssu, replay_advance's
types, shapes and values, EAGLE parents as sglang's kernel reads them, quantized states
(NotImplementedError everywhere), and the adapters' messages in their engines' names. Each case
checks the exception's type, that its message names the argument and what was expected, and
that nothing was written (state, rings, bookkeeping, out: bit for bit). Value checks run with
validate_indices=True or SSMDECODE_VALIDATE_INDICES=1; type and shape checks always. CPU, tiny
shapes (Triton's interpreter)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch

from conftest import DEVICE, Case, bits, make_inputs
from ssmdecode import LaunchConfig, selective_state_update
from ssmdecode.compat import flashinfer, sglang, vllm
from ssmdecode.ops.selective_state_update import replay_advance, selective_state_replay
from test_multi_token import Verify, make_verify
from test_replay import Replay, make_drafts, make_pool

ENV = "SSMDECODE_VALIDATE_INDICES"
CONFIG = LaunchConfig(8, 4)  # P = 8: one program per (request, head)
PAD = -1


@pytest.fixture(autouse=True)
def _no_env_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test turns validation on itself: the type and shape checks are shown to need no
    switch."""
    monkeypatch.delenv(ENV, raising=False)


@contextmanager
def untouched(*tensors: torch.Tensor) -> Iterator[None]:
    """Every tensor keeps its bits through the block."""
    before = [bits(t).clone() for t in tensors]
    yield
    for i, (t, b) in enumerate(zip(tensors, before, strict=True)):
        assert torch.equal(bits(t), b), f"tensor {i} was written by a refused call"


def poisoned(like: torch.Tensor) -> torch.Tensor:
    return torch.full(like.shape, float("nan"), dtype=like.dtype, device=like.device)


# ---------------------------------------------------------------------------------------------
# Packed drafts: 3 requests, max_seqlen 4, a ring of 8 (window 4), 12 drafts in x

PACKED = Replay(batch=3, tokens=4, window=4)

# name: (cu_seqlens, message)
BAD_CU_SEQLENS = {
    "not-monotonic": (
        [0, 8, 4, 12],
        r"cu_seqlens is not monotonic: cu_seqlens\[2\] = 4 < cu_seqlens\[1\] = 8",
    ),
    "ends-short": ([0, 4, 8, 10], r"cu_seqlens ends at 10; expected the token count of x, 12"),
    "drafts-past-max-seqlen": ([0, 6, 8, 12], r"cu_seqlens gives request 0 6 tokens; max_seqlen is 4"),
}


def _packed_step() -> tuple[dict, dict]:
    """The pool of PACKED and 12 packed drafts ([12, H, P], dt tied over P)."""
    pool = make_pool(PACKED)
    drafts = {k: None if v is None else v.flatten(0, 1) for k, v in make_drafts(PACKED, 0).items()}
    return pool, drafts


def _replay_door(pool: dict, d: dict, cu: torch.Tensor, out: torch.Tensor) -> None:
    selective_state_replay(
        **pool, **d, dt_softplus=True, pad_slot_id=PAD, out=out, cu_seqlens=cu, max_seqlen=4,
        config=CONFIG, validate_indices=True,
    )  # fmt: skip


def _flashinfer_door(pool: dict, d: dict, cu: torch.Tensor, out: torch.Tensor) -> None:
    # flashinfer's packed tensors are (1, total_tokens, ...); its adapter has no
    # validate_indices argument (flashinfer's signature): the environment variable turns it on
    one = {k: None if v is None else v.unsqueeze(0) for k, v in d.items()}
    flashinfer.checkpointing_ssu(
        pool["state"], pool["x_cache"], pool["B_cache"], pool["dt_cache"], pool["ring_start"],
        pool["num_cached"], one["x"], one["dt"], pool["A"], one["B"], one["C"], out.unsqueeze(0),
        D=pool["D"], z=one["z"], dt_bias=pool["dt_bias"], dt_softplus=True,
        state_batch_indices=pool["state_batch_indices"], pad_slot_id=PAD, cu_seqlens=cu,
        max_seqlen=4, config=CONFIG,
    )  # fmt: skip


PACKED_DOORS = {"replay": _replay_door, "flashinfer": _flashinfer_door}


@pytest.mark.parametrize("door", list(PACKED_DOORS))
@pytest.mark.parametrize("name", list(BAD_CU_SEQLENS))
def test_bad_cu_seqlens_are_refused(name: str, door: str, monkeypatch: pytest.MonkeyPatch) -> None:
    offsets, message = BAD_CU_SEQLENS[name]
    monkeypatch.setenv(ENV, "1")
    pool, d = _packed_step()
    cu = torch.tensor(offsets, dtype=torch.int32, device=DEVICE)
    out = poisoned(d["x"])
    tensors = [v for v in pool.values() if isinstance(v, torch.Tensor)]
    with untouched(*tensors, out, cu), pytest.raises(ValueError, match=message):
        PACKED_DOORS[door](pool, d, cu, out)


def test_good_cu_seqlens_pass_validation() -> None:
    """The checks refuse only what is wrong: requests of 4, 2 and 4 drafts run (validated)."""
    pool, d = _packed_step()
    d = {k: None if v is None else v[:10] for k, v in d.items()}
    cu = torch.tensor([0, 4, 6, 10], dtype=torch.int32, device=DEVICE)
    out = poisoned(d["x"])
    _replay_door(pool, d, cu, out)
    assert not out.isnan().any()


def test_packed_drafts_past_the_requests_are_refused_without_validation() -> None:
    """x packing more drafts than B requests of max_seqlen can hold is a shape error: no value
    read, so no switch."""
    pool, d = _packed_step()
    cu = torch.tensor([0, 4, 8], dtype=torch.int32, device=DEVICE)  # 2 requests, 12 drafts
    out = poisoned(d["x"])
    tensors = [v for v in pool.values() if isinstance(v, torch.Tensor)]
    message = r"x packs 12 drafts, more than 2 requests .* max_seqlen = 4"
    with untouched(*tensors, out), pytest.raises(ValueError, match=message):
        selective_state_replay(
            **pool, **d, dt_softplus=True, out=out, cu_seqlens=cu, max_seqlen=4, config=CONFIG
        )


# ---------------------------------------------------------------------------------------------
# replay_advance: 8 slots, rings of 8, T = 4, 3 requests in slots 1, 5, 2


def _advance_args() -> dict:
    return dict(
        ring_start=torch.tensor([0, 3, 7, 0, 1, 2, 0, 5], dtype=torch.int32, device=DEVICE),
        num_cached=torch.tensor([0, 2, 4, 1, 0, 3, 0, 0], dtype=torch.int32, device=DEVICE),
        num_accepted=torch.tensor([1, 4, 0], dtype=torch.int32, device=DEVICE),
        tokens=4,
        ring=8,
        state_batch_indices=torch.tensor([1, 5, 2], dtype=torch.int32, device=DEVICE),
        pad_slot_id=PAD,
    )


def _at(key: str, index: int, value: int) -> Callable[[dict], None]:
    def edit(kw: dict) -> None:
        kw[key][index] = value

    return edit


def _set(key: str, value: object) -> Callable[[dict], None]:
    def edit(kw: dict) -> None:
        kw[key] = value(kw[key]) if callable(value) else value

    return edit


def _cu(*offsets: int) -> Callable[[dict], None]:
    return _set("cu_seqlens", torch.tensor(offsets, dtype=torch.int32, device=DEVICE))


# name: (edit, error, message); refused without any switch
ADVANCE_ALWAYS = {
    "accepted-float": (
        _set("num_accepted", lambda t: t.float()),
        TypeError,
        r"num_accepted has dtype torch.float32; expected one of int32, int64",
    ),
    "accepted-list": (_set("num_accepted", [1, 4, 0]), TypeError, r"num_accepted must be a torch.Tensor"),
    "tokens-tensor": (
        _set("tokens", torch.tensor(4)),
        TypeError,
        r"tokens must be an int \(T, the drafts a request.*got Tensor",
    ),
    "tokens-zero": (_set("tokens", 0), ValueError, r"tokens is 0; expected T >= 1"),
    "ring-too-short": (
        _set("ring", 6),
        ValueError,
        r"ring is 6; T = 4 drafts need at least 2 T = 8 \(a window of at least T cached tokens",
    ),
    "ring-float": (_set("ring", 8.0), TypeError, r"ring must be an int"),
    "num-cached-shape": (
        _set("num_cached", lambda t: t[:7]),
        ValueError,
        r"num_cached has shape \(7,\); expected \(8,\)",
    ),
    "ring-start-int64": (
        _set("ring_start", lambda t: t.long()),
        TypeError,
        r"ring_start has dtype torch.int64; expected one of int32",
    ),
    "slots-shape": (
        _set("state_batch_indices", lambda t: t[:2]),
        ValueError,
        r"state_batch_indices has shape \(2,\); expected \(3,\)",
    ),
    "slots-float": (
        _set("state_batch_indices", lambda t: t.float()),
        TypeError,
        r"state_batch_indices has dtype torch.float32",
    ),
    "cu-seqlens-shape": (_cu(0, 4, 8), ValueError, r"cu_seqlens has shape \(3,\); expected \(4,\)"),
    "pad-slot-float": (_set("pad_slot_id", -1.0), TypeError, r"pad_slot_id must be an int"),
    "flushed-int": (_set("flushed", 1), TypeError, r"flushed must be a bool"),
    "pool-too-small": (
        lambda kw: kw.update(
            state_batch_indices=None, ring_start=kw["ring_start"][:2], num_cached=kw["num_cached"][:2]
        ),
        ValueError,
        r"num_accepted has 3 requests but ring_start 2 slots",
    ),
}

# name: (edit, message); ValueError with validate_indices=True or the environment variable
ADVANCE_VALUES = {
    "accepted-negative": (_at("num_accepted", 1, -1), r"num_accepted\[1\] = -1 is outside \[0, 4\]"),
    "accepted-past-tokens": (_at("num_accepted", 0, 7), r"num_accepted\[0\] = 7 is outside \[0, 4\]"),
    "accepted-past-own-drafts": (
        lambda kw: (_cu(0, 1, 4, 6)(kw), _at("num_accepted", 0, 2)(kw)),
        r"num_accepted\[0\] = 2 is outside \[0, 1\], the drafts of request 0",
    ),
    "slot-outside-pool": (
        _at("state_batch_indices", 2, 99),
        r"state_batch_indices\[2\] = 99 is outside the state pool \[0, 8\) and is not pad_slot_id \(-1\)",
    ),
    "num-cached-past-window": (
        _at("num_cached", 5, 5),
        r"num_cached\[5\] = 5 is outside \[0, 4\] \(a ring of 8 tokens, T = 4 drafts\)",
    ),
    "num-cached-negative": (_at("num_cached", 1, -2), r"num_cached\[1\] = -2 is outside \[0, 4\]"),
    "ring-start-outside-ring": (_at("ring_start", 2, 8), r"ring_start\[2\] = 8 is outside \[0, 7\]"),
    "cu-seqlens-not-monotonic": (
        _cu(0, 4, 2, 6),
        r"cu_seqlens is not monotonic: cu_seqlens\[2\] = 2 < cu_seqlens\[1\] = 4",
    ),
    "cu-seqlens-start": (_cu(1, 4, 6, 8), r"cu_seqlens\[0\] = 1; expected 0"),
    "cu-drafts-past-tokens": (
        _cu(0, 5, 6, 8),
        r"cu_seqlens gives request 0 5 tokens; tokens \(max_seqlen\) is 4",
    ),
}


def _refused_advance(kw: dict, error: type[Exception], message: str, **extra: object) -> None:
    tensors = [v for v in kw.values() if isinstance(v, torch.Tensor)]
    with untouched(*tensors), pytest.raises(error, match=message):
        replay_advance(**kw, **extra)


@pytest.mark.parametrize("name", list(ADVANCE_ALWAYS))
def test_advance_refuses_bad_types_and_shapes(name: str) -> None:
    edit, error, message = ADVANCE_ALWAYS[name]
    kw = _advance_args()
    edit(kw)
    _refused_advance(kw, error, message)


@pytest.mark.parametrize("name", list(ADVANCE_VALUES))
def test_advance_refuses_bad_values_on_request(name: str) -> None:
    edit, message = ADVANCE_VALUES[name]
    kw = _advance_args()
    edit(kw)
    _refused_advance(kw, ValueError, message, validate_indices=True)


@pytest.mark.parametrize("via", ["flag", "env"])
def test_advance_takes_the_validation_switch(via: str, monkeypatch: pytest.MonkeyPatch) -> None:
    kw = _advance_args()
    kw["num_accepted"][1] = -1
    extra = {"validate_indices": True} if via == "flag" else {}
    if via == "env":
        monkeypatch.setenv(ENV, "1")
    _refused_advance(kw, ValueError, r"num_accepted\[1\] = -1", **extra)


def test_advance_valid_call_passes_validation() -> None:
    """Slot 1 with nothing cached keeps its ring (0 + 4 + 4 <= 8) and holds the accepted
    draft; slot 5 flushes (3 + 4 + 4 > 8): its ring starts past its 3 tokens and holds the 4
    accepted; the pad request is skipped. A validate_indices that is not a bool is a TypeError."""
    kw = _advance_args()
    kw["num_cached"][1] = 0
    kw["state_batch_indices"] = torch.tensor([1, 5, PAD], dtype=torch.int32, device=DEVICE)
    replay_advance(**kw, validate_indices=True)
    assert kw["num_cached"].tolist() == [0, 1, 4, 1, 0, 4, 0, 0]
    assert kw["ring_start"].tolist() == [0, 3, 7, 0, 1, 5, 0, 5]
    with pytest.raises(TypeError, match=r"validate_indices must be a bool or None, got int"):
        replay_advance(**_advance_args(), validate_indices=1)


# ---------------------------------------------------------------------------------------------
# EAGLE parents: sglang's kernel reads parent p of token t > 0 from the buffer when 0 <= p < T
# and continues from token t - 1 otherwise; only p in [t, T) (not written yet) is refused

TREE = Verify(mode="buffer", parents=True)  # B3-T4, buffer rows of T + 1 steps


def _tree(parent: int) -> dict:
    kw = make_verify(TREE)
    kw["parent_token_indices"][1, 2] = parent
    kw["out"] = poisoned(kw["x"])
    return kw


@pytest.mark.parametrize("parent", [-2, -100, 4, 99], ids=lambda p: f"parent{p:+d}")
def test_parents_outside_the_tokens_continue_from_the_previous_token(parent: int) -> None:
    """Accepted with validation, and the same bits as -1 (continue from token t - 1)."""
    got, want = _tree(parent), _tree(-1)
    selective_state_update(**got, config=CONFIG, validate_indices=True)
    selective_state_update(**want, config=CONFIG)
    for name in ("out", "state", "intermediate_states"):
        assert torch.equal(bits(got[name]), bits(want[name])), name


def _sglang_tree(kw: dict) -> None:
    sglang.selective_state_update(
        kw["state"], kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], D=kw["D"], z=kw["z"],
        dt_bias=kw["dt_bias"], dt_softplus=True, state_batch_indices=kw["state_batch_indices"],
        out=kw["out"], disable_state_update=kw["disable_state_update"],
        intermediate_states_buffer=kw["intermediate_states"],
        retrieve_parent_token=kw["parent_token_indices"], config=CONFIG,
    )  # fmt: skip


def _ssu_tree(kw: dict) -> None:
    selective_state_update(**kw, config=CONFIG)


TREE_DOORS = {
    "selective_state_update": (_ssu_tree, "parent_token_indices"),
    "sglang": (_sglang_tree, "retrieve_parent_token"),
}


@pytest.mark.parametrize("door", list(TREE_DOORS))
@pytest.mark.parametrize("parent", [2, 3], ids=["itself", "later"])
def test_parents_not_written_yet_are_refused(parent: int, door: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "1")
    call, name = TREE_DOORS[door]
    kw = _tree(parent)
    message = rf"{name}\[1, 2\] = {parent}; expected a token before 2"
    with (
        untouched(kw["state"], kw["intermediate_states"], kw["out"]),
        pytest.raises(ValueError, match=message) as err,
    ):
        call(kw)
    assert door == "selective_state_update" or "parent_token_indices" not in str(err.value)


# ---------------------------------------------------------------------------------------------
# Quantized states: NotImplementedError (a feature for later) at every door, before any read

QUANTIZED = [torch.int8] + ([torch.float8_e4m3fn] if hasattr(torch, "float8_e4m3fn") else [])


def _decode_kw(dtype: torch.dtype) -> dict:
    kw = make_inputs(Case())
    kw["state"] = torch.zeros(kw["state"].shape, dtype=dtype, device=DEVICE)
    kw["out"] = poisoned(kw["x"])
    return kw


def _replay_kw(dtype: torch.dtype) -> dict:
    case = Replay()
    kw = dict(make_pool(case), **make_drafts(case, 0), dt_softplus=True, pad_slot_id=PAD)
    kw["state"] = torch.zeros(kw["state"].shape, dtype=dtype, device=DEVICE)
    kw["out"] = poisoned(kw["x"])
    return kw


def _flashinfer_quantized(kw: dict) -> None:
    flashinfer.checkpointing_ssu(
        kw["state"], kw["x_cache"], kw["B_cache"], kw["dt_cache"], kw["ring_start"], kw["num_cached"],
        kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], kw["out"], D=kw["D"], z=kw["z"],
        dt_bias=kw["dt_bias"], dt_softplus=True, state_batch_indices=kw["state_batch_indices"],
        config=CONFIG,
    )  # fmt: skip


def _vllm_quantized(kw: dict) -> None:
    vllm.selective_state_update(
        kw["state"], kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], kw["D"], kw["dt_bias"], z=kw["z"],
        dt_softplus=True, state_batch_indices=kw["state_batch_indices"], out=kw["out"], config=CONFIG,
    )  # fmt: skip


def _sglang_quantized(kw: dict) -> None:
    sglang.selective_state_update(**kw, config=CONFIG)


# door: (inputs, call, the message's prefix)
QUANTIZED_DOORS = {
    "selective_state_update": (
        _decode_kw,
        lambda kw: selective_state_update(**kw, config=CONFIG),
        "state has",
    ),
    "selective_state_replay": (
        _replay_kw,
        lambda kw: selective_state_replay(**kw, config=CONFIG),
        "state has",
    ),
    "compat.sglang": (_decode_kw, _sglang_quantized, r"ssmdecode.compat.sglang: state \("),
    "compat.vllm": (_decode_kw, _vllm_quantized, r"ssmdecode.compat.vllm: state \("),
    "compat.flashinfer": (_replay_kw, _flashinfer_quantized, r"ssmdecode.compat.flashinfer: state \("),
}


@pytest.mark.parametrize("dtype", QUANTIZED, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("door", list(QUANTIZED_DOORS))
def test_quantized_states_are_not_implemented(door: str, dtype: torch.dtype) -> None:
    make, call, prefix = QUANTIZED_DOORS[door]
    kw = make(dtype)
    tensors = [v for v in kw.values() if isinstance(v, torch.Tensor)]
    name = str(dtype).removeprefix("torch.")
    with untouched(*tensors), pytest.raises(NotImplementedError, match=rf"{prefix}.*{name}.* not supported"):
        call(kw)


def test_other_state_dtypes_stay_type_errors() -> None:
    kw = _replay_kw(torch.float64)
    with pytest.raises(
        TypeError, match=r"state has dtype torch.float64; expected float32, bfloat16 or float16"
    ):
        selective_state_replay(**kw, config=CONFIG)


# ---------------------------------------------------------------------------------------------
# The adapters' messages name the caller's arguments, not ssmdecode's


def test_flashinfer_names_prev_num_accepted_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "1")
    kw = _replay_kw(torch.float32)
    slot = int(kw["state_batch_indices"][0])
    kw["num_cached"][slot] = 9  # past the window R - T = 4
    tensors = [v for v in kw.values() if isinstance(v, torch.Tensor)]
    message = rf"ssmdecode.compat.flashinfer: prev_num_accepted_tokens\[{slot}\] = 9 is outside \[0, 4\]"
    with untouched(*tensors), pytest.raises(ValueError, match=message) as err:
        _flashinfer_quantized(kw)  # a float32 state: the call itself
    assert "num_cached" not in str(err.value)


def test_vllm_names_null_block_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "1")
    kw = _decode_kw(torch.float32)
    kw["state"] = torch.randn(kw["state"].shape, device=DEVICE)
    kw["state_batch_indices"][1] = 99
    message = (
        r"ssmdecode.compat.vllm: state_batch_indices\[1\] = 99 is outside the state pool \[0, 6\) "
        r"and is not null_block_id \(0\)"
    )
    with untouched(kw["state"], kw["out"]), pytest.raises(ValueError, match=message) as err:
        _vllm_quantized(kw)  # a float32 state: the call itself
    assert "pad_slot_id" not in str(err.value)


def test_sglang_names_intermediate_states_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "1")
    kw = make_verify(Verify(mode="buffer", buffer_idx=True))
    kw["intermediate_state_indices"][0] = 99
    kw["out"] = poisoned(kw["x"])
    rows = kw["intermediate_states"].shape[0]
    message = (
        rf"intermediate_state_indices\[0\] = 99 is outside the {rows} rows of intermediate_states_buffer"
    )
    with (
        untouched(kw["state"], kw["intermediate_states"], kw["out"]),
        pytest.raises(ValueError, match=message),
    ):
        sglang.selective_state_update(
            kw["state"], kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], D=kw["D"], dt_bias=kw["dt_bias"],
            dt_softplus=True, state_batch_indices=kw["state_batch_indices"], out=kw["out"],
            intermediate_states_buffer=kw["intermediate_states"],
            intermediate_state_indices=kw["intermediate_state_indices"], config=CONFIG,
        )  # fmt: skip
