"""The engine adapters: each engine's argument names, order, defaults, pad / null-slot sentinel
and in-place out, checked against ssmdecode.reference; and the arguments they must refuse."""

from __future__ import annotations

import inspect

import pytest
import torch

from ssmdecode.compat import sglang, vllm
from ssmdecode.reference import selective_state_update_reference

# out is rounded to x's dtype (bf16 here); the state stays float32. Reference: float64.
TOL_OUT = dict(atol=2e-2, rtol=2e-2)
TOL_STATE = dict(atol=1e-4, rtol=1e-4)

# Parameter lists of the engines' functions as read (docs/compat.md names file and commit).
SGLANG_PARAMS = [
    ("state", inspect.Parameter.empty), ("x", inspect.Parameter.empty),
    ("dt", inspect.Parameter.empty), ("A", inspect.Parameter.empty),
    ("B", inspect.Parameter.empty), ("C", inspect.Parameter.empty),
    ("D", None), ("z", None), ("dt_bias", None), ("dt_softplus", False),
    ("state_batch_indices", None), ("pad_slot_id", -1), ("out", None),
    ("disable_state_update", False), ("intermediate_states_buffer", None),
    ("cache_steps", None), ("retrieve_parent_token", None), ("intermediate_state_indices", None),
]
VLLM_PARAMS = [
    ("state", inspect.Parameter.empty), ("x", inspect.Parameter.empty),
    ("dt", inspect.Parameter.empty), ("A", inspect.Parameter.empty),
    ("B", inspect.Parameter.empty), ("C", inspect.Parameter.empty),
    ("D", inspect.Parameter.empty), ("dt_bias", inspect.Parameter.empty),
    ("z", None), ("dt_softplus", False), ("state_batch_indices", None),
    ("dst_state_batch_indices", None), ("null_block_id", 0), ("out", None),
    ("num_accepted_tokens", None), ("cu_seqlens", None), ("is_blackwell", False),
    ("enable_stochastic_rounding", False), ("cache_philox_rounds", 0),
]


def make_inputs(batch: int, nheads: int, headdim: int, dstate: int, ngroups: int, slots: int,
                z: bool, seed: int) -> dict[str, torch.Tensor | None]:
    """Mamba2 decode inputs as engines pass them: x, B, C strided views of one bf16 xBC row;
    dt, A, D, dt_bias stride-0 broadcasts over the head dim."""
    g = torch.Generator().manual_seed(seed)
    width = nheads * headdim + 2 * ngroups * dstate
    xbc = torch.randn(batch, width, generator=g).to(torch.bfloat16)
    hp, gn = nheads * headdim, ngroups * dstate
    return dict(
        state=torch.randn(slots, nheads, headdim, dstate, generator=g),
        x=xbc[:, :hp].view(batch, nheads, headdim),
        dt=torch.randn(batch, nheads, generator=g).to(torch.bfloat16)[..., None].expand(
            batch, nheads, headdim),
        A=(-torch.rand(nheads, generator=g) - 0.5)[:, None, None].expand(nheads, headdim, dstate),
        B=xbc[:, hp:hp + gn].view(batch, ngroups, dstate),
        C=xbc[:, hp + gn:].view(batch, ngroups, dstate),
        D=torch.randn(nheads, generator=g)[:, None].expand(nheads, headdim),
        dt_bias=(torch.rand(nheads, generator=g) - 4.0)[:, None].expand(nheads, headdim),
        z=torch.randn(batch, nheads, headdim, generator=g).to(torch.bfloat16) if z else None,
    )


def nan_out(x: torch.Tensor) -> torch.Tensor:
    """A preallocated out poisoned with NaN, so an unwritten element cannot pass."""
    return torch.full(x.shape, float("nan"), dtype=x.dtype)


def check_against_reference(out: torch.Tensor, state: torch.Tensor, before: torch.Tensor,
                            inputs: dict, written: list[int], **ref_kwargs) -> None:
    """out and the state pool match the reference; every slot outside `written` keeps its bits."""
    ref_out, ref_state = selective_state_update_reference(
        before, inputs["x"], inputs["dt"], inputs["A"], inputs["B"], inputs["C"],
        D=inputs["D"], z=inputs["z"], dt_bias=inputs["dt_bias"], dt_softplus=True, **ref_kwargs)
    torch.testing.assert_close(out.double(), ref_out, **TOL_OUT)
    torch.testing.assert_close(state.double(), ref_state, **TOL_STATE)
    untouched = [s for s in range(state.shape[0]) if s not in written]
    assert torch.equal(state[untouched], before[untouched])


@pytest.mark.parametrize("name,module,expected", [("sglang", sglang, SGLANG_PARAMS),
                                                  ("vllm", vllm, VLLM_PARAMS)])
def test_signature_is_the_engines(name: str, module: object, expected: list) -> None:
    params = list(inspect.signature(module.selective_state_update).parameters.values())
    positional = [(p.name, p.default) for p in params if p.kind != p.KEYWORD_ONLY]
    assert positional == expected, name
    assert [p.name for p in params if p.kind == p.KEYWORD_ONLY] == ["config"]


@pytest.mark.parametrize("z", [False, True], ids=["no-z", "z"])
def test_vllm_null_block_dst_and_2d_indices(z: bool) -> None:
    """B3-H4-P12-N24-G2: row 1 is the null block (0); rows 0 and 2 read slots 3 and 5 and write
    slots 6 and 5; indices come as vLLM's [B', K] with an extra row and column."""
    inp = make_inputs(3, 4, 12, 24, 2, slots=8, z=z, seed=0)
    state = inp.pop("state")
    before = state.clone()
    src = torch.tensor([[3, 7], [0, 7], [5, 7], [1, 1]], dtype=torch.int32)
    dst = torch.tensor([[6, 7], [2, 7], [5, 7], [1, 1]], dtype=torch.int32)
    out = nan_out(inp["x"])
    result = vllm.selective_state_update(
        state, inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], inp["D"], inp["dt_bias"],
        z=inp["z"], dt_softplus=True, state_batch_indices=src, dst_state_batch_indices=dst,
        out=out, is_blackwell=True)
    assert result is None
    check_against_reference(out, state, before, inp, written=[6, 5],
                            state_batch_indices=src[:3, 0], dst_state_batch_indices=dst[:3, 0],
                            pad_slot_id=0)
    assert torch.equal(out[1], torch.zeros_like(out[1]))  # the null row's out: zeros


def test_vllm_in_place_1d_indices() -> None:
    """B2-H2-P8-N16-G1, int64 [B] indices, no dst: each row updates the slot it reads."""
    inp = make_inputs(2, 2, 8, 16, 1, slots=4, z=False, seed=1)
    state = inp.pop("state")
    before = state.clone()
    src = torch.tensor([2, 1])
    out = nan_out(inp["x"])
    vllm.selective_state_update(state, inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"],
                                inp["D"], inp["dt_bias"], dt_softplus=True,
                                state_batch_indices=src, out=out)
    check_against_reference(out, state, before, inp, written=[2, 1], state_batch_indices=src,
                            pad_slot_id=0)


def test_vllm_mamba1_layout() -> None:
    """B3-P20-N16: state [S, P, N], x [B, P], D and dt_bias [P]; vLLM's MambaMixer layout."""
    g = torch.Generator().manual_seed(2)
    batch, headdim, dstate = 3, 20, 16
    state = torch.randn(5, headdim, dstate, generator=g)
    before = state.clone()
    inp = dict(x=torch.randn(batch, headdim, generator=g).to(torch.bfloat16),
               dt=torch.randn(batch, headdim, generator=g).to(torch.bfloat16),
               A=-torch.rand(headdim, dstate, generator=g) - 0.5,
               B=torch.randn(batch, dstate, generator=g).to(torch.bfloat16),
               C=torch.randn(batch, dstate, generator=g).to(torch.bfloat16),
               D=torch.randn(headdim, generator=g), dt_bias=torch.rand(headdim, generator=g) - 4.0,
               z=torch.randn(batch, headdim, generator=g).to(torch.bfloat16))
    src = torch.tensor([4, 0, 2], dtype=torch.int32)
    out = nan_out(inp["x"])
    vllm.selective_state_update(state, inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"],
                                inp["D"], inp["dt_bias"], z=inp["z"], dt_softplus=True,
                                state_batch_indices=src, out=out)
    check_against_reference(out, state, before, inp, written=[4, 2], state_batch_indices=src,
                            pad_slot_id=0)


@pytest.mark.parametrize("argument,value", [
    ("num_accepted_tokens", torch.ones(2, dtype=torch.int32)),
    ("cu_seqlens", torch.tensor([0, 1, 2], dtype=torch.int32)),
    ("enable_stochastic_rounding", True),
    ("cache_philox_rounds", 10),
])
def test_vllm_rejects_unsupported(argument: str, value: object) -> None:
    inp = make_inputs(2, 2, 8, 16, 1, slots=3, z=False, seed=3)
    state = inp.pop("state")
    before = state.clone()
    with pytest.raises(NotImplementedError, match=argument):
        vllm.selective_state_update(state, inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"],
                                    inp["D"], inp["dt_bias"], out=nan_out(inp["x"]),
                                    state_batch_indices=torch.tensor([1, 2]), **{argument: value})
    assert torch.equal(state, before)


@pytest.mark.parametrize("name,call", [
    ("sglang", lambda i: sglang.selective_state_update(
        i["state"], i["x"], i["dt"], i["A"], i["B"], i["C"], i["D"])),
    ("vllm", lambda i: vllm.selective_state_update(
        i["state"], i["x"], i["dt"], i["A"], i["B"], i["C"], i["D"], i["dt_bias"])),
])
def test_out_is_required(name: str, call: object) -> None:
    inp = make_inputs(2, 2, 8, 16, 1, slots=2, z=False, seed=4)
    with pytest.raises(TypeError, match="out is required"):
        call(inp)


def test_sglang_pad_slot_default() -> None:
    """B3-H4-P12-N24-G1: row 1 carries sglang's PAD_SLOT_ID (-1) and is skipped."""
    inp = make_inputs(3, 4, 12, 24, 1, slots=6, z=True, seed=5)
    state = inp.pop("state")
    before = state.clone()
    src = torch.tensor([2, -1, 4], dtype=torch.int32)
    out = nan_out(inp["x"])
    result = sglang.selective_state_update(state, inp["x"], inp["dt"], inp["A"], inp["B"],
                                           inp["C"], inp["D"], inp["z"], inp["dt_bias"], True,
                                           src, out=out)
    assert result is None
    check_against_reference(out, state, before, inp, written=[2, 4], state_batch_indices=src,
                            pad_slot_id=sglang.PAD_SLOT_ID)


def test_sglang_token_dim_of_one() -> None:
    """B2-T1-H2-P8-N16-G2: sglang's multi-token layout with T = 1 is single-token decode; out
    [B, 1, H, P] is written in place."""
    inp = make_inputs(2, 2, 8, 16, 2, slots=3, z=True, seed=6)
    state = inp.pop("state")
    before = state.clone()
    src = torch.tensor([0, 2], dtype=torch.int32)
    out = nan_out(inp["x"].unsqueeze(1))
    sglang.selective_state_update(
        state, inp["x"].unsqueeze(1), inp["dt"].unsqueeze(1), inp["A"], inp["B"].unsqueeze(1),
        inp["C"].unsqueeze(1), D=inp["D"], z=inp["z"].unsqueeze(1), dt_bias=inp["dt_bias"],
        dt_softplus=True, state_batch_indices=src, out=out)
    check_against_reference(out.squeeze(1), state, before, inp, written=[0, 2],
                            state_batch_indices=src)


def test_sglang_disable_state_update() -> None:
    inp = make_inputs(2, 2, 8, 16, 1, slots=3, z=False, seed=7)
    state = inp.pop("state")
    before = state.clone()
    src = torch.tensor([1, 2], dtype=torch.int32)
    out = nan_out(inp["x"])
    sglang.selective_state_update(state, inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"],
                                  D=inp["D"], dt_bias=inp["dt_bias"], dt_softplus=True,
                                  state_batch_indices=src, out=out, disable_state_update=True)
    check_against_reference(out, state, before, inp, written=[], state_batch_indices=src,
                            disable_state_update=True)


@pytest.mark.parametrize("argument", ["x", "intermediate_states_buffer", "cache_steps",
                                      "retrieve_parent_token", "intermediate_state_indices"])
def test_sglang_rejects_unsupported(argument: str) -> None:
    """T = 2 tokens per request, or any of the verify-time state caches."""
    inp = make_inputs(2, 2, 8, 16, 1, slots=3, z=False, seed=8)
    state = inp.pop("state")
    before = state.clone()
    x, dt, B, C, out = inp["x"], inp["dt"], inp["B"], inp["C"], nan_out(inp["x"])
    extra: dict[str, object] = {}
    if argument == "x":
        x, dt, out = (t.unsqueeze(1).expand(2, 2, 2, 8) for t in (x, dt, out))
        B, C = (t.unsqueeze(1).expand(2, 2, 1, 16) for t in (B, C))
    else:
        extra[argument] = 4 if argument == "cache_steps" else torch.zeros(2, dtype=torch.int32)
    with pytest.raises(NotImplementedError, match=argument):
        sglang.selective_state_update(state, x, dt, inp["A"], B, C, D=inp["D"],
                                      dt_bias=inp["dt_bias"], dt_softplus=True,
                                      state_batch_indices=torch.tensor([1, 2]), out=out, **extra)
    assert torch.equal(state, before)
