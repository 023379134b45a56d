"""The engine adapters: each engine's argument names, order, defaults, pad / null-slot sentinel
and in-place out, single-token and multi-token (sglang's verify buffer and EAGLE trees, vLLM's
speculative decoding), checked against ssmdecode.reference; and the arguments they must refuse.
Bit-for-bit comparisons with the engines' own kernels need a GPU: tests/test_compat_upstream.py."""

from __future__ import annotations

import inspect

import pytest
import torch

from ssmdecode.compat import sglang, vllm
from ssmdecode.numerics import TOLERANCES
from ssmdecode.reference import selective_state_update_reference

# Parameter lists of the engines' functions as read (docs/compat.md names file and commit).
SGLANG_PARAMS = [
    ("state", inspect.Parameter.empty),
    ("x", inspect.Parameter.empty),
    ("dt", inspect.Parameter.empty),
    ("A", inspect.Parameter.empty),
    ("B", inspect.Parameter.empty),
    ("C", inspect.Parameter.empty),
    ("D", None),
    ("z", None),
    ("dt_bias", None),
    ("dt_softplus", False),
    ("state_batch_indices", None),
    ("pad_slot_id", -1),
    ("out", None),
    ("disable_state_update", False),
    ("intermediate_states_buffer", None),
    ("cache_steps", None),
    ("retrieve_parent_token", None),
    ("intermediate_state_indices", None),
    ("enable_stochastic_rounding", False),  # sglang's later signature (its native fallback's)
    ("cache_philox_rounds", 0),
]
VLLM_PARAMS = [
    ("state", inspect.Parameter.empty),
    ("x", inspect.Parameter.empty),
    ("dt", inspect.Parameter.empty),
    ("A", inspect.Parameter.empty),
    ("B", inspect.Parameter.empty),
    ("C", inspect.Parameter.empty),
    ("D", inspect.Parameter.empty),
    ("dt_bias", inspect.Parameter.empty),
    ("z", None),
    ("dt_softplus", False),
    ("state_batch_indices", None),
    ("dst_state_batch_indices", None),
    ("null_block_id", 0),
    ("out", None),
    ("num_accepted_tokens", None),
    ("cu_seqlens", None),
    ("is_blackwell", False),
    ("enable_stochastic_rounding", False),
    ("cache_philox_rounds", 0),
]


def make_inputs(
    batch: int, nheads: int, headdim: int, dstate: int, ngroups: int, slots: int, z: bool, seed: int
) -> dict[str, torch.Tensor | None]:
    """Mamba2 decode inputs as engines pass them: x, B, C strided views of one bf16 xBC row;
    dt, A, D, dt_bias stride-0 broadcasts over the head dim."""
    g = torch.Generator().manual_seed(seed)
    width = nheads * headdim + 2 * ngroups * dstate
    xbc = torch.randn(batch, width, generator=g).to(torch.bfloat16)
    hp, gn = nheads * headdim, ngroups * dstate
    return dict(
        state=torch.randn(slots, nheads, headdim, dstate, generator=g),
        x=xbc[:, :hp].view(batch, nheads, headdim),
        dt=torch.randn(batch, nheads, generator=g)
        .to(torch.bfloat16)[..., None]
        .expand(batch, nheads, headdim),
        A=(-torch.rand(nheads, generator=g) - 0.5)[:, None, None].expand(nheads, headdim, dstate),
        B=xbc[:, hp : hp + gn].view(batch, ngroups, dstate),
        C=xbc[:, hp + gn :].view(batch, ngroups, dstate),
        D=torch.randn(nheads, generator=g)[:, None].expand(nheads, headdim),
        dt_bias=(torch.rand(nheads, generator=g) - 4.0)[:, None].expand(nheads, headdim),
        z=torch.randn(batch, nheads, headdim, generator=g).to(torch.bfloat16) if z else None,
    )


def nan_out(x: torch.Tensor) -> torch.Tensor:
    """A preallocated out poisoned with NaN, so an unwritten element cannot pass."""
    return torch.full(x.shape, float("nan"), dtype=x.dtype)


def check_against_reference(
    out: torch.Tensor,
    state: torch.Tensor,
    before: torch.Tensor,
    inputs: dict,
    written: list[int],
    **ref_kwargs,
) -> None:
    """out and the state pool match the reference; every slot outside `written` keeps its bits."""
    ref_out, ref_state = selective_state_update_reference(
        before,
        inputs["x"],
        inputs["dt"],
        inputs["A"],
        inputs["B"],
        inputs["C"],
        D=inputs["D"],
        z=inputs["z"],
        dt_bias=inputs["dt_bias"],
        dt_softplus=True,
        **ref_kwargs,
    )
    if out.dim() == ref_out.dim():  # tokens of requests left alone stay poisoned
        live = ~out.isnan().flatten(1).all(1)
        out, ref_out = out[live], ref_out[live]
    torch.testing.assert_close(out.double(), ref_out, **TOLERANCES[out.dtype])
    torch.testing.assert_close(state.double(), ref_state, **TOLERANCES[state.dtype])
    untouched = [s for s in range(state.shape[0]) if s not in written]
    assert torch.equal(state[untouched], before[untouched])


@pytest.mark.parametrize(
    "name,module,expected", [("sglang", sglang, SGLANG_PARAMS), ("vllm", vllm, VLLM_PARAMS)]
)
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
        state,
        inp["x"],
        inp["dt"],
        inp["A"],
        inp["B"],
        inp["C"],
        inp["D"],
        inp["dt_bias"],
        z=inp["z"],
        dt_softplus=True,
        state_batch_indices=src,
        dst_state_batch_indices=dst,
        out=out,
        is_blackwell=True,
    )
    assert result is None
    check_against_reference(
        out,
        state,
        before,
        inp,
        written=[6, 5],
        state_batch_indices=src[:3, 0],
        dst_state_batch_indices=dst[:3, 0],
        pad_slot_id=0,
    )
    assert torch.equal(out[1], torch.zeros_like(out[1]))  # the null row's out: zeros


def test_vllm_in_place_1d_indices() -> None:
    """B2-H2-P8-N16-G1, int64 [B] indices, no dst: each row updates the slot it reads."""
    inp = make_inputs(2, 2, 8, 16, 1, slots=4, z=False, seed=1)
    state = inp.pop("state")
    before = state.clone()
    src = torch.tensor([2, 1])
    out = nan_out(inp["x"])
    vllm.selective_state_update(
        state,
        inp["x"],
        inp["dt"],
        inp["A"],
        inp["B"],
        inp["C"],
        inp["D"],
        inp["dt_bias"],
        dt_softplus=True,
        state_batch_indices=src,
        out=out,
    )
    check_against_reference(out, state, before, inp, written=[2, 1], state_batch_indices=src, pad_slot_id=0)


def test_vllm_mamba1_layout() -> None:
    """B3-P20-N16: state [S, P, N], x [B, P], D and dt_bias [P]; vLLM's MambaMixer layout."""
    g = torch.Generator().manual_seed(2)
    batch, headdim, dstate = 3, 20, 16
    state = torch.randn(5, headdim, dstate, generator=g)
    before = state.clone()
    inp = dict(
        x=torch.randn(batch, headdim, generator=g).to(torch.bfloat16),
        dt=torch.randn(batch, headdim, generator=g).to(torch.bfloat16),
        A=-torch.rand(headdim, dstate, generator=g) - 0.5,
        B=torch.randn(batch, dstate, generator=g).to(torch.bfloat16),
        C=torch.randn(batch, dstate, generator=g).to(torch.bfloat16),
        D=torch.randn(headdim, generator=g),
        dt_bias=torch.rand(headdim, generator=g) - 4.0,
        z=torch.randn(batch, headdim, generator=g).to(torch.bfloat16),
    )
    src = torch.tensor([4, 0, 2], dtype=torch.int32)
    out = nan_out(inp["x"])
    vllm.selective_state_update(
        state,
        inp["x"],
        inp["dt"],
        inp["A"],
        inp["B"],
        inp["C"],
        inp["D"],
        inp["dt_bias"],
        z=inp["z"],
        dt_softplus=True,
        state_batch_indices=src,
        out=out,
    )
    check_against_reference(out, state, before, inp, written=[4, 2], state_batch_indices=src, pad_slot_id=0)


def packed_tokens(inp: dict, lengths: list[int]) -> dict:
    """The per-token tensors of make_inputs cut to sum(lengths) rows: vLLM's packed layout."""
    total = sum(lengths)
    return {
        k: (v[:total] if k in ("x", "dt", "B", "C", "z") and v is not None else v) for k, v in inp.items()
    }


def test_vllm_speculative_decoding() -> None:
    """B3 requests of 3, 0 and 4 tokens packed (cu_seqlens), num_accepted_tokens 2, 1, 4:
    each request starts from the slot of its last accepted token and writes token t's state
    to dst[b, t]; a null entry of dst writes nothing; the empty request is left alone."""
    lengths = [3, 0, 4]
    inp = packed_tokens(make_inputs(7, 4, 12, 24, 2, slots=30, z=True, seed=11), lengths)
    state = inp.pop("state")
    before = state.clone()
    src = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [0, 0, 0, 0]], dtype=torch.int32)
    dst = torch.tensor([[13, 14, 0, 15], [16, 17, 18, 19], [20, 21, 22, 23]], dtype=torch.int32)
    multi = dict(
        num_accepted_tokens=torch.tensor([2, 1, 4], dtype=torch.int32),
        cu_seqlens=torch.tensor([0, 3, 3, 7], dtype=torch.int32),
    )
    out = nan_out(inp["x"])
    vllm.selective_state_update(
        state,
        inp["x"],
        inp["dt"],
        inp["A"],
        inp["B"],
        inp["C"],
        inp["D"],
        inp["dt_bias"],
        z=inp["z"],
        dt_softplus=True,
        state_batch_indices=src,
        dst_state_batch_indices=dst,
        out=out,
        **multi,
    )
    check_against_reference(
        out,
        state,
        before,
        inp,
        written=[13, 14, 20, 21, 22, 23],
        state_batch_indices=src[:3],
        dst_state_batch_indices=dst,
        pad_slot_id=0,
        **multi,
    )


def test_vllm_packed_tokens_without_speculation() -> None:
    """cu_seqlens alone: each request reads column 0 and writes its final state to dst
    column 0 (default: the slot read), its tokens applied in order."""
    lengths = [2, 1, 3]
    inp = packed_tokens(make_inputs(6, 2, 8, 16, 1, slots=8, z=False, seed=12), lengths)
    state = inp.pop("state")
    before = state.clone()
    src = torch.tensor([[3, 9], [5, 9], [2, 9]], dtype=torch.int32)
    cu = torch.tensor([0, 2, 3, 6], dtype=torch.int32)
    out = nan_out(inp["x"])
    vllm.selective_state_update(
        state,
        inp["x"],
        inp["dt"],
        inp["A"],
        inp["B"],
        inp["C"],
        inp["D"],
        inp["dt_bias"],
        dt_softplus=True,
        state_batch_indices=src,
        out=out,
        cu_seqlens=cu,
    )
    check_against_reference(
        out,
        state,
        before,
        inp,
        written=[3, 5, 2],
        state_batch_indices=src[:, 0],
        pad_slot_id=0,
        cu_seqlens=cu,
    )


def test_sglang_verify_with_buffer_and_tree() -> None:
    """B2-T3: sglang's verify step: out for every token, every token's state into the buffer
    (rows from intermediate_state_indices, cache_steps 4), EAGLE parents [B, T], no final state
    (disable_state_update)."""
    inp = make_inputs(6, 2, 8, 16, 1, slots=5, z=True, seed=13)
    state = inp.pop("state")
    before = state.clone()
    tok = {k: (v.view(2, 3, *v.shape[1:]) if k in ("x", "dt", "B", "C", "z") else v) for k, v in inp.items()}
    buffer = torch.full((3 * 4 * 2 * 8 * 16,), float("nan"))  # flat, as an engine may hold it
    src = torch.tensor([4, 1], dtype=torch.int32)
    rows = torch.tensor([2, 0], dtype=torch.int32)
    parents = torch.tensor([[-1, 0, 0], [-1, 0, 1]], dtype=torch.int32)
    out = nan_out(tok["x"])
    sglang.selective_state_update(
        state,
        tok["x"],
        tok["dt"],
        tok["A"],
        tok["B"],
        tok["C"],
        tok["D"],
        tok["z"],
        tok["dt_bias"],
        True,
        src,
        out=out,
        disable_state_update=True,
        intermediate_states_buffer=buffer,
        cache_steps=4,
        retrieve_parent_token=parents,
        intermediate_state_indices=rows,
    )
    ref_out, _, ref_buf = selective_state_update_reference(
        before,
        tok["x"],
        tok["dt"],
        tok["A"],
        tok["B"],
        tok["C"],
        D=tok["D"],
        z=tok["z"],
        dt_bias=tok["dt_bias"],
        dt_softplus=True,
        state_batch_indices=src,
        disable_state_update=True,
        intermediate_states=torch.full((3, 4, 2, 8, 16), float("nan")),
        intermediate_state_indices=rows,
        parent_token_indices=parents,
    )
    torch.testing.assert_close(out.double(), ref_out, **TOLERANCES[out.dtype])
    assert torch.equal(state, before)
    buf = buffer.view(3, 4, 2, 8, 16)
    torch.testing.assert_close(buf[[2, 0], :3].double(), ref_buf[[2, 0], :3], **TOLERANCES[buf.dtype])
    assert buf[1].isnan().all() and buf[:, 3].isnan().all(), "wrote a buffer row or step no token owns"


def test_sglang_buffer_not_rows_of_cache_steps_is_refused() -> None:
    inp = make_inputs(4, 2, 8, 16, 1, slots=3, z=False, seed=14)
    state = inp.pop("state")
    tok = {k: (v.view(2, 2, *v.shape[1:]) if k in ("x", "dt", "B", "C") else v) for k, v in inp.items()}
    with pytest.raises(ValueError, match="not contiguous rows of cache_steps=3"):
        sglang.selective_state_update(
            state,
            tok["x"],
            tok["dt"],
            tok["A"],
            tok["B"],
            tok["C"],
            D=tok["D"],
            dt_bias=tok["dt_bias"],
            out=nan_out(tok["x"]),
            state_batch_indices=torch.tensor([1, 2]),
            intermediate_states_buffer=torch.zeros(1000),
            cache_steps=3,
        )


# Malformed calls: a list or an array where a tensor belongs, a sentinel given as a tensor or
# a float. Each is a TypeError naming the argument, before anything is written.
MALFORMED = [
    ("sglang", "x", lambda t: t.tolist(), "x must be a torch.Tensor, got list"),
    ("sglang", "B", lambda t: t.float().numpy(), "B must be a torch.Tensor, got ndarray"),
    ("sglang", "state_batch_indices", lambda t: t.numpy(), "state_batch_indices must be a torch.Tensor"),
    ("sglang", "pad_slot_id", lambda t: torch.tensor(-1), "pad_slot_id must be an int"),
    ("sglang", "pad_slot_id", lambda t: -1.0, "pad_slot_id must be an int"),
    ("vllm", "x", lambda t: t.tolist(), "x must be a torch.Tensor, got list"),
    ("vllm", "C", lambda t: t.float().numpy(), "C must be a torch.Tensor, got ndarray"),
    ("vllm", "state_batch_indices", lambda t: t.tolist(), "state_batch_indices must be a torch.Tensor"),
    ("vllm", "null_block_id", lambda t: torch.tensor(0), "null_block_id must be an int"),
    ("vllm", "null_block_id", lambda t: 0.0, "null_block_id must be an int"),
]


@pytest.mark.parametrize(
    "engine,argument,bad,message", MALFORMED, ids=[f"{e}-{a}-{i}" for i, (e, a, _, _) in enumerate(MALFORMED)]
)
def test_malformed_arguments_are_type_errors(engine: str, argument: str, bad, message: str) -> None:
    inp = make_inputs(2, 2, 8, 16, 1, slots=4, z=False, seed=15)
    state = inp.pop("state")
    before = state.clone()
    kw = dict(
        x=inp["x"],
        dt=inp["dt"],
        A=inp["A"],
        B=inp["B"],
        C=inp["C"],
        D=inp["D"],
        dt_bias=inp["dt_bias"],
        dt_softplus=True,
        state_batch_indices=torch.tensor([1, 3], dtype=torch.int32),
    )
    sentinel = "pad_slot_id" if engine == "sglang" else "null_block_id"
    kw[sentinel] = -1 if engine == "sglang" else 0
    kw[argument] = bad(kw.get(argument))
    out = nan_out(inp["x"])
    module = sglang if engine == "sglang" else vllm
    with pytest.raises(TypeError, match=message):
        module.selective_state_update(state, out=out, **kw)
    assert torch.equal(state, before)
    assert out.isnan().all()


@pytest.mark.parametrize(
    "name,call",
    [
        (
            "sglang",
            lambda i: sglang.selective_state_update(
                i["state"], i["x"], i["dt"], i["A"], i["B"], i["C"], i["D"]
            ),
        ),
        (
            "vllm",
            lambda i: vllm.selective_state_update(
                i["state"], i["x"], i["dt"], i["A"], i["B"], i["C"], i["D"], i["dt_bias"]
            ),
        ),
    ],
)
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
    result = sglang.selective_state_update(
        state,
        inp["x"],
        inp["dt"],
        inp["A"],
        inp["B"],
        inp["C"],
        inp["D"],
        inp["z"],
        inp["dt_bias"],
        True,
        src,
        out=out,
    )
    assert result is None
    check_against_reference(
        out, state, before, inp, written=[2, 4], state_batch_indices=src, pad_slot_id=sglang.PAD_SLOT_ID
    )


def test_sglang_token_dim_of_one() -> None:
    """B2-T1-H2-P8-N16-G2: sglang's multi-token layout with T = 1 is single-token decode; out
    [B, 1, H, P] is written in place."""
    inp = make_inputs(2, 2, 8, 16, 2, slots=3, z=True, seed=6)
    state = inp.pop("state")
    before = state.clone()
    src = torch.tensor([0, 2], dtype=torch.int32)
    out = nan_out(inp["x"].unsqueeze(1))
    sglang.selective_state_update(
        state,
        inp["x"].unsqueeze(1),
        inp["dt"].unsqueeze(1),
        inp["A"],
        inp["B"].unsqueeze(1),
        inp["C"].unsqueeze(1),
        D=inp["D"],
        z=inp["z"].unsqueeze(1),
        dt_bias=inp["dt_bias"],
        dt_softplus=True,
        state_batch_indices=src,
        out=out,
    )
    check_against_reference(out.squeeze(1), state, before, inp, written=[0, 2], state_batch_indices=src)


def test_sglang_disable_state_update() -> None:
    inp = make_inputs(2, 2, 8, 16, 1, slots=3, z=False, seed=7)
    state = inp.pop("state")
    before = state.clone()
    src = torch.tensor([1, 2], dtype=torch.int32)
    out = nan_out(inp["x"])
    sglang.selective_state_update(
        state,
        inp["x"],
        inp["dt"],
        inp["A"],
        inp["B"],
        inp["C"],
        D=inp["D"],
        dt_bias=inp["dt_bias"],
        dt_softplus=True,
        state_batch_indices=src,
        out=out,
        disable_state_update=True,
    )
    check_against_reference(
        out, state, before, inp, written=[], state_batch_indices=src, disable_state_update=True
    )
