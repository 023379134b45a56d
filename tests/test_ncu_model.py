"""benchmarks/ncu_model.py: the profiled model steps run (on CPU under the interpreter), and an
Nsight Compute raw CSV export is summed per kernel of a step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import ncu_model  # noqa: E402

HEADER = (
    '"ID","Process ID","Kernel Name","Block Size","dram__bytes_read.sum",'
    '"dram__bytes_write.sum","gpu__time_duration.sum"\n'
    '"","","","","byte","byte","nsecond"\n'
)


def _row(i: int, name: str, read_mib: float, write_mib: float, us: float) -> str:
    return (
        f'"{i}","7","{name}","(32, 1, 1)","{int(read_mib * 2**20):,}",'
        f'"{int(write_mib * 2**20):,}","{us * 1000:.0f}"\n'
    )


def test_summarize_averages_a_step_and_splits_the_kernel_from_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "evict.csv"
    rows = []
    for step, extra in enumerate((0.0, 2.0)):  # two steps of three kernels
        rows += [
            _row(3 * step, "gemm", 10, 1, 5),
            _row(3 * step + 1, "_selective_state_update_kernel", 256, 230 + extra, 70),
            _row(3 * step + 2, "gemm", 4, 20 - extra, 3),
        ]
    path.write_text("==PROF== Disconnected\n" + HEADER + "".join(rows))
    kernels = ncu_model.read_kernels(path)
    assert len(kernels) == 6 and kernels[1][1]["dram__bytes_write.sum"] == pytest.approx(230)
    assert kernels[1][1]["gpu__time_duration.sum"] == pytest.approx(70)
    text = ncu_model.summarize([path], steps=2)
    assert "3 kernels a step, mean of 2 steps" in text
    ssu = next(line for line in text.splitlines() if line.strip().startswith("selective"))
    rest = next(line for line in text.splitlines() if line.strip().startswith("the rest"))
    # the columns after each label, one a metric: time, DRAM read, DRAM write, then the L2 ones,
    # which this export leaves out (0)
    metrics = len(ncu_model._METRICS)
    assert ssu.split()[-metrics:] == ["70.00", "256.00", "231.00"] + ["0.00"] * (metrics - 3)
    assert rest.split()[-metrics:] == ["8.00", "14.00", "20.00"] + ["0.00"] * (metrics - 3)
    with pytest.raises(ValueError, match="not 4 steps"):
        ncu_model.summarize([path], steps=4)


def test_run_profiles_model_steps_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        ncu_model.main(["run", "--batch", "2", "--layers", "1", "--steps", "1", "--config", "8,1,slot,evict"])
        == 0
    )
    assert "1 layers, batch 2, config 8,1,slot,evict, 1 steps" in capsys.readouterr().err
