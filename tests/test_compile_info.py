"""benchmarks/compile_info.py compiles the kernel for sm_90 without a GPU (Triton's own ptxas)
and reports registers: run it as a user would, in a fresh process without the interpreter."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _compile_info_rows(*argv: str) -> list[list[str]]:
    """benchmarks/compile_info.py run as a user would (a fresh process, no interpreter): its
    table rows, one a config, split into columns."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT / "src")
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compile_info.py"), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return [line.split() for line in result.stdout.splitlines() if line.startswith("(")]


def test_compile_info_reports_registers_per_config() -> None:
    rows = _compile_info_rows(
        "--heads",
        "2",
        "--headdim",
        "8",
        "--dstate",
        "16",
        "--config",
        "8,1",
        "8,1,slot,evict,ordered",
        "8,1,slot,evict,ordered,regs24",
    )
    assert [r[0] for r in rows] == ["(8,1)", "(8,1,slot,evict,ordered)", "(8,1,slot,evict,ordered,regs24)"]
    assert all(0 < int(r[1]) <= 255 for r in rows)  # registers a thread
    assert int(rows[2][1]) <= 24  # the cap reaches ptxas


def test_packed_rows_put_the_state_offsets_in_the_instructions() -> None:
    """With packed state rows the whole tile is stored through one address register (offsets
    folded into the instructions); addressed by its runtime strides, through one per 16-byte
    store. (16,1) at N 128: 16 such stores a thread, plus out's (which ptxas may base on one
    of theirs)."""
    argv = ["--heads", "2", "--headdim", "16", "--dstate", "128", "--config", "16,1,slot,evict,ordered"]
    bases = []
    for extra in ([], ["--strided-rows"]):
        (row,) = _compile_info_rows(*argv, *extra)
        bases.append(int(row[-2]))  # st.addr, before the issue floor
    assert bases[0] == 2 and bases[1] >= 16, bases


def test_replay_issue_floor_counts_the_cached_tokens() -> None:
    """--tokens --mode replay: the issue floor is finite (the window's branches found in the
    SASS) and grows with the window, whose mean cached count it charges, and with the batch."""
    tiny = ["--heads", "2", "--headdim", "8", "--dstate", "16", "--tokens", "2", "--mode", "replay"]
    floors = {}
    for window, batch in ((2, 4096), (6, 4096), (6, 8192)):
        (row,) = _compile_info_rows(
            *tiny, "--window", str(window), "--batch", str(batch), "--config", "4,1,slot,evict,ordered"
        )
        floors[window, batch] = float(row[-1])
    assert all(f > 0 for f in floors.values()), floors  # nan fails too
    assert floors[6, 4096] > floors[2, 4096]
    assert abs(floors[6, 8192] / floors[6, 4096] - 2) < 0.01


def test_stochastic_rounding_fences_its_loads() -> None:
    """--stochastic compiles the call that rounds a 16-bit state stochastically: more
    instructions than rounding to nearest, and the barrier that keeps ptxas from sinking the
    state loads below the first stores (docs/performance.md, "Stochastic rounding's store"),
    which round-to-nearest does not have."""
    argv = ["--heads", "2", "--headdim", "8", "--dstate", "16", "--state-dtype", "bfloat16"]
    argv += ["--config", "8,1,slot,evict,ordered"]
    (nearest,) = _compile_info_rows(*argv)
    (stochastic,) = _compile_info_rows(*argv, "--stochastic")
    bar_sync, sass = 5, 9  # columns: config regs stack smem warps/SM bar.sync shfl ld.v4 cp.async SASS
    assert int(nearest[bar_sync]) == 0 and int(stochastic[bar_sync]) == 1
    assert int(stochastic[sass]) > int(nearest[sass])


def _import_ptx_snapshot() -> ModuleType:
    """benchmarks/ptx_snapshot.py as a module, the environment as it was (the script drops
    TRITON_INTERPRET when it is imported)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    env = dict(os.environ)
    try:
        return importlib.import_module("ptx_snapshot")
    finally:
        os.environ.clear()
        os.environ.update(env)


def test_ptx_snapshot_compares_instructions_not_debug_info(tmp_path: Path) -> None:
    ptx_snapshot = _import_ptx_snapshot()
    body = "\tld.global.v4.f32 {%r1}, [%rd1];\n\tst.global.f32 [%rd2], %r1;"
    a = f".loc 1 2 3\n$L__tmp1:\n{body}\n\t.section\t.debug_abbrev\n.b8 1"
    b = f".loc 1 9 9\n{body}\n$L__tmp7:\n\t.section\t.debug_info\n.b8 2"
    assert ptx_snapshot.instructions(a) == ptx_snapshot.instructions(b) == body.splitlines()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "k.ptx").write_text(body)
    (tmp_path / "b" / "k.ptx").write_text(body)
    assert ptx_snapshot.compare(tmp_path / "a", tmp_path / "b") == 0
    (tmp_path / "b" / "k.ptx").write_text(body.replace("v4", "v2"))
    assert ptx_snapshot.compare(tmp_path / "a", tmp_path / "b") == 1


def test_ptx_snapshot_compares_a_snapshot_with_digests(tmp_path: Path) -> None:
    """The committed reference is a digest file (benchmarks/ptx_reference.json): a snapshot is
    compared with it by SHA-256, file by file, under the Triton version it names."""
    ptx_snapshot = _import_ptx_snapshot()
    for name, body in (("a", "\tret;"), ("b", "\tret;"), ("c", "\texit;")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "k.ptx").write_text(body)
    assert ptx_snapshot.digest(tmp_path / "a", tmp_path / "a.json") == 0
    assert ptx_snapshot.compare(tmp_path / "a.json", tmp_path / "b") == 0
    assert ptx_snapshot.compare(tmp_path / "c", tmp_path / "a.json") == 1
    (tmp_path / "b" / "more.ptx").write_text("\tret;")
    assert ptx_snapshot.compare(tmp_path / "a.json", tmp_path / "b") == 1
    reference = json.loads((ROOT / "benchmarks" / "ptx_reference.json").read_text())
    # the matrix's files: the three kernels' 225, and at least the fast route's (fast-*)
    assert reference["target"] == "sm_90" and len(reference["files"]) >= 225
    assert any(name.startswith("fast-") for name in reference["files"])
