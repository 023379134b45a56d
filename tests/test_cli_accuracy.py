"""`ssmdecode accuracy` on CPU (interpreter, tiny shape, a few steps): the float64 reference is
the model's layer in float64, the report's fields, fp32 below bf16-RTN, stochastic rounding
reproducible for a seed, and clear errors for bad options.

Program instances (about 7-25 ms each under the interpreter): the CPU defaults run 1 layer and
2 rows (1 teacher-forced, 1 free) of the tiny shape's 2 heads, one program a row and head, so 4
a variant and step."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from ssmdecode.bench.accuracy import (
    DEFAULT_VARIANTS,
    VARIANTS,
    Float64LM,
    decay_summary,
    logged_steps,
    set_decay,
    ssu_step_float64,
)
from ssmdecode.cli import main
from ssmdecode.models.mamba2 import Mamba2Dims, Mamba2LM
from ssmdecode.ops.selective_state_update.checks import DEFAULT_PHILOX_ROUNDS
from ssmdecode.reference import selective_state_update_reference
from ssmdecode.shapes import Shape

# H4-P6-N10-G2: groups < heads, P and N not powers of two.
TINY = Shape(nheads=4, headdim=6, dstate=10, ngroups=2)
RUN_VARIANTS = list(DEFAULT_VARIANTS)
REPLAY_VARIANTS = ["fp32", "fp32-replay", "fp32-replay-fast"]
REPLAY_RATIO = 1.5  # the fast route's bar: its state and logits errors at most 1.5x the exact route's


def _run(tmp_path: Path, name: str, *argv: str) -> dict:
    out = tmp_path / name
    assert main(["accuracy", *argv, "--out", str(out)]) == 0
    return json.loads((out / "accuracy.json").read_text())


def test_ssu_step_float64_is_the_reference() -> None:
    """The vectorized float64 step against selective_state_update_reference (tied head dim)."""
    g = torch.Generator().manual_seed(0)
    H, P, N, G, rows = TINY.nheads, TINY.headdim, TINY.dstate, TINY.ngroups, 3
    state = torch.randn(rows, H, P, N, generator=g, dtype=torch.float64)
    x = torch.randn(rows, H, P, generator=g)
    dt = torch.randn(rows, H, generator=g)
    A, D, dt_bias = -torch.rand(H, generator=g), torch.randn(H, generator=g), torch.randn(H, generator=g)
    B, C = torch.randn(rows, G, N, generator=g), torch.randn(rows, G, N, generator=g)
    dt[0, 0] = 25.0  # past softplus's threshold
    out, new = ssu_step_float64(state, x, dt, A, B, C, D, dt_bias)
    want_out, want_state = selective_state_update_reference(
        state,
        x,
        dt[:, :, None].expand(rows, H, P),
        A[:, None, None].expand(H, P, N),
        B,
        C,
        D=D[:, None].expand(H, P),
        dt_bias=dt_bias[:, None].expand(H, P),
        dt_softplus=True,
    )
    # Two float64 computations of the same step, not a kernel against float64 (TOLERANCES):
    # they differ only in summation order.
    torch.testing.assert_close(out, want_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(new, want_state, rtol=1e-12, atol=1e-12)


def test_float64_lm_is_the_model_in_float64() -> None:
    """With float32 activations and state, the model (kernel under the interpreter) and the
    float64 LM agree to float32's rounding over steps: the same layer, state and conv state."""
    dims = Mamba2Dims(Shape(2, 4, 16, 1, torch.float32, torch.float32), d_model=16)
    lm = Mamba2LM(dims, 1, vocab_size=32, slots=3, device="cpu", seed=1)
    set_decay(lm, "slow", seed=1)
    ref = Float64LM(lm, slots=3)
    slots = torch.tensor([2, 1])
    for tokens in ([3, 7], [5, 5], [0, 31]):
        tokens = torch.tensor(tokens)
        got, want = lm.step(tokens, slots), ref.step(tokens, slots)
        assert want.dtype == torch.float64
        # float32 everywhere at N 16 (a few terms a sum): tighter than TOLERANCES[float32],
        # which allows for the row sums of real state dims and 16-bit inputs
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lm.stack.ssm_state[0].double(), ref.ssm_state[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lm.stack.conv_state[0].double(), ref.conv_state[0], rtol=1e-5, atol=1e-6)


def test_decay_regimes() -> None:
    dims = Mamba2Dims(TINY, d_model=16)
    init = Mamba2LM(dims, 2, vocab_size=8, slots=2, device="cpu", seed=0)
    slow = Mamba2LM(dims, 2, vocab_size=8, slots=2, device="cpu", seed=0)
    A0 = [w.A.clone() for w in init.stack.layers]
    set_decay(init, "init", seed=0)
    set_decay(slow, "slow", seed=0)
    assert all(torch.equal(w.A, a) for w, a in zip(init.stack.layers, A0, strict=True))
    for w in slow.stack.layers:
        assert bool(((-w.A >= 1e-2) & (-w.A <= 1.0)).all()) and w.A.dtype == torch.float32
    rates = decay_summary(slow, steps=4096)["quantiles"]
    assert rates["min"] <= rates["median"] <= rates["max"]
    assert decay_summary(slow, 4096)["quantiles"]["median"] < decay_summary(init, 4096)["quantiles"]["median"]
    with pytest.raises(ValueError, match="decay 'fast'"):
        set_decay(slow, "fast", seed=0)


def test_logged_steps() -> None:
    assert logged_steps(5, 256) == [1, 2, 3, 4, 5]
    steps = logged_steps(4096, 64)
    assert steps[0] == 1 and steps[-1] == 4096 and steps == sorted(set(steps))
    assert 40 <= len(steps) <= 65
    assert logged_steps(10, 1) == [10]


def test_report(tmp_path: Path) -> None:
    """Every variant's curves and summary, fp32 first; float32 activations, so that the state's
    rounding is the only 16-bit one: fp32's error is far below bf16-RTN's at every step."""
    data = _run(tmp_path, "r", "--steps", "4", "--dtype", "float32", "--variants", *RUN_VARIANTS)
    assert list(data["variants"]) == RUN_VARIANTS
    assert data["steps"] == 4 and data["rows"] == 1 and data["steps_logged"] == [1, 2, 3, 4]
    env = data["environment"]
    for key in ("device", "torch", "triton", "python", "date_utc", "git_commit", "ssmdecode"):
        assert key in env
    assert env["command"].startswith("ssmdecode accuracy --steps 4 --dtype float32")
    assert data["model"]["decay"] == "slow" and data["model"]["layers"] == 1
    assert data["model"]["shape"]["dtype"] == "float32"
    assert len(data["float64"]["state_norm"]) == 4 and data["wall_s"] > 0
    for name, v in data["variants"].items():
        assert v["state_dtype"] == str(VARIANTS[name].state_dtype).removeprefix("torch.")
        assert v["rounding"] == ("stochastic" if VARIANTS[name].stochastic else "nearest")
        for curve in v["curves"].values():
            assert len(curve) == 4 and all(c is not None and math.isfinite(c) for c in curve)
        m = v["summary"]
        assert 0 <= m["argmax_differs_from_float64"] <= 1
        assert len(m["free_run_first_departure_from_fp32"]) == 1
        assert len(m["state_rel_error_by_layer_at_last_step"]) == 1
    fp32, bf16 = data["variants"]["fp32"], data["variants"]["bf16-RTN"]
    assert fp32["summary"]["argmax_differs_from_fp32"] == 0
    assert fp32["summary"]["free_run_first_departure_from_fp32"] == [None]
    for a, b in zip(fp32["curves"]["state_rel_error"], bf16["curves"]["state_rel_error"], strict=True):
        assert a < 1e-4 < b
    assert fp32["summary"]["state_rel_error"]["max"] < bf16["summary"]["state_rel_error"]["mean"]
    assert (tmp_path / "r" / "accuracy.png").stat().st_size > 0
    assert "| bf16-RTN |" in (tmp_path / "r" / "accuracy.md").read_text()


def test_stochastic_rounding_is_reproducible(tmp_path: Path) -> None:
    """Two runs of one seed write the same curves; another --sr-seed other ones for the SR
    variants only."""
    argv = ("--steps", "3", "--variants", "bf16-SR", "fp16-SR", "--dtype", "float32")
    a, b = _run(tmp_path, "a", *argv), _run(tmp_path, "b", *argv)
    c = _run(tmp_path, "c", *argv, "--sr-seed", "7")
    assert list(a["variants"]) == ["fp32", "bf16-SR", "fp16-SR"]
    assert a["variants"] == b["variants"] and a["float64"] == b["float64"]
    assert c["variants"]["fp32"] == a["variants"]["fp32"]
    for name in ("bf16-SR", "fp16-SR"):
        curve = a["variants"][name]["curves"]["state_rel_error"]
        assert c["variants"][name]["curves"]["state_rel_error"] != curve
    # more Philox rounds than the default: other random bits for the SR variants, recorded
    d = _run(tmp_path, "d", *argv, "--philox-rounds", "10")
    assert a["method"]["philox_rounds"] == DEFAULT_PHILOX_ROUNDS and d["method"]["philox_rounds"] == 10
    assert d["variants"]["fp32"] == a["variants"]["fp32"]
    assert (
        d["variants"]["bf16-SR"]["curves"]["state_rel_error"]
        != a["variants"]["bf16-SR"]["curves"]["state_rel_error"]
    )
    assert "SR with 10 Philox rounds" in (tmp_path / "d" / "accuracy.md").read_text()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "0"], "--steps must be >= 1"),
        (["--rows", "0"], "--rows must be >= 1"),
        (["--points", "0"], "--points must be >= 1"),
        (["--d-model", "0"], "--d-model must be >= 1"),
        (["--state-dtype", "bfloat16"], "--state-dtype: the variants set"),
        (["--tp", "2"], "--tp cuts a --preset"),
        (["--philox-rounds", "0"], "--philox-rounds is 0; expected 1 to 64"),
    ],
)
def test_bad_options(argv: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=message):
        main(["accuracy", *argv, "--out", str(tmp_path)])
    assert not (tmp_path / "accuracy.json").exists()


@pytest.mark.parametrize("argv", [["--variants", "bf8"], ["--decay", "fast"], ["--steps", "x"]])
def test_bad_choices(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["accuracy", *argv])
    assert e.value.code == 2 and "invalid" in capsys.readouterr().err


def _assert_replay_within_the_bar(data: dict) -> None:
    """The replay variants against fp32's single-token path and each other: the exact route's
    state and logits errors at most REPLAY_RATIO times fp32's (the same recurrence), the fast
    route's at most REPLAY_RATIO times the exact route's, at every logged step's mean and max."""
    v = {name: data["variants"][name]["summary"] for name in REPLAY_VARIANTS}
    for what in ("state_rel_error", "logits_rel_error"):
        for stat in ("mean", "max"):
            fp32, exact, fast = (v[n][what][stat] for n in REPLAY_VARIANTS)
            assert exact <= REPLAY_RATIO * fp32 + 1e-12, (what, stat, exact, fp32)
            assert fast <= REPLAY_RATIO * exact + 1e-12, (what, stat, fast, exact)


def test_replay_decode_variants(tmp_path: Path) -> None:
    """Replay decode by the exact and the fast route (window 16, so the 20 steps cross a
    flush): their state (the checkpoint with the cached tokens replayed, Mamba2DecodeStack.
    state_of) and logits track float64 as fp32's single-token path does."""
    data = _run(tmp_path, "p", "--steps", "20", "--dtype", "float32", "--variants", *REPLAY_VARIANTS)
    assert list(data["variants"]) == REPLAY_VARIANTS
    _assert_replay_within_the_bar(data)
    for name in REPLAY_VARIANTS[1:]:
        assert data["variants"][name]["summary"]["argmax_differs_from_fp32"] == 0


@pytest.mark.gpu
def test_gpu_headline_shape(tmp_path: Path) -> None:
    """On a GPU, the headline shape (16 heads, P 64, N 128) for a few steps, float32
    activations: every variant finite, fp32 far below the 16-bit states."""
    argv = ("--steps", "32", "--layers", "2", "--dtype", "float32", "--variants", *RUN_VARIANTS)
    data = _run(tmp_path, "g", *argv)
    assert data["environment"]["device_key"] != "cpu" and data["rows"] == 8
    summaries = {n: v["summary"]["state_rel_error"] for n, v in data["variants"].items()}
    assert all(s["max"] is not None for s in summaries.values())
    for name in RUN_VARIANTS[1:]:
        assert summaries["fp32"]["max"] < summaries[name]["mean"] / 10


@pytest.mark.gpu
def test_gpu_replay_decode_variants(tmp_path: Path) -> None:
    """On a GPU, replay decode at the headline shape for 64 steps (four windows): the replay
    variants within their bar (_assert_replay_within_the_bar)."""
    argv = ("--steps", "64", "--layers", "2", "--dtype", "float32", "--variants", *REPLAY_VARIANTS)
    _assert_replay_within_the_bar(_run(tmp_path, "gr", *argv))
