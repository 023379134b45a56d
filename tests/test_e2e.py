"""`ssmdecode e2e` on CPU (interpreter, tiny shape): the timing report with its traces, the
greedy identity check passing, and failing with exit 1 when one config changes a log-prob."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ssmdecode.bench import step
from ssmdecode.cli import main
from ssmdecode.config import LaunchConfig
from ssmdecode.tools import e2e


def test_kernel_share() -> None:
    """Device time with a matching kernel running over device time with any: kernels that
    overlap (a stream beside, a programmatic-dependent tail) count once."""
    spans = [
        ("ampere_bf16_gemm", 0.0, 60.0),
        ("_selective_state_update_kernel", 60.0, 80.0),
        ("_selective_state_update_kernel", 70.0, 90.0),  # overlapping the one before
        ("_selective_state_update_kernel", 85.0, 86.0),  # inside it
        ("silu", 95.0, 100.0),  # after a gap
    ]
    assert step.busy_us(spans) == 95.0
    assert step.kernel_share(spans, steps=5) == {
        "ssu_share": 30.0 / 95.0,
        "ssu_us_per_step": 6.0,
        "kernel_us_per_step": 19.0,
    }
    assert step.kernel_share([], steps=5) == {
        "ssu_share": None,
        "ssu_us_per_step": None,
        "kernel_us_per_step": None,
    }


def test_timing_report_and_traces(tmp_path: Path) -> None:
    trace = tmp_path / "traces" / "step.json"
    assert main(["e2e", "--batch", "2", "--out", str(tmp_path), "--trace", str(trace)]) == 0
    data = json.loads((tmp_path / "e2e.json").read_text())
    assert [r["config"] for r in data["rows"]] == ["upstream", "8,1", "table"]
    assert data["layers"] == 2 and not data["environment"]["timing_meaningful"]
    for row in data["rows"]:
        assert row["batch"] == 2 and row["step_us"] > 0 and row["ssu_share"] is None
        assert row["tokens_per_s"] == pytest.approx(2 / (row["step_us"] * 1e-6))
        assert "traceEvents" in json.loads(Path(row["trace"]).read_text())
    assert data["rows"][1]["launch"] == "(8,1)" and data["rows"][0]["vs_first"] == 1.0
    assert (tmp_path / "e2e.png").stat().st_size > 0
    assert "mean nothing" in (tmp_path / "e2e.md").read_text()


def test_variant_rows_beside_each_config(tmp_path: Path) -> None:
    assert (
        main(["e2e", "--batch", "2", "--config", "table", "--pdl", "--slot-order", "--out", str(tmp_path)])
        == 0
    )
    rows = json.loads((tmp_path / "e2e.json").read_text())["rows"]
    assert [(r["config"], r["variant"]) for r in rows] == [
        ("table", None),
        ("table+pdl", "pdl"),
        ("table+order", "order"),
    ]
    assert rows[0]["launch"] == rows[1]["launch"] == rows[2]["launch"]


def test_slot_ordered_step_gives_the_same_hidden() -> None:
    from ssmdecode.models.mamba2 import Mamba2DecodeStack, Mamba2Dims
    from ssmdecode.shapes import Shape

    dims = Mamba2Dims(shape=Shape(nheads=2, headdim=4, dstate=16, ngroups=1), d_model=16)
    stack = Mamba2DecodeStack(dims, 1, slots=9, device=torch.device("cpu"), seed=0)
    hidden = torch.randn(3, dims.d_model).to(dims.shape.dtype)
    slots = torch.tensor([5, 1, 7])
    pools = [*stack.ssm_state, *stack.conv_state]
    pools0 = [t.clone() for t in pools]
    want = stack.step(hidden, slots)
    want_pools = [t.clone() for t in pools]
    for t, t0 in zip(pools, pools0, strict=True):
        t.copy_(t0)
    got = stack.step(hidden, slots, slot_ordered=True)
    assert torch.equal(got, want)
    assert all(torch.equal(t, w) for t, w in zip(pools, want_pools, strict=True))


def test_greedy_identical(tmp_path: Path) -> None:
    """upstream (32,4) against (4,1): two programs per row instead of one; same bits."""
    argv = ["e2e", "--greedy", "--greedy-configs", "upstream", "4,1", "--out", str(tmp_path)]
    assert main(argv) == 0
    data = json.loads((tmp_path / "e2e-greedy.json").read_text())
    assert data["identical"] and data["control"]["identical"]
    assert data["tokens_compared"] == 3 * 3
    assert data["prompt_lengths"][0] == 4 and data["prompt_lengths"][-1] == 1
    assert data["configs"]["b"]["launch"] == "(4,1)"


def test_greedy_difference_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config that moves one log-prob by one ULP is caught, and where."""
    real = e2e.greedy_generate

    def nudged(*args: object, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        ids, logprobs = real(*args, **kwargs)
        if args[-1] == LaunchConfig(4, 1):
            logprobs[1, 2] = torch.nextafter(logprobs[1, 2], torch.tensor(0.0))
        return ids, logprobs

    monkeypatch.setattr(e2e, "greedy_generate", nudged)
    argv = ["e2e", "--greedy", "--greedy-configs", "upstream", "4,1", "--out", str(tmp_path)]
    assert main(argv) == 1
    data = json.loads((tmp_path / "e2e-greedy.json").read_text())
    assert data["control"]["identical"] and not data["identical"]
    assert data["result"]["logprob_mismatches"] == 1
    assert data["result"]["token_id_mismatches"] == 0
    assert data["result"]["first_difference"] == [1, 2]


@pytest.mark.gpu
def test_gpu_timing_share_and_traces(tmp_path: Path) -> None:
    """On a GPU: graphs captured, steps timed, and the kernel profile finds the ssmdecode
    kernel among the step's kernels."""
    trace = tmp_path / "step.json"
    argv = ["e2e", "--batch", "8", "--layers", "2", "--out", str(tmp_path), "--trace", str(trace)]
    assert main(argv) == 0
    data = json.loads((tmp_path / "e2e.json").read_text())
    assert data["environment"]["timing_meaningful"]
    for row in data["rows"]:
        assert row["timing"]["timing_meaningful"] and row["step_us"] > 0
        assert 0 < row["ssu_share"] < 1
        assert 0 < row["ssu_us_per_step"] < row["kernel_us_per_step"]
        assert Path(row["trace"]).stat().st_size > 0


@pytest.mark.gpu
def test_gpu_greedy_upstream_vs_table(tmp_path: Path) -> None:
    argv = [
        "e2e",
        "--greedy",
        "--prompts",
        "4",
        "--max-prompt-len",
        "16",
        "--new-tokens",
        "8",
        "--layers",
        "2",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    data = json.loads((tmp_path / "e2e-greedy.json").read_text())
    assert data["identical"] and data["tokens_compared"] == 4 * 8


def test_kernel_spans_leave_out_user_annotations() -> None:
    """record_function ranges show on the GPU timeline as annotations spanning whole eager
    steps; counting them made the kernel total several times the graphed step."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from ssmdecode.bench.step import kernel_spans

    def event(name: str, start: float, us: float, device: DeviceType, annotation: bool = False):
        return SimpleNamespace(
            name=name,
            device_type=device,
            is_user_annotation=annotation,
            time_range=SimpleNamespace(start=start, end=start + us),
        )

    events = [
        event("_selective_state_update_kernel", 0.0, 5.0, DeviceType.CUDA),
        event("gemm", 5.0, 20.0, DeviceType.CUDA),
        event("decode step 0", 0.0, 400.0, DeviceType.CUDA, annotation=True),
        event("aten::mm", 0.0, 30.0, DeviceType.CPU),
    ]
    assert kernel_spans(events) == [("_selective_state_update_kernel", 0.0, 5.0), ("gemm", 5.0, 25.0)]
