"""selective_state_update against the float64 reference, on the CPU (Triton's interpreter) and,
with @pytest.mark.gpu, on a GPU at real model shapes.

Every check compares out AND the written state, poisons out with NaN first, and checks that
slots no row writes keep their bits.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import DEVICE, Case, bits, make_inputs, run_bits
from ssmdecode import LaunchConfig, selective_state_update, selective_state_update_reference
from ssmdecode.config import (
    candidate_configs,
    default_config,
    device_key,
    load_table,
    table_key,
    upstream_config,
)
from ssmdecode.numerics import TOLERANCES
from ssmdecode.ops.selective_state_update.decode import Variant


def run_and_check(case: Case, config: LaunchConfig | None = None, device: str = DEVICE) -> None:
    kw = make_inputs(case, device)
    state0 = kw["state"].clone()
    ref_out, ref_state = selective_state_update_reference(**kw)
    out = torch.full(kw["x"].shape, float("nan"), dtype=kw["x"].dtype, device=device)
    got = selective_state_update(**kw, out=out, config=config)
    assert got is out
    assert not out.isnan().any(), "an out element was not written"
    # the one table (ssmdecode.numerics), by the dtype a value is stored in: out in its own,
    # the state in its own
    torch.testing.assert_close(out.double(), ref_out.to(out.device), **TOLERANCES[out.dtype])

    state = kw["state"]
    written = _written_slots(kw, case)
    for slot in range(state.shape[0]):
        if slot in written:
            torch.testing.assert_close(
                state[slot].double(), ref_state[slot].to(state.device), **TOLERANCES[state.dtype]
            )
        else:  # untouched: bit for bit
            assert torch.equal(bits(state[slot]), bits(state0[slot])), f"slot {slot} changed"
    for row in case.pad_rows:
        assert (out[row] == 0).all(), f"padded row {row} of out is not zero"


def _written_slots(kw: dict, case: Case) -> set[int]:
    if kw.get("disable_state_update"):
        return set()
    src = kw.get("state_batch_indices")
    if src is None:
        return set(range(case.batch))
    dst = kw.get("dst_state_batch_indices", src)
    return {int(d) for s, d in zip(src.tolist(), dst.tolist(), strict=True) if s != -1 and d != -1}


def _cpu_config(case: Case) -> LaunchConfig:
    """One program per (row, head) under the interpreter: the cheapest grid."""
    return LaunchConfig(block_m=1 << (case.headdim - 1).bit_length(), num_warps=4)


BASE = Case()
CPU_CASES = [
    BASE,
    Case(batch=1, nheads=2, ngroups=1),
    Case(batch=5, nheads=2, ngroups=2, headdim=7, dstate=5),
    Case(state="bf16"),
    Case(state="fp16", inputs="fp16"),
    Case(state="fp32", inputs="fp32"),
    Case(state="bf16", inputs="fp32"),
    Case(tie=True),
    Case(tie=True, has_dt_bias=False),
    Case(has_D=False, has_z=False, has_dt_bias=False),
    Case(softplus=False),
    Case(indices="int64"),
    Case(indices=None),
    Case(batch=4, pad_rows=(0, 2)),
    Case(dst=True),
    Case(dst=True, pad_rows=(1,)),
    Case(batch=2, nheads=2, ngroups=1, headdim=8, dstate=16),  # packed rows (N a power of 2)
    Case(layout="mamba1", nheads=1, ngroups=1, headdim=10, dstate=16),
    Case(layout="mamba1", nheads=1, ngroups=1, headdim=10, dstate=16, indices=None, has_z=False),
]


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: c.id)
def test_matches_reference(case: Case) -> None:
    run_and_check(case, _cpu_config(case))


def test_disable_state_update_writes_no_state() -> None:
    kw = make_inputs(BASE)
    state0 = kw["state"].clone()
    ref_out, _ = selective_state_update_reference(**kw, disable_state_update=True)
    out = selective_state_update(**kw, disable_state_update=True, config=_cpu_config(BASE))
    assert torch.equal(bits(kw["state"]), bits(state0))
    torch.testing.assert_close(out.double(), ref_out, **TOLERANCES[out.dtype])


def test_block_m_smaller_than_head_dim() -> None:
    """Several row blocks per head, the last one partly masked (P = 12, BLOCK_M = 8)."""
    case = Case(batch=2, nheads=2, ngroups=1)
    run_and_check(case, LaunchConfig(8, 1))
    run_and_check(case, LaunchConfig(8, 2, slot_major=True, evict_first=True))


def test_default_config_from_table_lookup() -> None:
    """config=None takes the lookup path (on CPU: the built-in default)."""
    run_and_check(Case(batch=1, nheads=1, ngroups=1, headdim=8, dstate=8))


def test_strided_out_and_noncontiguous_inputs() -> None:
    """out as a strided view into a larger buffer; x and z transposed views; A with odd strides."""
    case = BASE
    kw = make_inputs(case)
    b, h, p = kw["x"].shape
    kw["x"] = kw["x"].transpose(1, 2).contiguous().transpose(1, 2)
    kw["z"] = kw["z"].transpose(0, 1).contiguous().transpose(0, 1)
    kw["A"] = kw["A"].permute(2, 0, 1).contiguous().permute(1, 2, 0)
    ref_out, ref_state = selective_state_update_reference(**kw)
    big = torch.full((b, h, 2 * p + 1), float("nan"), dtype=kw["x"].dtype, device=DEVICE)
    out = big[:, :, 1 : 2 * p + 1 : 2]
    selective_state_update(**kw, out=out, config=_cpu_config(case))
    torch.testing.assert_close(out.double(), ref_out, **TOLERANCES[out.dtype])
    assert big[:, :, 0::2].isnan().all(), "wrote outside the out view"
    slots = kw["state_batch_indices"].long()
    torch.testing.assert_close(kw["state"][slots].double(), ref_state[slots], **TOLERANCES[kw["state"].dtype])


def test_index_views_with_strides() -> None:
    """Indices as a column of a [B, K] tensor (stride K), as engines keep them."""
    case = Case(dst=True, pad_rows=(2,))
    kw = make_inputs(case)
    ref_out, ref_state = selective_state_update_reference(**kw)
    for name in ("state_batch_indices", "dst_state_batch_indices"):
        wide = torch.full((case.batch, 3), 10_000, dtype=kw[name].dtype)
        wide[:, 1] = kw[name]
        kw[name] = wide[:, 1]
    out = selective_state_update(**kw, config=_cpu_config(case))
    torch.testing.assert_close(out.double(), ref_out, **TOLERANCES[out.dtype])
    torch.testing.assert_close(kw["state"].double(), ref_state, **TOLERANCES[kw["state"].dtype])


def test_out_dtype_defaults_to_x_and_can_differ() -> None:
    kw = make_inputs(BASE)
    assert selective_state_update(**kw, config=_cpu_config(BASE)).dtype == torch.bfloat16
    kw = make_inputs(BASE)
    out = torch.empty(kw["x"].shape, dtype=torch.float32)
    selective_state_update(**kw, out=out, config=_cpu_config(BASE))
    ref_out, _ = selective_state_update_reference(**make_inputs(BASE))
    torch.testing.assert_close(out.double(), ref_out, **TOLERANCES[out.dtype])


PACKED = Case(batch=2, nheads=2, ngroups=1, headdim=8, dstate=16, pad_rows=(1,))


def _padded_rows(state: torch.Tensor, pad: int) -> torch.Tensor:
    """The same pool as a view into rows pad words wider (stride over P: N + pad), the pad
    words filled with a marker."""
    wide = torch.full((*state.shape[:-1], state.shape[-1] + pad), 7.0, dtype=state.dtype, device=state.device)
    wide[..., : state.shape[-1]] = state
    return wide[..., : state.shape[-1]]


def test_padded_state_rows_take_the_strided_path() -> None:
    """A pool whose rows are wider than N (a view) cannot use the compile-time offsets of packed
    rows: the strided path must give the packed pool's bits and leave the pad words alone."""
    kw = make_inputs(PACKED)
    state0 = kw["state"].clone()
    want = run_bits(kw, state0, _cpu_config(PACKED))
    kw["state"] = _padded_rows(state0, 4)
    got = run_bits(kw, state0, _cpu_config(PACKED))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert (kw["state"].as_strided((kw["state"].numel() // 16, 4), (20, 1), 16) == 7.0).all()


@pytest.mark.parametrize("config", ["8,1,slot,evict,ordered", "4,2"])
def test_packed_and_strided_addressing_give_the_same_bits(config: str) -> None:
    """Packed rows only change how the state tile's addresses are formed: the same bits."""
    kw = make_inputs(PACKED)
    state0 = kw["state"].clone()
    want = run_bits(kw, state0, LaunchConfig.parse(config))
    got = run_bits(kw, state0, LaunchConfig.parse(config), variant=Variant(strided_rows=True))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


SLOT0_CASES = [
    Case(batch=4, nheads=2, ngroups=1, headdim=8, dstate=16, extra_slots=4),  # even tiles
    Case(batch=4, nheads=2, ngroups=2, headdim=7, dstate=5, extra_slots=4),  # masked tiles
    Case(batch=4, nheads=2, ngroups=1, headdim=8, dstate=16, extra_slots=4, dst=True),
]


@pytest.mark.parametrize("case", SLOT0_CASES, ids=lambda c: c.id)
def test_unmasked_vectors_keep_the_bits_beside_pad_rows(case: Case) -> None:
    """The vectors (x, dt, D, z, out; B, C) go unmasked where the tile divides: unmasked and
    masked (Variant(masked_vectors=True)) must write the same out and pool, with pad rows beside
    live ones (slot 0 among them, which a pad slot of -1 must never alias), pad rows' out 0 and
    no slot but the live rows' written."""
    kw = make_inputs(case)
    idx = kw["state_batch_indices"]
    kw["state_batch_indices"] = torch.tensor([0, -1, 5, -1], dtype=idx.dtype, device=idx.device)
    if case.dst:
        dst = kw["dst_state_batch_indices"]
        kw["dst_state_batch_indices"] = torch.tensor([0, 6, -1, -1], dtype=dst.dtype, device=dst.device)
    state0 = kw["state"].clone()
    config = LaunchConfig.parse("8,1,slot,evict,ordered" if case.dstate == 16 else "8,1")
    want = run_bits(kw, state0, config)
    got = run_bits(kw, state0, config, variant=Variant(masked_vectors=True))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert (want[0][[1, 3]] == 0).all(), "pad rows' out"
    unwritten = [s for s in range(state0.shape[0]) if s not in ({0} if case.dst else {0, 5})]
    assert torch.equal(want[1][unwritten], bits(state0[unwritten]))
    assert not torch.equal(want[1][0], bits(state0[0])), "slot 0's own row must update it"


def test_all_pad_rows_on_an_empty_pool_read_nothing() -> None:
    """A pool of no slots and a batch of pad rows: nothing may be read (an out-of-bounds load
    would corrupt the interpreter's process, or fault on a GPU), and out is 0."""
    case = Case(batch=2, nheads=2, ngroups=1, headdim=8, dstate=16)
    kw = make_inputs(case)
    kw["state"] = kw["state"][:0]
    idx = kw["state_batch_indices"]
    kw["state_batch_indices"] = torch.full_like(idx, -1)
    out = selective_state_update(**kw, config=LaunchConfig.parse("8,1,slot,evict,ordered"))
    assert (out == 0).all()


def test_empty_batch_is_a_no_op() -> None:
    kw = make_inputs(dataclasses.replace(BASE, batch=1))
    state0 = kw["state"].clone()
    for k in ("x", "dt", "z", "B", "C"):
        kw[k] = kw[k][:0]
    kw["state_batch_indices"] = kw["state_batch_indices"][:0]
    out = selective_state_update(**kw)
    assert out.shape == (0, BASE.nheads, BASE.headdim)
    assert torch.equal(bits(kw["state"]), bits(state0))


def test_cpu_tensors_touch_no_cuda_api(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("a CUDA API was called for CPU tensors")

    kw = make_inputs(BASE, device="cpu")
    monkeypatch.setattr(torch.cuda, "device", boom)
    monkeypatch.setattr(torch.cuda, "current_stream", boom)
    monkeypatch.setattr(torch.cuda, "get_device_name", boom)
    selective_state_update(**kw)  # config=None: the table lookup must not ask CUDA either


# ---------------------------------------------------------------------------------------------
# GPU: real shapes, bit-identity across configs, CUDA graphs


GPU_CASES = [
    Case(
        batch=b,
        nheads=h,
        headdim=p,
        dstate=n,
        ngroups=g,
        state=s,
        tie=tie,
        extra_slots=2 * b + 5,
        pad_rows=pad,
        has_z=z,
    )
    for b, h, p, n, g, s, tie, pad, z in [
        (1, 8, 64, 128, 1, "fp32", True, (), False),
        (33, 16, 64, 128, 1, "fp32", True, (3, 17), False),
        (64, 128, 64, 128, 8, "fp32", True, (), True),
        (17, 32, 128, 128, 4, "fp32", False, (), True),
        (9, 8, 64, 64, 1, "fp32", True, (), False),
        (9, 8, 64, 256, 2, "fp32", True, (0,), True),
        (12, 16, 64, 128, 1, "bf16", True, (), False),
        (12, 16, 128, 128, 2, "fp16", False, (), True),
    ]
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c.id)
def test_gpu_matches_reference(case: Case) -> None:
    run_and_check(case)
    run_and_check(case, upstream_config(case.dstate))


def _configs_the_tables_can_pick(case: Case) -> set[LaunchConfig]:
    sdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[case.state]
    table = load_table(device_key()) or {}
    picks = set(table.get(table_key(case.headdim, case.dstate, sdt), {}).values())
    return picks | {default_config(case.dstate, sdt)}


def _assert_same_bits_for_each(
    kw: dict,
    state0: torch.Tensor,
    configs: list[LaunchConfig],
    want: dict,
    what: str = "",
    variant: Variant | None = None,
) -> None:
    """Each config run from state0 (as variant, where given) writes the bits want[config] holds
    (out, then the pool)."""
    for config in configs:
        got = run_bits(kw, state0, config, variant=variant)
        assert torch.equal(got[0], want[config][0]), f"{config.label}: out{what}"
        assert torch.equal(got[1], want[config][1]), f"{config.label}: state{what}"


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c.id)
def test_gpu_table_configs_are_bit_identical_to_upstream(case: Case) -> None:
    kw = make_inputs(case)
    state0 = kw["state"].clone()
    want = run_bits(kw, state0, upstream_config(case.dstate))
    for config in sorted(_configs_the_tables_can_pick(case), key=lambda c: c.label):
        got = run_bits(kw, state0, config)
        assert torch.equal(got[0], want[0]), f"{config.label}: out differs from upstream"
        assert torch.equal(got[1], want[1]), f"{config.label}: state differs from upstream"


@pytest.mark.gpu
def test_gpu_candidate_space_has_identical_and_different_configs() -> None:
    """The search space must hold configs that break identity (else the tuner's check could
    never fail): (2,8) was seen to differ from (4,4) at dstate 128 on an H200."""
    case = Case(batch=64, nheads=16, headdim=64, dstate=128, ngroups=1, tie=True, extra_slots=64)
    assert LaunchConfig(2, 8) in candidate_configs(64, 128, torch.float32, "basic")
    kw = make_inputs(case)
    state0 = kw["state"].clone()
    want = run_bits(kw, state0, upstream_config(128))
    assert torch.equal(run_bits(kw, state0, LaunchConfig(8, 1))[0], want[0])
    assert not torch.equal(run_bits(kw, state0, LaunchConfig(2, 8))[0], want[0])


@pytest.mark.gpu
def test_gpu_register_cap_reaches_the_compiler_and_keeps_the_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """max_registers is ptxas's maxnreg: the compiled kernel holds to it (the cap is set under
    what the config takes uncapped, so it has to bite), and out and state keep their bits."""
    from ssmdecode.ops.selective_state_update import decode

    kernel = decode._selective_state_update_kernel
    compiled = []
    run = kernel.run
    monkeypatch.setattr(kernel, "run", lambda *a, **k: compiled.append(run(*a, **k)) or compiled[-1])
    case = Case(
        batch=12, nheads=16, headdim=64, dstate=128, ngroups=1, state="bf16", tie=True, extra_slots=29
    )
    kw = make_inputs(case)
    state0 = kw["state"].clone()
    free = LaunchConfig.parse("16,1,slot,evict,ordered")
    want = run_bits(kw, state0, free)
    regs = compiled[-1].n_regs
    cap = (regs - 1) // 8 * 8
    got = run_bits(kw, state0, dataclasses.replace(free, max_registers=cap))
    assert compiled[-1].n_regs <= cap < regs
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(want[0], run_bits(kw, state0, upstream_config(case.dstate))[0])


@pytest.mark.gpu
@pytest.mark.parametrize("state", ["fp32", "bf16"])
def test_gpu_packed_rows_keep_the_bits(state: str) -> None:
    """Compiled for the GPU, the packed-rows addressing (one base, offsets in the instructions)
    writes what the strided one writes, for upstream's config and every config the table can
    pick; and a pool with padded rows (the strided path) gets the same bits."""
    case = Case(
        batch=24,
        nheads=16,
        headdim=64,
        dstate=128,
        ngroups=1,
        state=state,
        tie=True,
        extra_slots=40,
        pad_rows=(5,),
    )
    kw = make_inputs(case)
    state0 = kw["state"].clone()
    configs = sorted(
        _configs_the_tables_can_pick(case) | {upstream_config(case.dstate)}, key=lambda c: c.label
    )
    packed = {c: run_bits(kw, state0, c) for c in configs}
    _assert_same_bits_for_each(kw, state0, configs, packed, variant=Variant(strided_rows=True))
    kw["state"] = _padded_rows(state0, 32)
    _assert_same_bits_for_each(kw, state0, configs, packed, ", padded rows")


@pytest.mark.gpu
@pytest.mark.parametrize("state", ["fp32", "bf16"])
def test_gpu_unmasked_vectors_keep_the_bits(state: str) -> None:
    """Compiled for the GPU, the unmasked vectors write what the masked code writes
    (Variant(masked_vectors=True)), for upstream's config and every config the table can pick,
    with pad rows beside a live slot 0."""
    case = Case(
        batch=24,
        nheads=16,
        headdim=64,
        dstate=128,
        ngroups=1,
        state=state,
        tie=True,
        extra_slots=40,
        pad_rows=(5, 11, 23),
    )
    kw = make_inputs(case)
    idx = kw["state_batch_indices"]
    first = int(idx[0])
    idx[idx == 0] = first  # slot 0 live, in row 0
    idx[0] = 0
    state0 = kw["state"].clone()
    configs = sorted(
        _configs_the_tables_can_pick(case) | {upstream_config(case.dstate)}, key=lambda c: c.label
    )
    want = {c: run_bits(kw, state0, c) for c in configs}
    for config in configs:
        assert (want[config][0][list(case.pad_rows)] == 0).all(), f"{config.label}: pad rows' out"
    _assert_same_bits_for_each(kw, state0, configs, want, variant=Variant(masked_vectors=True))


@pytest.mark.gpu
def test_gpu_cuda_graph_capture_and_replay() -> None:
    case = Case(batch=16, nheads=16, headdim=64, dstate=128, ngroups=1, tie=True, extra_slots=40, has_z=False)
    kw = make_inputs(case)
    state0 = kw["state"].clone()
    eager_out = selective_state_update(**kw).clone()
    eager_state = kw["state"].clone()

    kw["state"].copy_(state0)
    out = torch.empty_like(eager_out)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up (compile) outside the capture
        selective_state_update(**kw, out=out)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        selective_state_update(**kw, out=out)
    kw["state"].copy_(state0)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(bits(out), bits(eager_out))
    assert torch.equal(bits(kw["state"]), bits(eager_state))
