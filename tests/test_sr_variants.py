"""benchmarks/sr_variants.py: an exploration run's stochastic-store variants side by side, and
its nvidia-smi samples, from files laid out as the exploration scripts write them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("sr_variants", ROOT / "benchmarks" / "sr_variants.py")
sr_variants = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sr_variants)


def _bench(folder: Path, name: str, times: dict[int, tuple[float, float]]) -> None:
    """A bench.json of the table config: batch -> (round-to-nearest us, stochastic us)."""
    rows = []
    for batch, (rtn, sr) in times.items():
        for config, us in (("table", rtn), ("table sr", sr)):
            rows.append(
                {"config": config, "batch": batch, "us": us, "fraction_of_ceiling": 10.0 / us,
                 "fraction_of_gather_ceiling": 11.0 / us}
            )  # fmt: skip
    (folder / name).mkdir(parents=True)
    (folder / name / "bench.json").write_text(json.dumps({"rows": rows}))


def test_variants_are_held_against_rtn_and_the_base(tmp_path: Path) -> None:
    _bench(tmp_path, "old-float16", {256: (10.0, 11.0)})
    _bench(tmp_path, "mixed-float16", {256: (10.0, 10.45)})
    lines = sr_variants.table(tmp_path, "old", "table")
    assert lines[0].startswith("| variant | state | batch |")
    assert lines[2] == "| old | float16 | 256 | 11.00 | +10.0% | +0.0% | 90.9 | 100.0 |"
    assert lines[3] == "| mixed | float16 | 256 | 10.45 | +4.5% | -5.0% | 95.7 | 105.3 |"
    both = sr_variants.table(tmp_path, "old", ["table", "table"])
    assert both[0].startswith("| config | variant |") and both[2] == "| table " + lines[2]
    assert len(both) == 6


def test_clocks_keep_busy_samples_and_count_the_power_cap(tmp_path: Path) -> None:
    (tmp_path / "smi-old.csv").write_text(
        "timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], temperature.gpu, "
        "clocks_event_reasons.active\n"
        "2026/12/01 15:50:18.594, 345 MHz, 3201 MHz, 78.02 W, 36, 0x0000000000000001\n"
        "2026/12/01 15:50:30.650, 1875 MHz, 3201 MHz, 667.41 W, 52, 0x0000000000000004\n"
        "2026/12/01 15:50:31.650, 1980 MHz, 3201 MHz, 540.00 W, 50, 0x0000000000000000\n"
    )
    (tmp_path / "old-float16-nearest.csv").write_text(  # power.sh's: no header, no memory clock
        "2026/12/01 15:52:42.817, 1965 MHz, 694.05 W, 48, 0x0000000000000004\n"
    )
    lines = sr_variants.clocks(tmp_path)
    assert lines[2] == "| old-float16-nearest | 1 | 1965 | 1965 | 694 | 694 | 100% |"
    assert lines[3] == "| smi-old | 2 | 1980 | 1875 | 667 | 667 | 50% |"


def test_bench_runs_side_by_side_name_their_run_and_configs(tmp_path: Path) -> None:
    _bench(tmp_path, "a", {1024: (10.0, 11.0)})
    data = json.loads((tmp_path / "a" / "bench.json").read_text())
    data["environment"] = {"git_commit": "abc1234", "date_utc": "2026-12-01T17:04:12+00:00"}
    data["shape"] = {"state_dtype": "float16"}
    for row in data["rows"]:
        row["launch"] = "(8,1,regs56)" if row["config"].endswith(" sr") else "(8,1)"
    (tmp_path / "a" / "bench.json").write_text(json.dumps(data))
    lines = sr_variants.benches([tmp_path / "a"], "table")
    assert lines[0].startswith("| run | state | batch | RTN config | SR config |")
    assert lines[2] == (
        "| abc1234 2026-12-01T17:04 | float16 | 1024 | (8,1) | (8,1,regs56) | 10.00 | 11.00 | +10.0% | 100.0 "
        "| 90.9 | 100.0 |"
    )
    with pytest.raises(SystemExit, match=r"no bench\.json"):
        sr_variants.benches([tmp_path / "missing"], "table")


def test_empty_folders_say_so(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"no <variant>-<dtype>/bench\.json"):
        sr_variants.table(tmp_path, "old", "table")
    with pytest.raises(SystemExit, match="no nvidia-smi samples"):
        sr_variants.clocks(tmp_path)
