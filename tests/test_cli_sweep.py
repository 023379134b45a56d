"""`ssmdecode sweep` end to end on CPU: bits first, then times; a config that is not
bit-identical to upstream is marked and never recommended, even when it is the fastest."""

from __future__ import annotations

import json
from pathlib import Path

from ssmdecode import cli
from ssmdecode.bench.timer import Timing
from ssmdecode.config import LaunchConfig
from ssmdecode.tools import sweep
from test_cli_verify import perturb_out_of

TINY = ["--heads", "2", "--headdim", "4", "--dstate", "8"]


def test_sweep_checks_bits_then_times(tmp_path: Path, capsys) -> None:
    code = cli.main(["sweep", *TINY, "--batch", "1", "2", "--config", "4,1", "2,2,slot",
                     "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "sweep.json").read_text())
    labels = [c["label"] for c in data["configs"]]
    assert labels == ["(32,4)", "(4,1)", "(2,2,slot)"]  # upstream (= default at N 8) first
    assert data["method"]["reference"] == "(32,4)"
    for config in data["configs"]:
        for result in config["batches"].values():
            assert result["identical"] and result["us"] > 0 and "comparison" in result
    assert [s["batch"] for s in data["summary"]] == [1, 2]
    assert all(s["fastest_identical"] in labels and not s["not_identical"]
               for s in data["summary"])
    printed = capsys.readouterr().out
    assert "fastest identical" in printed and "batch 2, us" in printed
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_sweep_never_recommends_a_config_that_changes_bits(tmp_path: Path, monkeypatch) -> None:
    bad = LaunchConfig(2, 2, slot_major=True)
    perturb_out_of(monkeypatch, bad)

    def fake_time(inputs, config: LaunchConfig, device) -> Timing:
        us = 1.0 if config == bad else 10.0 + config.block_m  # bad is by far the fastest
        return Timing(us, (us,), 1, 1, 1, False)

    monkeypatch.setattr(sweep, "time_config", fake_time)
    assert cli.main(["sweep", *TINY, "--batch", "3", "--config", "4,1", "2,2,slot",
                     "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "sweep.json").read_text())
    (summary,) = data["summary"]
    assert summary["not_identical"] == ["(2,2,slot)"]
    assert summary["fastest_identical"] == "(4,1)"
    by_label = {c["label"]: c["batches"]["3"] for c in data["configs"]}
    assert not by_label["(2,2,slot)"]["identical"] and by_label["(2,2,slot)"]["us"] == 1.0
    assert "1.00 ≠" in (tmp_path / "sweep.md").read_text()
