"""`ssmdecode tune` end to end on CPU (timings meaningless, logic exercised), and its choice
rule on made-up measurements."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ssmdecode import cli
from ssmdecode.bench.timer import Timing
from ssmdecode.config import LaunchConfig, TableEntry, load_table, load_table_entries, table_key, write_table
from ssmdecode.tools import tune
from ssmdecode.tools.tune import Measured, choose
from test_cli_verify import perturb_out_of

TINY = ["--heads", "2", "--headdim", "4", "--dstate", "8"]
KEY = table_key(4, 8, torch.float32)
UPSTREAM = LaunchConfig(32, 4)  # upstream_config and default_config at dstate 8


def fake_timer(monkeypatch: pytest.MonkeyPatch, us_of: dict[LaunchConfig, float]) -> list[bool]:
    """Replace the tuner's timer: config -> fixed microseconds (10 for any other config).
    Returns the list of slot_ordered flags the tuner timed with."""
    ordered: list[bool] = []

    def fake_time(inputs, config: LaunchConfig, device, fn=None, slot_ordered=False) -> Timing:
        ordered.append(slot_ordered)
        us = us_of.get(config, 10.0)
        return Timing(us, (us,), 1, 1, 1, False)

    monkeypatch.setattr(tune, "time_config", fake_time)
    return ordered


def test_tune_writes_a_table_and_a_report(tmp_path: Path, capsys) -> None:
    code = cli.main(
        [
            "tune",
            *TINY,
            "--batch",
            "1",
            "3",
            "--config",
            "4,1",
            "2,2",
            "--rounds",
            "2",
            "--out-dir",
            str(tmp_path / "cfg"),
            "--out",
            str(tmp_path / "results"),
        ]
    )
    assert code == 0
    table = load_table("cpu", tmp_path / "cfg")
    assert set(table) == {KEY} and set(table[KEY]) == {1, 3}
    raw = json.loads((tmp_path / "cfg" / "selective_state_update" / "cpu.json").read_text())
    assert raw["made_by"].startswith("ssmdecode tune") and raw["timing_meaningful"] is False
    for field in ("device", "date", "torch", "triton"):
        assert raw[field]
    report = json.loads((tmp_path / "results" / "tune.json").read_text())
    assert report["environment"]["timing_meaningful"] is False
    (bucket1, bucket3) = report["keys"][KEY]
    assert bucket1["baseline"] == "(32,4)"
    assert sorted(bucket1["admitted"]) == ["(2,2)", "(32,4)", "(4,1)"]
    assert all(len(v["rounds_us"]) == 2 for v in bucket1["leaders"].values())
    assert LaunchConfig.from_dict(bucket3["choice"]) == table[KEY][3]
    assert "mean nothing" in capsys.readouterr().out


def test_tune_refuses_to_write_a_cpu_table_into_the_package(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--out-dir"):
        cli.main(["tune", *TINY, "--batch", "1", "--out", str(tmp_path)])


def test_tune_admits_only_bit_identical_configs(tmp_path: Path, monkeypatch) -> None:
    bad, good = LaunchConfig(2, 2), LaunchConfig(4, 1)
    perturb_out_of(monkeypatch, bad)
    fake_timer(monkeypatch, {bad: 1.0, good: 5.0})  # bad would win by far
    assert (
        cli.main(
            [
                "tune",
                *TINY,
                "--batch",
                "2",
                "--config",
                "4,1",
                "2,2",
                "--out-dir",
                str(tmp_path),
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert load_table("cpu", tmp_path)[KEY] == {2: good}
    (bucket,) = json.loads((tmp_path / "tune.json").read_text())["keys"][KEY]
    assert list(bucket["rejected"]) == ["(2,2)"]
    assert not bucket["rejected"]["(2,2)"]["out"]["identical"]
    assert "(2,2)" not in bucket["screen_us"]


def test_slot_order_times_calls_with_batch_order(tmp_path: Path, monkeypatch) -> None:
    ordered = fake_timer(monkeypatch, {})
    assert (
        cli.main(
            [
                "tune",
                *TINY,
                "--batch",
                "2",
                "--config",
                "4,1",
                "--slot-order",
                "--out-dir",
                str(tmp_path),
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert ordered and all(ordered)
    assert json.loads((tmp_path / "tune.json").read_text())["method"]["slot_order"] is True
    ordered.clear()
    assert (
        cli.main(
            [
                "tune",
                *TINY,
                "--batch",
                "2",
                "--config",
                "4,1",
                "--out-dir",
                str(tmp_path),
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert ordered and not any(ordered)


def test_stochastic_tune_writes_its_own_key_admitting_by_rounded_bits(tmp_path: Path, monkeypatch) -> None:
    """--rounding stochastic: the key of stochastic calls, timed with a seed, and a config whose
    rounded state alone differs from upstream's (its round-to-nearest bits the same) rejected."""
    f16 = ["--state-dtype", "float16"]
    bad, good = LaunchConfig(2, 2), LaunchConfig(4, 1)
    real = tune.selective_state_update

    def rounds_otherwise(*args, config=None, rand_seed=None, **kwargs):
        out = real(*args, config=config, rand_seed=rand_seed, **kwargs)
        if config == bad and rand_seed is not None:
            kwargs["state"].view(torch.int16).view(-1)[0] ^= 1  # one bit of the pool
        return out

    monkeypatch.setattr(tune, "selective_state_update", rounds_otherwise)
    seeds: list[bool] = []

    def fake_time(inputs, config: LaunchConfig, device, fn=None, slot_ordered=False) -> Timing:
        seeds.append(fn is not None and fn.keywords.get("rand_seed") is not None)
        us = {bad: 1.0, good: 5.0}.get(config, 10.0)  # bad would win by far
        return Timing(us, (us,), 1, 1, 1, False)

    monkeypatch.setattr(tune, "time_config", fake_time)
    argv = ["tune", *TINY, *f16, "--batch", "2", "--config", "4,1", "2,2", "--rounding", "stochastic"]
    assert cli.main([*argv, "--out-dir", str(tmp_path), "--out", str(tmp_path)]) == 0
    sr = table_key(4, 8, torch.float16, rounding="stochastic")
    assert load_table("cpu", tmp_path) == {sr: {2: good}}
    assert seeds and all(seeds)
    report = json.loads((tmp_path / "tune.json").read_text())
    (bucket,) = report["keys"][sr]
    assert list(bucket["rejected"]) == ["(2,2)"] and bucket["rejected"]["(2,2)"]["rounding"] == "stochastic"
    assert not bucket["rejected"]["(2,2)"]["state"]["identical"]
    assert report["method"]["rounding"] == "stochastic"


@pytest.mark.parametrize(
    ("extra", "message"),
    [([], "needs a 16-bit state"), (["--state-dtype", "float16", "--tokens", "2"], "single-token")],
)
def test_stochastic_tune_refuses_what_it_cannot_tune(tmp_path: Path, extra: list[str], message: str) -> None:
    argv = ["tune", *TINY, "--batch", "1", "--rounding", "stochastic", *extra]
    with pytest.raises(SystemExit, match=message):
        cli.main([*argv, "--out-dir", str(tmp_path)])


def test_dense_tune_writes_the_params_dense_key(tmp_path: Path) -> None:
    """tune --tokens --params dense: the verify entries of calls with a dense A, under their
    own key; the tied key is not written."""
    argv = ["tune", *TINY, "--batch", "1", "--tokens", "2", "--mode", "buffer", "--params", "dense"]
    code = cli.main(
        [*argv, "--config", "4,1", "--rounds", "1", "--out-dir", str(tmp_path), "--out", str(tmp_path)]
    )
    assert code == 0
    table = json.loads(next((tmp_path / "selective_state_update").glob("*.json")).read_text())
    assert [k for k in table["entries"]] == [
        "headdim=4 dstate=8 state=float32 mode=buffer tokens=2 params=dense"
    ]
    assert json.loads((tmp_path / "tune.json").read_text())["method"]["params"] == "dense"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--params", "dense"], "--params dense tunes verify calls"),
        (["--params", "dense", "--tokens", "2", "--mode", "replay"], "--params dense tunes verify calls"),
        (["--params", "dense", "--tokens", "2", "--in-model"], "--params dense tunes verify calls"),
        (["--tokens", "2", "--mode", "dst", "--in-model"], "paths are buffer and replay"),
    ],
)
def test_tune_refuses_params_and_in_model_it_cannot_time(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    with pytest.raises(SystemExit, match=message):
        cli.main(["tune", *TINY, "--batch", "1", *extra, "--out-dir", str(tmp_path)])


def test_in_model_verify_tune_times_verify_steps(tmp_path: Path) -> None:
    """tune --tokens --in-model: candidates timed as verify steps of the Mamba2 stack."""
    argv = ["tune", *TINY, "--batch", "1", "--tokens", "2", "--mode", "buffer", "--in-model", "--layers", "1"]
    code = cli.main(
        [*argv, "--config", "4,1", "--rounds", "1", "--out-dir", str(tmp_path), "--out", str(tmp_path)]
    )
    assert code == 0
    assert "verify step" in json.loads((tmp_path / "tune.json").read_text())["method"]["timed"]


def test_tune_groups_shapes_of_one_key_and_keeps_other_keys(tmp_path: Path, monkeypatch) -> None:
    other = table_key(64, 128, torch.float32)
    write_table("cpu", {other: {8: LaunchConfig(8, 1)}}, {"made_by": "earlier"}, tmp_path)
    fake_timer(monkeypatch, {})
    code = cli.main(
        [
            "tune",
            "--preset",
            "nemotron3-super",
            "--preset",
            "codestral-mamba-7b",
            "--tp",
            "8",
            *TINY,
            "--batch",
            "1",
            "--config",
            "4,1",
            "--out-dir",
            str(tmp_path),
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    report = json.loads((tmp_path / "tune.json").read_text())
    assert [s["name"] for s in report["shapes"][KEY]] == ["nemotron3-super/tp8", "codestral-mamba-7b/tp8"]
    assert report["kept_from_existing_table"] == {other: [8]}
    table = load_table("cpu", tmp_path)
    assert table[other] == {8: LaunchConfig(8, 1)} and table[KEY] == {1: UPSTREAM}


# --- the choice rule --------------------------------------------------------------------------

BASE, FAST, OTHER = LaunchConfig(8, 1), LaunchConfig(4, 1), LaunchConfig(16, 2)


def measured(**us: tuple[float, float]) -> dict[LaunchConfig, Measured]:
    configs = {"base": BASE, "fast": FAST, "other": OTHER}
    return {configs[k]: Measured(configs[k], v[0], v[1]) for k, v in us.items()}


def test_choose_keeps_the_baseline_within_noise() -> None:
    m = measured(base=(100.0, 0.0), fast=(98.5, 0.0))
    assert choose(m, BASE, None, noise_floor=0.02)[0] == BASE


def test_choose_takes_a_gain_larger_than_the_noise() -> None:
    m = measured(base=(100.0, 0.0), fast=(95.0, 0.0))
    config, reason = choose(m, BASE, None, noise_floor=0.02)
    assert config == FAST and "beats baseline" in reason


def test_choose_widens_the_noise_to_the_spread_of_the_rounds() -> None:
    m = measured(base=(100.0, 0.06), fast=(95.0, 0.01))
    assert choose(m, BASE, None, noise_floor=0.02)[0] == BASE


def test_choose_keeps_the_previous_buckets_choice_within_noise() -> None:
    m = measured(base=(100.0, 0.0), fast=(90.0, 0.0), other=(91.0, 0.0))
    config, reason = choose(m, BASE, OTHER, noise_floor=0.02)
    assert config == OTHER and "previous bucket" in reason
    m = measured(base=(100.0, 0.0), fast=(90.0, 0.0), other=(95.0, 0.0))
    assert choose(m, BASE, OTHER, noise_floor=0.02)[0] == FAST


def test_measured_noise_is_the_larger_of_rounds_and_repeats() -> None:
    m = Measured.from_rounds(BASE, [(10.0, 0.01), (12.0, 0.0), (11.0, 0.02)])
    assert (m.us, m.spread) == (11.0, pytest.approx(2 / 11))
    m = Measured.from_rounds(BASE, [(10.0, 0.3), (10.0, 0.0)])
    assert m.spread == 0.3


def test_a_tune_split_over_runs_keeps_and_smooths_against_earlier_buckets(
    tmp_path: Path, monkeypatch
) -> None:
    earlier = LaunchConfig(4, 1)
    write_table("cpu", {KEY: {1: earlier}}, {"made_by": "earlier"}, tmp_path)
    # At bucket 2 (2,2) is fastest, but the earlier bucket's (4,1) is within 2% of it.
    fake_timer(monkeypatch, {UPSTREAM: 10.0, earlier: 5.05, LaunchConfig(2, 2): 5.0})
    assert (
        cli.main(
            [
                "tune",
                *TINY,
                "--batch",
                "2",
                "--config",
                "4,1",
                "2,2",
                "--out-dir",
                str(tmp_path),
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert load_table("cpu", tmp_path)[KEY] == {1: earlier, 2: earlier}
    report = json.loads((tmp_path / "tune.json").read_text())
    assert report["kept_from_existing_table"] == {KEY: [1]}
    assert "previous bucket" in report["keys"][KEY][0]["reason"]


def test_each_tuned_bucket_names_its_run_and_kept_entries_keep_theirs(tmp_path: Path, monkeypatch) -> None:
    earlier = {
        "command": "ssmdecode tune --batch 1",
        "date": "2026-11-29T10:00:00+00:00",
        "git_commit": "abc1234",
    }
    write_table("cpu", {KEY: {1: TableEntry(LaunchConfig(4, 1), earlier)}}, {"made_by": "earlier"}, tmp_path)
    fake_timer(monkeypatch, {})
    assert (
        cli.main(
            [
                "tune",
                *TINY,
                "--batch",
                "2",
                "4",
                "--config",
                "4,1",
                "--out-dir",
                str(tmp_path),
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    entries = load_table_entries("cpu", tmp_path)[KEY]
    assert entries[1].tuned_by == earlier
    env = json.loads((tmp_path / "tune.json").read_text())["environment"]
    for bucket in (2, 4):
        assert entries[bucket].tuned_by == {
            "command": env["command"],
            "date": env["date_utc"],
            "git_commit": env["git_commit"],
        }
    assert env["command"].startswith("ssmdecode tune --heads 2")


# --- timing inside a model step ---------------------------------------------------------------


def test_in_model_runs_end_to_end_on_cpu(tmp_path: Path) -> None:
    assert (
        cli.main(
            [
                "tune",
                *TINY,
                "--batch",
                "1",
                "--config",
                "4,1",
                "--rounds",
                "1",
                "--in-model",
                "--layers",
                "1",
                "--out-dir",
                str(tmp_path / "cfg"),
                "--out",
                str(tmp_path / "results"),
            ]
        )
        == 0
    )
    assert set(load_table("cpu", tmp_path / "cfg")[KEY]) == {1}
    report = json.loads((tmp_path / "results" / "tune.json").read_text())
    assert report["method"]["timed"].startswith("a decode step of 1 Mamba2 layers")
    assert report["method"]["noise_floor"] == tune.NOISE_FLOOR[True]


def test_in_model_ranks_by_the_step_not_the_call(tmp_path: Path, monkeypatch) -> None:
    """With --in-model the tuner times StepBench steps (here faked: (2,2) gives the shorter
    step, though its back-to-back call is the slower) and never the bench's call."""
    slow_call, short_step = LaunchConfig(4, 1), LaunchConfig(2, 2)
    fake_timer(monkeypatch, {slow_call: 1.0, short_step: 9.0})
    steps: list[tuple[LaunchConfig, bool]] = []

    def fake_step(bench, config: LaunchConfig, pdl: bool = False, slot_ordered: bool = False) -> Timing:
        steps.append((config, slot_ordered))
        us = {short_step: 100.0}.get(config, 101.0)  # 1%: over the 0.5% floor of a step
        return Timing(us, (us,), 1, 1, 1, False)

    monkeypatch.setattr(tune.StepBench, "time", fake_step)
    monkeypatch.setattr(tune, "time_config", lambda *a, **k: pytest.fail("timed a call"))
    assert (
        cli.main(
            [
                "tune",
                *TINY,
                "--batch",
                "2",
                "--config",
                "4,1",
                "2,2",
                "--in-model",
                "--layers",
                "1",
                "--slot-order",
                "--out-dir",
                str(tmp_path),
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert load_table("cpu", tmp_path)[KEY] == {2: short_step}
    assert steps and all(ordered for _, ordered in steps)
    # the same 1% is noise for a call: the baseline stays
    fake_timer(monkeypatch, {short_step: 100.0, UPSTREAM: 101.0, slow_call: 101.0})
    assert (
        cli.main(
            [
                "tune",
                *TINY,
                "--batch",
                "2",
                "--config",
                "4,1",
                "2,2",
                "--out-dir",
                str(tmp_path),
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert load_table("cpu", tmp_path)[KEY] == {2: UPSTREAM}


def test_in_model_rejects_zero_layers(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--layers must be >= 1"):
        cli.main(
            [
                "tune",
                *TINY,
                "--batch",
                "1",
                "--in-model",
                "--layers",
                "0",
                "--out-dir",
                str(tmp_path),
                "--out",
                str(tmp_path),
            ]
        )


# --- the fast replay route (admitted by accuracy) ---------------------------------------------


def test_fast_replay_route_is_admitted_by_accuracy(tmp_path: Path, monkeypatch) -> None:
    """--mode replay-fast: candidates of 16 rows and more, each admitted by the accuracy bars
    against float64 and two runs' bits (real calls, under the interpreter), timed by the fast
    route's timer (faked here); the table's entries record the accuracy measured."""
    timed: list[LaunchConfig] = []

    def fake_time(spec, config: LaunchConfig, device) -> Timing:
        timed.append(config)
        us = 5.0 if config == LaunchConfig(16, 2, True, True) else 10.0
        return Timing(us, (us,), 1, 1, 1, False)

    monkeypatch.setattr(tune, "_time_fast", fake_time)
    code = cli.main(
        [
            "tune", "--heads", "2", "--headdim", "16", "--dstate", "16", "--batch", "2",
            "--tokens", "1", "--mode", "replay-fast", "--window", "3",
            "--config", "8,4", "16,2,slot,evict", "16,4,slot,evict,ordered", "--rounds", "1",
            "--out-dir", str(tmp_path / "cfg"), "--out", str(tmp_path / "results"),
        ]
    )  # fmt: skip
    assert code == 0
    key = table_key(16, 16, torch.float32, "replay-fast", 1)
    report = json.loads((tmp_path / "results" / "tune.json").read_text())
    (bucket,) = report["keys"][key]
    # 8 rows and the ordered sum left out; the bucket's default (replay_fast_config) added
    assert sorted(bucket["admitted"]) == ["(16,2,slot,evict)", "(16,4,slot,evict)"]
    assert bucket["choice_label"] == "(16,2,slot,evict)" and set(timed) == {
        LaunchConfig(16, 2, True, True),
        LaunchConfig(16, 4, True, True),  # the baseline at batch 2
    }
    entry = load_table_entries("cpu", tmp_path / "cfg")[key][2]
    assert entry.config == LaunchConfig(16, 2, True, True)
    assert entry.accuracy is not None and entry.accuracy["out_ulps"] <= 1.0
    assert entry.accuracy["state_rel"] <= 1e-5


@pytest.mark.parametrize(("mode", "window"), [("replay-fast", 16), ("replay", 8)])
def test_replay_tunes_default_to_their_benches_window(
    tmp_path: Path, monkeypatch, mode: str, window: int
) -> None:
    """Without --window the fast route is tuned at the engines' window (bench-replay's, 16) and
    the exact replay at bench --tokens' (8); the window goes into tune.json's method."""
    seen: list[int] = []

    def fake_time(spec, config: LaunchConfig, device, fn=None) -> Timing:
        seen.append(spec.window)
        return Timing(10.0, (10.0,), 1, 1, 1, False)

    def fake_admit(spec, configs):
        seen.append(spec.window)
        return {c: (True, {"out_ulps": 0.0, "mean_ratio": 1.0, "state_rel": 0.0}) for c in configs}

    monkeypatch.setattr(tune, "_time_fast", fake_time)
    monkeypatch.setattr(tune, "time_spec_config", fake_time)
    monkeypatch.setattr(tune, "admit_fast", fake_admit)
    monkeypatch.setattr(
        tune, "compare_spec_configs", lambda spec, upstream, configs: {c: True for c in configs}
    )
    code = cli.main(
        [
            "tune", "--heads", "2", "--headdim", "16", "--dstate", "16", "--batch", "2",
            "--tokens", "2", "--mode", mode, "--config", "16,2,slot,evict", "--rounds", "1",
            "--out-dir", str(tmp_path / "cfg"), "--out", str(tmp_path / "results"),
        ]
    )  # fmt: skip
    assert code == 0
    assert seen and set(seen) == {window}
    report = json.loads((tmp_path / "results" / "tune.json").read_text())
    assert report["method"]["window"] == window
