"""Replay decode (T = 1) in the Mamba2 stack and `ssmdecode e2e --replay`, on CPU at a tiny
shape: exact replay keeps the single-token path's greedy tokens and log-probs bit for bit, the
cursors and rings advance once a step, and the timing and greedy reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ssmdecode.bench.step import StepBench, kernel_times
from ssmdecode.cli import main
from ssmdecode.models.mamba2 import Mamba2Dims, Mamba2LM, fast_replay_available, greedy_generate
from ssmdecode.numerics import bits
from ssmdecode.shapes import CPU_SHAPE

DIMS = Mamba2Dims(shape=CPU_SHAPE, d_model=32)
PROMPTS = [[1, 2, 3, 4], [5], [7, 8]]


def test_exact_replay_decode_keeps_the_table_paths_bits() -> None:
    # window 2: a ring of 3 rows, so 4 prompt steps and 5 new tokens flush every slot twice
    runs = {}
    for path in ("table", "replay"):
        lm = Mamba2LM(DIMS, 1, 64, slots=4, device="cpu", seed=0, path=path, window=2)
        runs[path] = (*greedy_generate(lm, PROMPTS, 5), lm.stack)
    (ids_t, lp_t, _), (ids_r, lp_r, stack) = runs["table"], runs["replay"]
    assert torch.equal(ids_t, ids_r) and torch.equal(bits(lp_t), bits(lp_r))
    # steps taken a row: its prompt and 4 generated tokens' steps (the last token is not fed)
    steps = torch.tensor([len(p) + 4 for p in PROMPTS])
    cached = stack.num_cached[1:].cpu()
    assert int(stack.num_cached[0]) == 0  # the null slot is never advanced
    # from zero: one token cached a step, and a flush (cached + 2 > 3) keeps only the new one
    assert torch.equal(cached, (steps - 1) % 2 + 1)


def test_replay_paths_are_checked() -> None:
    with pytest.raises(ValueError, match="path must be one of"):
        Mamba2LM(DIMS, 1, 64, slots=4, device="cpu", path="ring")
    if not fast_replay_available():
        with pytest.raises(ValueError, match="exact=False"):
            Mamba2LM(DIMS, 1, 64, slots=4, device="cpu", path="replay-fast")


def test_step_bench_draws_steady_state_cursors() -> None:
    bench = StepBench.build(DIMS, 1, 3, torch.device("cpu"), seed=0, path="replay", window=4)
    stack = bench.stack
    assert stack.ring == 5 and int(stack.num_cached.min()) >= 1 and int(stack.num_cached.max()) <= 4
    assert int(stack.ring_start.max()) < 5


def test_kernel_times_steps_the_stack() -> None:
    """kernel_times runs its eager steps (each advances the cursors of its slot set) and, on
    the CPU, finds no kernels."""
    bench = StepBench.build(DIMS, 1, 2, torch.device("cpu"), seed=0, path="replay", window=4)
    cached = bench.stack.num_cached.clone()
    assert kernel_times(bench, 2) == {}
    slots = bench.slot_sets[:2].flatten()
    moved = bench.stack.num_cached[slots] != cached[slots]
    assert bool(moved.all())  # from 1 .. 4 cached: one more, or a flush back to 1


@pytest.mark.gpu
def test_kernel_times_on_a_gpu() -> None:
    """On a GPU, kernel_times gives every layer's replay kernel and the step's cursor kernel,
    a launch each a step, each a positive time."""
    dims = Mamba2Dims(shape=CPU_SHAPE, d_model=64)
    bench = StepBench.build(dims, 2, 4, torch.device("cuda"), seed=0, path="replay-fast", window=4)
    times = kernel_times(bench, 3)
    replay = [t for name, t in times.items() if "replay" in name]
    advance = [t for name, t in times.items() if "advance" in name]
    assert sum(len(t) for t in replay) == 2 * 3 and sum(len(t) for t in advance) == 3
    assert all(d > 0 for t in (*replay, *advance) for d in t)


def test_e2e_replay_timing_rows(tmp_path: Path) -> None:
    argv = ["e2e", "--replay", "--config", "table", "--batch", "2", "--layers", "1", "--replay-window", "3"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "e2e.json").read_text())
    want = ["table", "replay exact", *(["replay fast"] if fast_replay_available() else [])]
    assert [r["config"] for r in data["rows"]] == want
    assert all(r["step_us"] > 0 and r["vs_first"] > 0 for r in data["rows"])


def test_e2e_replay_greedy(tmp_path: Path) -> None:
    argv = ["e2e", "--replay", "--greedy", "--layers", "1", "--new-tokens", "4", "--replay-window", "2"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "e2e-replay-greedy.json").read_text())
    table, exact = data["results"]["table"], data["results"]["replay exact"]
    assert table["bit_identical_to_exact_replay"] and table["share_identical_to_exact_replay"] == 1.0
    assert exact["first_divergence"] is None
    # bfloat16 activations: the float32 model sits about 1e-2 of the largest logit off float64
    assert 0 < exact["logits_vs_float64"]["max_rel"] < 0.05
