"""benchmarks/compile_info.py compiles the kernel for sm_90 without a GPU (Triton's own ptxas)
and reports registers: run it as a user would, in a fresh process without the interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_compile_info_reports_registers_per_config() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT / "src")
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compile_info.py"), "--heads", "2",
         "--headdim", "8", "--dstate", "16", "--config", "8,1", "8,1,slot,evict,ordered"],
        capture_output=True, text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("(")]
    assert [r[0] for r in rows] == ["(8,1)", "(8,1,slot,evict,ordered)"]
    assert all(0 < int(r[1]) <= 255 for r in rows)  # registers a thread
