"""`ssmdecode e2e --spec T` under the interpreter: the three ways and the fast replay route's
run and report, and the greedy comparison finds the three identical and reports the fast
route's share of identical tokens (the GPU run checks bits of compiled kernels)."""

from __future__ import annotations

import json
from pathlib import Path

from ssmdecode.cli import main


def test_spec_timing_and_greedy(tmp_path: Path) -> None:
    assert main(["e2e", "--spec", "2", "--window", "2", "--out", str(tmp_path / "t")]) == 0
    rows = json.loads((tmp_path / "t" / "e2e.json").read_text())["rows"]
    assert [r["way"] for r in rows] == [
        "a buffer, upstream",
        "b buffer, table",
        "c replay, table",
        "d replay fast",
    ]
    assert all(r["step_us"] > 0 and 1 <= r["mean_accepted"] <= 2 for r in rows)
    assert (
        main(
            [
                "e2e",
                "--spec",
                "2",
                "--window",
                "2",
                "--greedy",
                "--new-tokens",
                "5",
                "--out",
                str(tmp_path / "g"),
            ]
        )
        == 0
    )
    data = json.loads((tmp_path / "g" / "e2e-greedy.json").read_text())
    results = data["results"]
    assert data["identical"] and list(results)[3] == "d replay fast"
    assert all(r["identical"] and r["bit_compared"] for r in list(results.values())[:3])
    fast = results["d replay fast"]
    assert not fast["bit_compared"] and 0 <= fast["share_ids_identical"] <= 1


def test_spec_timing_in_interleaved_repeats(tmp_path: Path) -> None:
    """--repeats 2: every way of a batch timed in 2 interleaved rounds, the median reported."""
    assert main(["e2e", "--spec", "2", "--window", "2", "--repeats", "2", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "e2e.json").read_text())
    assert all(len(r["rounds_us"]) == 2 and r["step_us"] in r["rounds_us"] for r in data["rows"])
    assert "2 interleaved rounds" in data["method"]["repeats"]
