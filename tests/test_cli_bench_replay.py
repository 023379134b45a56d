"""`ssmdecode bench-replay` on CPU at a tiny shape, the engines' kernels absent; the anchors'
loader; the float64 reference of the routes against ssmdecode's exact replay."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch

from ssmdecode import cli
from ssmdecode.bench import anchors
from ssmdecode.bench.replay import accuracy_of, make_case, routes_for
from ssmdecode.numerics import FAST_MEAN_RATIO, FAST_OUT_ULPS
from ssmdecode.shapes import Shape

TINY = ["--heads", "2", "--headdim", "8", "--dstate", "16"]


@pytest.fixture
def no_anchors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    empty = tmp_path / "anchors"
    empty.mkdir()
    monkeypatch.setenv(anchors.ANCHORS_ENV, str(empty))
    monkeypatch.delenv(anchors.FI_CKPT_ENV, raising=False)
    return empty


def test_bench_replay_writes_floors_routes_and_accuracy(tmp_path: Path, no_anchors: Path, capsys) -> None:
    out = tmp_path / "out"
    code = cli.main(
        ["bench-replay", *TINY, "--tokens", "1", "2", "--batch", "1", "3", "--window", "4", "--out", str(out)]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "mean nothing" in printed and "### T = 1, steady" in printed and "### T = 2, steady" in printed
    data = json.loads((out / "bench-replay.json").read_text())
    assert data["environment"]["command"].startswith("ssmdecode bench-replay --heads 2")
    assert data["method"]["window"] == 4 and data["method"]["repeats"] == 5
    assert {(f["tokens"], f["batch"]) for f in data["floors"]} == {(1, 1), (1, 3), (2, 1), (2, 3)}
    for f in data["floors"]:
        assert f["floor_us"] > 0 and 0 <= f["flush_fraction"] <= 1
    timed = {(r["tokens"], r["route"]) for r in data["rows"] if "us" in r}
    assert (1, "ssmdecode single-token table") in timed and (1, "ssmdecode replay exact") in timed
    assert (2, "ssmdecode replay exact") in timed
    assert (2, "ssmdecode intermediate-state (sglang buffer, table)") in timed
    anchors_rows = [r for r in data["rows"] if r["kind"] == "anchor"]
    assert anchors_rows and all(not r["available"] and "not available" in r["why_not"] for r in anchors_rows)
    for r in data["rows"]:
        if "accuracy" not in r:
            continue
        acc = r["accuracy"]
        # the interpreter rounds float32 to bfloat16 toward zero: up to 1 ulp here, 0.5 on a GPU
        assert acc["finite"] and acc["out_max_ulps"] <= 1.01, r["route"]
        assert acc["state_max_rel"] is None or acc["state_max_rel"] < 1e-6, r["route"]
        assert acc.get("unflushed_untouched", True), r["route"]
    for name in ("bench-replay.md", "bench-replay-steady-T1.png", "bench-replay-steady-T2.png"):
        assert (out / name).is_file()


@pytest.mark.parametrize("law", ["noflush", "allflush"])
@pytest.mark.parametrize("tokens", [1, 3])
def test_cursor_laws_flush_as_named(law: str, tokens: int) -> None:
    shape = Shape(nheads=2, headdim=8, dstate=16, ngroups=1)
    case = make_case(shape, tokens, 5, 4, law, torch.device("cpu"), 0, rotation=2)
    assert case.flush_fraction() == (1.0 if law == "allflush" else 0.0)
    assert int(case.slot_sets.min()) >= 1  # slot 0 is vLLM's null block


def test_reference_matches_exact_replay_with_float32_inputs(no_anchors: Path) -> None:
    # float32 x/B/C keep the interpreter's bfloat16 rounding out: what is left is the replay's
    # float32 arithmetic against the float64 recurrence, flushing and cached rows alike
    shape = Shape(nheads=4, headdim=8, dstate=16, ngroups=2, dtype=torch.float32)
    case = make_case(shape, 2, 3, 4, "steady", torch.device("cpu"), 3)
    (route,) = [r for r in routes_for(case) if r.name == "ssmdecode replay exact"]
    acc = accuracy_of(case, route)
    assert acc["out_max_ulps"] < 0.1 and (acc["state_max_rel"] is None or acc["state_max_rel"] < 1e-6)


def test_accuracy_starts_from_the_pool_as_made(no_anchors: Path) -> None:
    # every timed call flushes again from the same cursors, which drives a flushing slot toward
    # the flush's fixed point; a route that stores no flush must still read as wrong after them
    shape = Shape(nheads=2, headdim=8, dstate=16, ngroups=1, dtype=torch.float32)
    case = make_case(shape, 2, 2, 4, "allflush", torch.device("cpu"), 5, rotation=1)
    case.A_head.fill_(-8.0)  # with dt' about 1.3, a flush decays the checkpoint by exp(-30) or so:
    case.dt_bias_head.fill_(1.0)  # the fixed point within float32 from the second call on
    (route,) = [r for r in routes_for(case) if r.name == "ssmdecode replay exact"]
    for _ in range(12):  # as the timer's calls do, on the case's own tensors
        route.call(0, route.writes)
    assert accuracy_of(case, route)["state_max_rel"] < 1e-6
    lazy = dataclasses.replace(route, call=lambda i, t: route.call(i, {**t, "state": t["state"].clone()}))
    assert accuracy_of(case, lazy)["state_max_rel"] > 1e-2


def test_vllm_copies_import_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ops = tmp_path / "vllm_output_only" / "vllm" / "model_executor" / "layers" / "mamba" / "ops"
    ops.mkdir(parents=True)
    for d in [ops, *ops.parents][: len(ops.relative_to(tmp_path / "vllm_output_only").parts)]:
        (d / "__init__.py").write_text("")
    (ops / "selective_state_update_replayssm_output_only.py").write_text(
        "def selective_state_update_replayssm_output_only():\n    return 'copy'\n"
    )
    monkeypatch.setenv(anchors.ANCHORS_ENV, str(tmp_path))
    sentinel = object()
    monkeypatch.setitem(sys.modules, "vllm", sentinel)  # an installed vLLM stays as it was
    got = anchors.load_vllm_output_only()
    assert got.available and got.fn() == "copy"
    assert sys.modules["vllm"] is sentinel and str(tmp_path / "vllm_output_only") not in sys.path
    assert not anchors.load_vllm_spec().available


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 4])
def test_gpu_routes_against_float64_at_the_headline_shape(tokens: int) -> None:
    # ssmdecode's exact routes hold float32 accuracy; the anchors, where they load (SSMDECODE_
    # ANCHORS or .upstream), only run and stay within their bfloat16-operand looseness
    from ssmdecode.shapes import HEADLINE, PRESETS, per_rank

    shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
    case = make_case(shape, tokens, 8, 16, "steady", torch.device("cuda"), 0, rotation=2)
    for route in routes_for(case):
        if not route.available:
            continue
        acc = accuracy_of(case, route)
        assert acc["finite"] and not acc["out_nan"], route.name
        if route.kind == "ssmdecode":
            # float32 routes: within the fast route's bar (numerics.out_resolution: a bf16 ulp,
            # floored at float32's summation floor, which near-cancelling outputs reach)
            assert acc["out_max_floored"] <= FAST_OUT_ULPS, route.name
            assert acc["out_mean_ulps"] <= FAST_MEAN_RATIO * acc["bf16_of_float64_mean_ulps"], route.name
            assert acc["state_max_rel"] is None or acc["state_max_rel"] < 1e-5, route.name
        elif route.kind == "anchor":
            assert acc["out_mean_ulps"] < 10, route.name  # their worst elements sit thousands off
            assert acc["state_max_rel"] is None or acc["state_max_rel"] < 0.1, route.name
