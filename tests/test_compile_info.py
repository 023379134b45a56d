"""benchmarks/compile_info.py compiles the kernel for sm_90 without a GPU (Triton's own ptxas)
and reports registers: run it as a user would, in a fresh process without the interpreter.

Every compile_info run of this module goes through one such process (COMPILE_RUNS: the script's
main once per command line), so torch and Triton load once, not once a run: with a warm Triton
cache, loading them is most of what a run costs.

Compiler output is held to bounds, not to exact counts: how many address registers or barriers
ptxas emits may move with a Triton (ptxas) release without the kernel changing. The exact
instructions are pinned by the GPU run's `ptx` stage (benchmarks/run_gpu.sh ptx: every PTX file
of benchmarks/ptx_snapshot.py's matrix against the digests of benchmarks/ptx_reference.json,
under the Triton version they name).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent

_TINY = ["--heads", "2", "--headdim", "8", "--dstate", "16"]
_PACKED = ["--heads", "2", "--headdim", "16", "--dstate", "128", "--config", "16,1,slot,evict,ordered"]
_REPLAY = [*_TINY, "--tokens", "2", "--mode", "replay", "--config", "4,1,slot,evict,ordered"]
_ROUNDING = [*_TINY, "--state-dtype", "bfloat16", "--config", "8,1,slot,evict,ordered"]
# name -> the command line of one compile_info run
COMPILE_RUNS = {
    "registers": [*_TINY, "--config", "8,1", "8,1,slot,evict,ordered", "8,1,slot,evict,ordered,regs24"],
    "packed": _PACKED,
    "strided": [*_PACKED, "--strided-rows"],
    "replay-w2": [*_REPLAY, "--window", "2", "--batch", "4096"],
    "replay-w6": [*_REPLAY, "--window", "6", "--batch", "4096"],
    "replay-w6-b8192": [*_REPLAY, "--window", "6", "--batch", "8192"],
    "fast-t4": [
        *["--heads", "2", "--headdim", "16", "--dstate", "128", "--tokens", "4", "--mode", "replay"],
        *["--window", "16", "--fast", "--batch", "16", "--config", "16,1,slot,evict"],
    ],
    "nearest": _ROUNDING,
    "stochastic": [*_ROUNDING, "--stochastic"],
}
_MARK = "=== compile_info run "
# Runs compile_info's main once per command line, in one process, each run's output after a mark.
_DRIVER = f"""
import json, sys
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
import compile_info
for name, argv in json.loads(sys.argv[1]).items():
    print({_MARK!r} + name, flush=True)
    sys.argv = ["compile_info.py", *argv]
    assert compile_info.main() == 0, name
"""


def _uninterpreted(code: str, *args: str, timeout: int) -> str:
    """The stdout of `python -c code args` in a fresh process without the interpreter (as a user
    runs benchmarks/compile_info.py), ssmdecode from this tree; it must exit 0."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT / "src")
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.fixture(scope="module")
def compiled() -> dict[str, list[list[str]]]:
    """Every run of COMPILE_RUNS in one fresh process without the interpreter, as a user would
    run the script: name -> its table rows, one a config, split into columns."""
    stdout = _uninterpreted(_DRIVER, json.dumps(COMPILE_RUNS), timeout=600)
    rows: dict[str, list[list[str]]] = {}
    for line in stdout.splitlines():
        if line.startswith(_MARK):
            rows[line.removeprefix(_MARK)] = []
        elif line.startswith("("):
            rows[next(reversed(rows))].append(line.split())
    assert rows.keys() == COMPILE_RUNS.keys(), stdout[-2000:]
    return rows


def test_compile_info_reports_registers_per_config(compiled: dict[str, list[list[str]]]) -> None:
    rows = compiled["registers"]
    assert [r[0] for r in rows] == ["(8,1)", "(8,1,slot,evict,ordered)", "(8,1,slot,evict,ordered,regs24)"]
    assert all(0 < int(r[1]) <= 255 for r in rows)  # registers a thread
    assert int(rows[2][1]) <= 24  # the cap reaches ptxas


def test_packed_rows_put_the_state_offsets_in_the_instructions(compiled: dict[str, list[list[str]]]) -> None:
    """With packed state rows the whole tile is stored through one address register (offsets
    folded into the instructions); addressed by its runtime strides, through one per 16-byte
    store. (16,1) at N 128: 16 such stores a thread, plus out's (which ptxas may base on one
    of theirs). Bounds, not counts: packed rows take a few registers (2 under Triton 3.6: the
    tile's and out's), strided rows one a store; the exact instructions are the ptx stage's."""
    (packed,), (strided,) = compiled["packed"], compiled["strided"]
    bases = [int(packed[-2]), int(strided[-2])]  # st.addr, before the issue floor
    assert bases[0] <= 4 < 16 <= bases[1], bases


def test_replay_issue_floor_counts_the_cached_tokens(compiled: dict[str, list[list[str]]]) -> None:
    """--tokens --mode replay: the issue floor is finite (the window's branches found in the
    SASS) and grows with the window, whose mean cached count it charges, and with the batch."""
    floors = {
        name: float(row[-1])
        for name in ("replay-w2", "replay-w6", "replay-w6-b8192")
        for row in compiled[name]
    }
    assert all(f > 0 for f in floors.values()), floors  # nan fails too
    assert floors["replay-w6"] > floors["replay-w2"]
    assert abs(floors["replay-w6-b8192"] / floors["replay-w6"] - 2) < 0.01


def test_stochastic_rounding_fences_its_loads(compiled: dict[str, list[list[str]]]) -> None:
    """--stochastic compiles the call that rounds a 16-bit state stochastically: more
    instructions than rounding to nearest, and the barrier that keeps ptxas from sinking the
    state loads below the first stores (docs/performance.md, "Stochastic rounding's store"),
    which round-to-nearest does not need. Bounds, not counts: at least one barrier, more than
    round-to-nearest's (one and none under Triton 3.6; the exact instructions are the ptx
    stage's)."""
    (nearest,), (stochastic,) = compiled["nearest"], compiled["stochastic"]
    bar_sync, sass = 5, 9  # columns: config regs stack smem warps/SM bar.sync shfl ld.v4 cp.async SASS
    assert int(stochastic[bar_sync]) >= 1 and int(stochastic[bar_sync]) > int(nearest[bar_sync])
    assert int(stochastic[sass]) > int(nearest[sass])


def test_fast_verify_step_reduces_in_registers(compiled: dict[str, list[list[str]]]) -> None:
    """The fast route's draft-by-draft verify step (T = 4, N 128, the precomputed Grams) with its
    chunked state tile (replay_fast.CHUNK) and the ring's x stride at run time
    (replay_fast._ring_lanes_kernel): a thread holds a row's chunks and its rows' ring tokens, so
    the T row sums and weighted ring sums add mostly in registers. Bounds, not counts: 94
    shuffles under Triton 3.6, against 276 without the run-time stride, 366 without the chunks
    and 580 without either (docs/performance.md, "Step 5")."""
    (row,) = compiled["fast-t4"]
    shfl = 6  # columns: config regs stack smem warps/SM bar.sync shfl ...
    assert int(row[shfl]) <= 150, row


def test_sass_counts_past_4096_instructions() -> None:
    """compile_info reads every instruction of cuobjdump's listing, those at five-digit addresses
    too: it read four-digit ones only, so a program of over 4096 instructions read as 4096."""
    code = f"""
import sys
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
import compile_info
listing = "\\n".join(f"        /*{{16 * i:04x}}*/                   NOP ;  /* 0x0 */" for i in range(4100))
print(len(compile_info._sass_of(listing)))
"""
    assert int(_uninterpreted(code, timeout=300).split()[-1]) == 4100


def _import_ptx_snapshot() -> ModuleType:
    """benchmarks/ptx_snapshot.py as a module, the environment as it was (the script drops
    TRITON_INTERPRET when it is imported)."""
    # ptx_snapshot's own imports first, under the interpreter: a kernel module first imported
    # with TRITON_INTERPRET dropped would define its kernels for the GPU for the rest of the
    # session (bench.ceiling's streams then failed test_cli_bench_replay.py after this file).
    importlib.import_module("ssmdecode.bench.compile")
    importlib.import_module("ssmdecode.bench.spec")
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


def test_ptx_reference_covers_the_snapshot_matrix() -> None:
    """The committed digests name files of ptx_snapshot's matrix (inputs x configs) and every
    verify call of it (those compile at every config). Not a pinned count: which single-token
    (input, config) pairs compile is the tree's to decide (a config outside the ordered sum's
    range is skipped), and the ptx stage (`ptx_snapshot.py compare benchmarks/ptx_reference.json
    DIR`) fails on any file only one side has."""
    from ssmdecode.config import LaunchConfig

    ptx_snapshot = _import_ptx_snapshot()
    reference = json.loads((ROOT / "benchmarks" / "ptx_reference.json").read_text())
    assert reference["target"] == "sm_90"
    labels = []
    for text in ptx_snapshot.CONFIGS:
        try:  # as write() does: a config this tree does not know is skipped
            labels.append(LaunchConfig.parse(text).label)
        except ValueError:
            continue
    single = {f"{name}_{label}.ptx" for name, _ in ptx_snapshot._inputs() for label in labels}
    spec_labels = [LaunchConfig.parse(text).label for text in ptx_snapshot.SPEC_CONFIGS]
    spec = {f"{name}_{label}.ptx" for name, _, _ in ptx_snapshot._spec_inputs() for label in spec_labels}
    files = set(reference["files"])
    fast = {name for name in files if name.startswith("fast-")}  # the fast replay route's files
    assert fast, "no file of the fast replay route"
    files -= fast
    assert files <= single | spec, sorted(files - single - spec)[:5]
    assert spec <= files, sorted(spec - files)[:5]
    assert files & single, "no single-token file"
