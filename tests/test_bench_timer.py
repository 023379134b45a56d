"""The measurement pieces: timer, same-bytes ceiling, model-like inputs, presets, reports.

On CPU the timer must not touch CUDA and must say its timings mean nothing; the GPU test
checks the method's arithmetic (rotation, calls per graph) on a real device.
"""

from __future__ import annotations

import json

import pytest
import torch

from ssmdecode.bench import ceiling as ceiling_module
from ssmdecode.bench.ceiling import bandwidth_tbps, measure_ceiling, measure_peak
from ssmdecode.bench.inputs import PAD_SLOT_ID, make_inputs
from ssmdecode.bench.report import markdown_table, plot_vs_batch, write_outputs
from ssmdecode.bench.timer import COLD_L2_FACTOR, MIN_CALLS, cold_rotation, interleaved, l2_bytes, time_cold
from ssmdecode.shapes import PRESETS, Shape, parse_dtype, per_rank

CPU = torch.device("cpu")


# --- timer ------------------------------------------------------------------------------------


def test_cold_rotation_is_one_on_cpu() -> None:
    assert l2_bytes(CPU) == 0
    assert cold_rotation(1, CPU) == 1
    assert cold_rotation(1, CPU, pdl=True) == 2  # a pdl call must not read what the last writes
    with pytest.raises(ValueError, match="bytes_per_call"):
        cold_rotation(0, CPU)


def test_time_cold_runs_each_listed_call_once_on_cpu() -> None:
    ran: list[int] = []
    timing = time_cold([lambda i=i: ran.append(i) for i in range(3)], CPU)
    assert ran == [0, 1, 2]
    assert timing.rotation == 3 and len(timing.repeats_us) == 3
    assert timing.calls_per_graph == 1 and timing.replays == 1
    assert not timing.timing_meaningful
    assert timing.to_dict()["timing_meaningful"] is False


def test_time_cold_takes_a_callable_of_the_set_index() -> None:
    ran: list[int] = []
    timing = time_cold(ran.append, CPU, rotation=2)
    assert ran == [0, 1] and timing.rotation == 2


@pytest.mark.parametrize(
    ("calls", "rotation", "match"),
    [(print, None, "rotation >= 1"), ([print], 1, "do not pass it"), ([], None, "no calls")],
    ids=["callable-without-rotation", "list-with-rotation", "empty-list"],
)
def test_time_cold_rejects_ambiguous_arguments(calls, rotation, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        time_cold(calls, CPU, rotation=rotation)


@pytest.mark.gpu
def test_time_cold_on_gpu_follows_the_method() -> None:
    device = torch.device("cuda")
    nbytes = 1 << 20
    rotation = cold_rotation(nbytes, device)
    assert rotation * nbytes >= COLD_L2_FACTOR * l2_bytes(device)
    ceiling = measure_ceiling(nbytes, device)
    for timing in ceiling.timings.values():
        assert timing.timing_meaningful
        assert timing.rotation == rotation
        assert timing.calls_per_graph == max(MIN_CALLS, rotation)
        assert len(timing.repeats_us) == 5
    # The Triton stream and torch's mul_ move the same bytes: they should agree within 2x.
    us = [t.us for t in ceiling.timings.values()]
    assert max(us) < 2 * min(us)


# --- ceiling ----------------------------------------------------------------------------------


def test_stream_kernels_scale_in_place() -> None:
    buffers = torch.randn(2, 3000)
    before = buffers.clone()
    for kernel in ceiling_module.CEILING_KERNELS:
        for call in ceiling_module.stream_calls(kernel, buffers):
            call()
    want = before * torch.tensor(1.0000001) * torch.tensor(1.0000001)
    torch.testing.assert_close(buffers, want, rtol=0, atol=0)
    assert not torch.equal(buffers, before)


def test_ceiling_and_peak_on_cpu() -> None:
    ceiling = measure_ceiling(4096 + 2, CPU)  # rounded up to whole fp32 elements
    assert ceiling.nbytes == 4100
    assert set(ceiling.timings) == {"triton", "torch"}
    assert ceiling.us == ceiling.timings["triton"].us
    assert ceiling.to_dict()["bytes_moved"] == 8200
    assert measure_peak(CPU).nbytes == ceiling_module.peak_bytes(CPU)
    assert bandwidth_tbps(10**12, 1e6) == pytest.approx(1.0)


def _words(state: torch.Tensor) -> torch.Tensor:
    return state.reshape(-1).view(torch.int32).view(state.shape[0], -1).clone()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gather_stream_adds_to_every_word_of_exactly_its_slots(dtype: torch.dtype, device: str) -> None:
    # A slot: 1040 fp32 words (two programs, the second masked) or 520 bf16 pairs (one, masked).
    state = torch.randn(6, 2, 4, 130).to(dtype).to(device)
    before = _words(state)
    slot_sets = torch.tensor([[4, 1], [0, 5]], dtype=torch.int32, device=device)
    calls = ceiling_module._gather_calls(state, slot_sets, None, addend=1)
    calls[0]()
    want = before.clone()
    want[[4, 1]] += 1
    assert torch.equal(_words(state), want)
    # orders[i] picks the rows of set i: the control, row 1 taken twice, leaves row 0's slot
    # alone (slot 1 gains 2, or 1 on a GPU where the two programs race on it)
    twice = torch.tensor([1, 1], device=device)
    calls = ceiling_module._gather_calls(state, slot_sets, [twice, None], addend=1)
    calls[0]()
    gained = _words(state) - want
    assert not gained[[0, 2, 3, 4, 5]].any()
    assert gained[1].min() >= 1 and gained[1].max() <= 2


def test_gather_ceiling_keeps_the_pool_bits_on_cpu() -> None:
    state = torch.randn(5, 2, 4, 16).to(torch.bfloat16)
    before = state.clone()
    slot_sets = torch.tensor([[3, 0], [1, 4]], dtype=torch.int32)
    timing = ceiling_module.measure_gather_ceiling(
        state, slot_sets, [torch.tensor([1, 0]), torch.tensor([0, 1])]
    )
    assert timing.rotation == 2 and timing.us > 0
    assert torch.equal(state.view(torch.int16), before.view(torch.int16))


@pytest.mark.parametrize(
    ("state", "slot_sets", "orders", "match"),
    [
        (
            torch.zeros(4, 8, 6)[:, :, :4],
            torch.zeros(1, 2, dtype=torch.int32),
            None,
            r"state must be a contiguous pool .*shape \(4, 8, 4\)",
        ),
        (
            torch.zeros(4, 3, dtype=torch.bfloat16),
            torch.zeros(1, 2, dtype=torch.int32),
            None,
            r"multiple of 4 bytes.*torch.bfloat16",
        ),
        (
            torch.zeros(4, 8),
            torch.zeros(2, dtype=torch.int32),
            None,
            r"slot_sets has shape \(2,\); expected \[K, B\]",
        ),
        (
            torch.zeros(4, 8),
            torch.zeros(2, 2, dtype=torch.int32),
            [None],
            r"orders has 1 entries; expected one per slot set \(2\)",
        ),
    ],
    ids=["strided", "odd-bytes", "sets-rank", "orders-count"],
)
def test_gather_ceiling_rejects_bad_arguments(state, slot_sets, orders, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ceiling_module.measure_gather_ceiling(state, slot_sets, orders)


# --- inputs -----------------------------------------------------------------------------------


def test_model_like_inputs() -> None:
    inp = make_inputs(
        batch=3,
        nheads=4,
        headdim=6,
        dstate=10,
        ngroups=2,
        state_dtype=torch.float32,
        dtype=torch.bfloat16,
        pool=10,
        device=CPU,
        seed=1,
    )
    # x, B and C are views of one [B, H*P + 2*G*N] tensor
    base = inp.x.untyped_storage().data_ptr()
    assert inp.B.untyped_storage().data_ptr() == base == inp.C.untyped_storage().data_ptr()
    assert inp.x.stride() == (4 * 6 + 2 * 2 * 10, 6, 1)
    # dt, A, D, dt_bias are broadcasts over the head dim (and state dim)
    assert inp.dt.shape == (3, 4, 6) and inp.dt.stride()[-1] == 0
    assert inp.A.shape == (4, 6, 10) and inp.A.stride()[1:] == (0, 0)
    assert inp.D.stride()[-1] == 0 and inp.dt_bias.stride()[-1] == 0
    assert bool((inp.A < 0).all())
    for t in (inp.state, inp.x, inp.B, inp.C, inp.dt, inp.D, inp.dt_bias):
        assert bool((t != 0).all())
    # K = pool // batch disjoint slot sets inside the pool
    assert inp.slot_sets.shape == (3, 3) and inp.slot_sets.dtype == torch.int32
    slots = inp.slot_sets.flatten().tolist()
    assert len(set(slots)) == 9 and min(slots) >= 0 and max(slots) < 10
    kwargs = inp.kwargs(4)
    assert torch.equal(kwargs["state_batch_indices"], inp.slot_sets[1])
    assert kwargs["z"] is None and kwargs["dt_softplus"] is True
    # same seed, same values
    again = make_inputs(3, 4, 6, 10, 2, torch.float32, torch.bfloat16, 10, CPU, seed=1)
    assert torch.equal(again.state, inp.state) and torch.equal(again.slot_sets, inp.slot_sets)


def test_untied_inputs_are_dense() -> None:
    inp = make_inputs(2, 2, 4, 8, 1, torch.bfloat16, torch.float16, 2, CPU, seed=0, tie=False)
    for t in (inp.x, inp.dt, inp.A, inp.B, inp.C, inp.D, inp.dt_bias):
        assert t.is_contiguous()
    assert inp.state.dtype == torch.bfloat16 and inp.x.dtype == torch.float16


def test_inputs_with_a_token_dim_dst_slots_and_pad_rows() -> None:
    inp = make_inputs(2, 4, 6, 10, 2, pool=9, rotation=2, tokens=3, dst=True, pad_rows=(1,), has_z=True)
    assert inp.x.shape == inp.dt.shape == inp.z.shape == inp.out.shape == (2, 3, 4, 6)
    assert inp.B.shape == inp.C.shape == (2, 3, 2, 10) and inp.dt.stride()[-1] == 0
    assert inp.B.untyped_storage().data_ptr() == inp.x.untyped_storage().data_ptr()
    assert inp.state.shape[0] == 9 and inp.rotation == 2
    assert (inp.slot_sets[:, 1] == PAD_SLOT_ID).all()
    live = [*inp.slot_sets[:, 0].tolist(), *inp.dst_slot_sets.flatten().tolist()]
    assert len(set(live)) == 6 and min(live) >= 0 and max(live) < 9  # read and written: disjoint
    kwargs = inp.kwargs(3)
    assert torch.equal(kwargs["dst_state_batch_indices"], inp.dst_slot_sets[1])


def test_mamba1_inputs_without_indices() -> None:
    inp = make_inputs(3, 1, 6, 10, 1, tie=False, indices=None, layout="mamba1", has_D=False)
    assert inp.state.shape == (3, 6, 10) and inp.x.shape == inp.out.shape == (3, 6)
    assert inp.A.shape == (6, 10) and inp.B.shape == (3, 10) and inp.dt_bias.shape == (6,)
    kwargs = inp.kwargs()
    assert "state_batch_indices" not in kwargs and kwargs["D"] is None
    with pytest.raises(ValueError, match="one head and group"):
        make_inputs(3, 2, 6, 10, 1, layout="mamba1")


def test_make_inputs_rejects_a_pool_smaller_than_the_batch() -> None:
    with pytest.raises(ValueError, match="pool"):
        make_inputs(4, 2, 4, 8, 1, torch.float32, torch.bfloat16, 3, CPU, seed=0)


# --- presets ----------------------------------------------------------------------------------


def test_headline_preset_is_the_seed_shape() -> None:
    shape = per_rank(PRESETS["nemotron3-super"], 8)
    assert (shape.nheads, shape.headdim, shape.dstate, shape.ngroups) == (16, 64, 128, 1)
    assert shape.state_dtype == torch.float32 and shape.dtype == torch.bfloat16
    assert 2 * shape.state_bytes(512) == 512 * 2**20  # docs/measuring.md: 512 MiB moved at bs 512


@pytest.mark.parametrize(
    ("name", "tp", "heads", "groups"),
    [
        ("mamba2-2.7b", 1, 80, 1),
        ("mamba2-2.7b", 8, 10, 1),
        ("nemotron-h-8b", 16, 8, 1),
        ("codestral-mamba-7b", 4, 32, 2),
    ],
)
def test_per_rank_splits_heads_and_replicates_groups(name: str, tp: int, heads: int, groups: int) -> None:
    shape = per_rank(PRESETS[name], tp)
    assert (shape.nheads, shape.ngroups) == (heads, groups)
    assert shape.name == f"{name}/tp{tp}"


def test_per_rank_rejects_uneven_splits() -> None:
    with pytest.raises(ValueError, match="does not divide"):
        per_rank(PRESETS["mamba2-2.7b"], 3)
    with pytest.raises(ValueError, match="tp must be"):
        per_rank(PRESETS["mamba2-2.7b"], 0)


def test_every_preset_cites_its_source() -> None:
    for preset in PRESETS.values():
        assert "huggingface.co" in preset.source or "docs.nvidia.com" in preset.source
        assert preset.nheads % preset.ngroups == 0


def test_shape_and_dtype_validation() -> None:
    with pytest.raises(ValueError, match="do not divide"):
        Shape(nheads=3, headdim=4, dstate=8, ngroups=2)
    assert parse_dtype("bf16") == torch.bfloat16 == parse_dtype("bfloat16")
    with pytest.raises(ValueError, match="dtype"):
        parse_dtype("int8")


# --- reports ----------------------------------------------------------------------------------


def test_markdown_json_and_plot(tmp_path) -> None:
    table = markdown_table(["a", "b"], [[1.234, None], ["x", 2]])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1.23 | - |", "| x | 2 |"]
    env = {
        "device": "cpu",
        "sm_count": None,
        "l2_bytes": None,
        "torch": "t",
        "triton": "t",
        "python": "p",
        "cuda": None,
        "git_commit": None,
        "date_utc": "d",
        "command": "c",
        "timing_meaningful": False,
    }
    paths = write_outputs(tmp_path, "r", {"environment": env, "x": 1}, table)
    assert json.loads(paths[0].read_text())["x"] == 1
    assert "mean nothing" in paths[1].read_text()
    png = plot_vs_batch(tmp_path / "p.png", "t", {"c": {1: 1.0, 4: 2.0}}, {1: 3.0, 4: 3.5}, 4.0)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_interleaved_rounds_vary_the_first_item_and_each_items_predecessor() -> None:
    seen: list[str] = []
    results = interleaved(["a", "b", "c", "d"], lambda item: seen.append(item) or len(seen), 4)
    assert {k: len(v) for k, v in results.items()} == {"a": 4, "b": 4, "c": 4, "d": 4}
    rounds = [seen[i : i + 4] for i in range(0, 16, 4)]
    assert all(sorted(r) == ["a", "b", "c", "d"] for r in rounds)
    assert len({r[0] for r in rounds}) > 2  # not always the same item first
    for item in "abcd":
        before = {r[r.index(item) - 1] for r in rounds if r.index(item) > 0}
        assert len(before) > 1, item  # nor always after the same one
    assert results["a"] == [1 + 4 * r + rounds[r].index("a") for r in range(4)]  # in round order
