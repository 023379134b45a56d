"""`ssmdecode bench` end to end at tiny shapes on CPU, and the CLI around every tool."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ssmdecode import cli
from ssmdecode.tools import bench as bench_tool

TINY = ["--heads", "2", "--headdim", "4", "--dstate", "8"]


def test_bench_writes_json_markdown_and_plot(tmp_path: Path, capsys) -> None:
    code = cli.main(
        ["bench", *TINY, "--batch", "1", "2", "--config", "default", "4,1,slot", "--out", str(tmp_path)]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "mean nothing" in printed and "| default |" in printed
    data = json.loads((tmp_path / "bench.json").read_text())
    env = data["environment"]
    assert env["timing_meaningful"] is False and env["device"] == "cpu"
    assert env["command"].startswith("ssmdecode bench --heads 2")
    for key in ("torch", "triton", "python", "git_commit", "date_utc", "sm_count", "l2_bytes"):
        assert key in env
    assert data["method"]["repeats"] == 5 and data["method"]["cold_l2_factor"] == 3
    assert data["shape"] == {
        "name": "",
        "nheads": 2,
        "headdim": 4,
        "dstate": 8,
        "ngroups": 1,
        "state_dtype": "float32",
        "dtype": "bfloat16",
    }
    assert [(r["config"], r["batch"]) for r in data["rows"]] == [
        ("default", 1),
        ("4,1,slot", 1),
        ("default", 2),
        ("4,1,slot", 2),
    ]
    row = data["rows"][3]
    assert row["launch"] == "(4,1,slot)"
    assert row["bytes_moved"] == 2 * 2 * 2 * 4 * 8 * 4
    assert row["fraction_of_ceiling"] == pytest.approx(row["ceiling_us"] / row["us"])
    assert row["gather_ceiling_us"] == data["gather_ceilings"]["2"]["us"]
    assert row["fraction_of_gather_ceiling"] == pytest.approx(row["gather_ceiling_us"] / row["us"])
    assert set(data["ceilings"]) == set(data["gather_ceilings"]) == {"1", "2"}
    assert data["peak"]["nbytes"] > 0
    assert (tmp_path / "bench.md").read_text().startswith("# bench")
    assert (tmp_path / "bench.png").stat().st_size > 0


def test_bench_of_verify_calls_reports_each_mode_and_replays_bookkeeping(tmp_path: Path) -> None:
    """bench --tokens --mode: a row per mode, T, batch and config; replay's rows carry their
    flushing share and the step's bookkeeping timed alone (part of the step's time), the
    buffer's neither."""
    argv = ["bench", *TINY, "--tokens", "2", "--mode", "buffer", "replay", "--window", "2"]
    code = cli.main([*argv, "--batch", "1", "--config", "4,1", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "bench.json").read_text())
    rows = {r["mode"]: r for r in data["rows"]}
    assert set(rows) == {"buffer", "replay"} and len(data["rows"]) == 2
    assert rows["buffer"]["advance_us"] is None and rows["buffer"]["flush_fraction"] is None
    assert rows["replay"]["advance_us"] > 0 and 0.0 <= rows["replay"]["flush_fraction"] <= 1.0
    assert rows["replay"]["window"] == 2
    md = (tmp_path / "bench.md").read_text()
    assert "### mode replay, T = 2" in md and "of which bookkeeping, us" in md


def test_bench_of_verify_calls_with_the_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench --tokens --gate: the calls pass z (checked against float64 first), the rows say so."""
    from ssmdecode.bench import spec

    seen = []
    make = spec.make_spec_inputs

    def spy(*a: object, **k: object) -> object:
        inputs = make(*a, **k)
        seen.append(inputs.base.z is not None)
        return inputs

    monkeypatch.setattr(bench_tool, "make_spec_inputs", spy)
    argv = ["bench", *TINY, "--tokens", "2", "--mode", "dst", "--gate", "--batch", "1", "--config", "4,1"]
    assert cli.main([*argv, "--out", str(tmp_path)]) == 0
    assert seen and all(seen)
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert rows and all(r["gate"] for r in rows)


def test_bench_of_verify_calls_takes_both_params_layouts_in_interleaved_rounds(tmp_path: Path) -> None:
    """bench --tokens --params tied dense --rounds 2: a row per layout and config, each the
    median of its 2 interleaved rounds; the dense rows ran a dense A; replay refuses dense."""
    argv = ["bench", *TINY, "--tokens", "2", "--mode", "buffer", "--params", "tied", "dense", "--rounds", "2"]
    code = cli.main([*argv, "--batch", "1", "--config", "4,1", "table", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "bench.json").read_text())
    assert sorted((r["params"], r["config"]) for r in data["rows"]) == [
        ("dense", "4,1"),
        ("dense", "table"),
        ("tied", "4,1"),
        ("tied", "table"),
    ]
    assert all(len(r["rounds_us"]) == 2 and r["us"] in r["rounds_us"] for r in data["rows"])
    assert "2 interleaved rounds" in data["method"]["rounds"]
    assert "### mode buffer, T = 2, params dense" in (tmp_path / "bench.md").read_text()
    with pytest.raises(SystemExit, match="replay takes dt, A and dt_bias tied"):
        cli.main(
            ["bench", *TINY, "--tokens", "2", "--mode", "replay", "--params", "dense", "--out", str(tmp_path)]
        )


def test_bench_times_both_roundings_in_one_run(tmp_path: Path, capsys) -> None:
    args = ["bench", *TINY, "--state-dtype", "bfloat16", "--batch", "1", "--config", "default"]
    code = cli.main([*args, "--rounding", "nearest", "stochastic", "--out", str(tmp_path)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "ok   default (" in printed and ") stochastic: vs float64 reference" in printed
    data = json.loads((tmp_path / "bench.json").read_text())
    assert [(r["config"], r["rounding"]) for r in data["rows"]] == [
        ("default", "nearest"),
        ("default sr", "stochastic"),
    ]
    assert data["method"]["rounding"] == ["nearest", "stochastic"]
    assert cli.main(["bench", *TINY, "--rounding", "stochastic"]) == 2
    assert "needs a 16-bit state" in capsys.readouterr().out


def test_bench_preset_with_tp_and_overrides(tmp_path: Path) -> None:
    code = cli.main(
        [
            "bench",
            "--preset",
            "nemotron3-super",
            "--tp",
            "8",
            *TINY,
            "--state-dtype",
            "bf16",
            "--batch",
            "1",
            "--config",
            "upstream",
            "--pdl",
            "--slot-order",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["method"]["pdl"] is True and "pdl=True" in (tmp_path / "bench.md").read_text()
    assert data["method"]["slot_order"] is True
    shape = data["shape"]
    assert shape["name"] == "nemotron3-super/tp8"
    assert (shape["nheads"], shape["ngroups"], shape["state_dtype"]) == (2, 1, "bfloat16")


@pytest.mark.parametrize(
    "argv",
    [["bench", "--config", "3,1"], ["bench", "--config", "8,1,fast"], ["bench", "--tp", "x"], ["nosuchtool"]],
    ids=["not-power-of-two", "unknown-flag", "bad-int", "unknown-subcommand"],
)
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2


def test_uneven_tp_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="does not divide"):
        cli.main(["bench", "--preset", "mamba2-2.7b", "--tp", "3", "--out", str(tmp_path)])


def test_missing_tool_module_is_reported(monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli, "SUBCOMMANDS", (*cli.SUBCOMMANDS, "notyetwritten"))
    assert cli.main(["notyetwritten"]) == 2
    assert "not available" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter switch is for CPU only")
def test_python_dash_m_runs_on_cpu_without_setting_the_interpreter(tmp_path: Path) -> None:
    """The CLI itself switches Triton to its interpreter when there is no GPU."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ssmdecode",
            "bench",
            *TINY,
            "--batch",
            "1",
            "--config",
            "upstream",
            "--out",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "bench.json").is_file()


def test_tp_without_a_preset_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--tp"):
        cli.main(["bench", "--tp", "8", "--out", str(tmp_path)])


@pytest.mark.gpu
def test_bench_on_gpu_follows_the_method(tmp_path: Path) -> None:
    """The headline shape: cold rotation over >= 3x L2, and a kernel within sight of its
    same-bytes ceiling (docs/measuring.md: 84-92% for the best upstream config on an H200)."""
    assert (
        cli.main(["bench", "--batch", "8", "128", "--config", "upstream", "default", "--out", str(tmp_path)])
        == 0
    )
    data = json.loads((tmp_path / "bench.json").read_text())
    env = data["environment"]
    assert env["timing_meaningful"] and env["l2_bytes"] > 0
    for row in data["rows"]:
        timing = row["timing"]
        assert timing["timing_meaningful"] and timing["calls_per_graph"] >= 20
        assert timing["rotation"] * row["bytes_moved"] / 2 >= 3 * env["l2_bytes"]
        assert 0.3 < row["fraction_of_ceiling"] < 1.1
        # the gather ceiling streams the same slots without math: no slower than the flat
        # one by more than the slots' places cost (under 10% on an H200), and not beaten
        assert 0.9 < row["ceiling_us"] / row["gather_ceiling_us"] < 1.05
        assert row["fraction_of_gather_ceiling"] < 1.05
    assert data["peak"]["tbps"] > 1.0
