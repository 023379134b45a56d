"""`ssmdecode verify` end to end on CPU, and the bit comparison under it.

Under the interpreter every launch config computes the same bits, so a mismatch is forced by
wrapping the kernel: one config's output gets one ULP added (perturb_out_of, also used by the
sweep and tune tests).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ssmdecode import cli
from ssmdecode.bench import compare
from ssmdecode.config import CONFIG_DIR_ENV, LaunchConfig, table_key, write_table
from ssmdecode.numerics import bit_diff
from ssmdecode.tools import verify

TINY = ["--headdim", "4", "--dstate", "8"]


def perturb_out_of(monkeypatch: pytest.MonkeyPatch, bad: LaunchConfig, ulps: int = 1) -> None:
    """Make selective_state_update, as the tools call it, add `ulps` ULPs to out[0, 0, 0]
    when run with config `bad`."""
    real = compare.selective_state_update

    def perturbed(*args: object, config: LaunchConfig | None = None, **kwargs: object):
        out = real(*args, config=config, **kwargs)
        if config == bad:
            out.view(torch.int16)[0, 0, 0] += ulps  # out is bf16 in these tests
        return out

    monkeypatch.setattr(compare, "selective_state_update", perturbed)


# --- bit_diff ---------------------------------------------------------------------------------


def test_bit_diff_counts_ulps_across_dtypes_and_signs() -> None:
    a = torch.tensor([1.0, -2.0, 0.0, 3.0])
    b = a.clone()
    assert bit_diff(a, b).identical
    b[0] = torch.nextafter(a[0], torch.tensor(2.0))
    b[1] = torch.nextafter(torch.nextafter(a[1], torch.tensor(-3.0)), torch.tensor(-3.0))
    d = bit_diff(a, b)
    assert (d.identical, d.mismatches, d.max_ulp) == (False, 2, 2)
    assert d.max_abs == pytest.approx(2 * 2.0**-22)
    zero = bit_diff(torch.tensor([0.0]), torch.tensor([-0.0]))  # equal values, other bits
    assert (zero.identical, zero.max_ulp, zero.max_abs) == (False, 0, 0.0)
    h = torch.tensor([1.0], dtype=torch.bfloat16)
    assert bit_diff(h, -h).max_ulp == 2 * h.view(torch.int16).item()
    with pytest.raises(ValueError, match="cannot compare"):
        bit_diff(a, a.double())


# --- the subcommand ---------------------------------------------------------------------------


def test_verify_default_grid_passes(tmp_path: Path, capsys) -> None:
    assert cli.main(["verify", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "verify.json").read_text())
    assert data["failures"] == 0 and data["first_failure"] is None
    assert data["points"] == len(verify.CPU_HEADS) * len(verify.CPU_BATCHES)
    assert data["grid"]["state_dtype"] == "float32" and data["grid"]["dtype"] == "bfloat16"
    point = data["results"][0]
    assert point["result"]["out"]["identical"] and point["result"]["state"]["identical"]
    assert "points pass" in capsys.readouterr().out
    assert (tmp_path / "verify.md").is_file()


def test_verify_exits_1_and_names_the_first_mismatch(tmp_path: Path, monkeypatch, capsys) -> None:
    perturb_out_of(monkeypatch, LaunchConfig(2, 1))
    code = cli.main(
        [
            "verify",
            "--a",
            "2,1",
            "--b",
            "upstream",
            "--heads",
            "3",
            "--batch",
            "2",
            "5",
            *TINY,
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 1
    data = json.loads((tmp_path / "verify.json").read_text())
    assert data["failures"] == 2
    first = data["first_failure"]
    assert (first["heads"], first["batch"], first["a"]) == (3, 2, "(2,1)")
    assert first["result"]["out"]["max_ulp"] == 1 and first["result"]["out"]["mismatches"] == 1
    assert first["result"]["state"]["identical"]
    assert "heads 3 batch 2" in capsys.readouterr().out


def test_verify_catches_a_tampered_table(tmp_path: Path, monkeypatch) -> None:
    """The default check, table vs upstream, through a table that picks a broken config."""
    bad = LaunchConfig(4, 2)
    key = table_key(4, 8, torch.float32)
    write_table("cpu", {key: {1: bad}}, {"made_by": "test"}, tmp_path / "configs")
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path / "configs"))
    assert cli.main(["verify", *TINY, "--heads", "2", "--batch", "1", "--out", str(tmp_path)]) == 0
    perturb_out_of(monkeypatch, bad)
    assert cli.main(["verify", *TINY, "--heads", "2", "--batch", "1", "--out", str(tmp_path)]) == 1
    assert json.loads((tmp_path / "verify.json").read_text())["first_failure"]["a"] == "(4,2)"


def test_verify_stochastic_takes_the_tables_stochastic_entries(tmp_path: Path, monkeypatch) -> None:
    """--rounding stochastic: 'table' names the stochastic key's config, both configs round with
    the point's seed, and a config whose rounded state alone differs fails."""
    bad = LaunchConfig(4, 2)
    keys = {r: table_key(4, 8, torch.float16, rounding=r) for r in ("nearest", "stochastic")}
    entries = {keys["nearest"]: {1: LaunchConfig(4, 1)}, keys["stochastic"]: {1: bad}}
    write_table("cpu", entries, {"made_by": "test"}, tmp_path / "configs")
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path / "configs"))
    argv = ["verify", *TINY, "--state-dtype", "float16", "--heads", "2", "--batch", "1"]
    argv += ["--out", str(tmp_path)]
    assert cli.main([*argv, "--rounding", "stochastic"]) == 0
    data = json.loads((tmp_path / "verify.json").read_text())
    assert data["results"][0]["a"] == "(4,2)" and data["method"]["rounding"] == "stochastic"
    real = verify.selective_state_update

    def rounds_otherwise(*args, config=None, rand_seed=None, **kwargs):
        out = real(*args, config=config, rand_seed=rand_seed, **kwargs)
        if config == bad and rand_seed is not None:
            kwargs["state"].view(torch.int16).view(-1)[0] ^= 1
        return out

    monkeypatch.setattr(verify, "selective_state_update", rounds_otherwise)
    assert cli.main(argv) == 0  # rounding to nearest: the nearest key's (4,1), no seed
    assert cli.main([*argv, "--rounding", "stochastic"]) == 1
    first = json.loads((tmp_path / "verify.json").read_text())["first_failure"]
    assert not first["result"]["state"]["identical"]
    assert cli.main(["verify", *TINY, "--rounding", "stochastic", "--out", str(tmp_path)]) == 2  # fp32


def test_verify_tolerance_mode_against_float64(tmp_path: Path, monkeypatch) -> None:
    args = [
        "verify",
        "--tolerance",
        "--a",
        "4,1",
        "--heads",
        "2",
        "--batch",
        "3",
        *TINY,
        "--state-dtype",
        "bfloat16",
        "--out",
        str(tmp_path),
    ]
    assert cli.main(args) == 0
    data = json.loads((tmp_path / "verify.json").read_text())
    assert data["method"]["tolerances"]["bfloat16"]["rtol"] > 0
    assert data["results"][0]["result"]["state"]["worst_excess"] <= 1
    perturb_out_of(monkeypatch, LaunchConfig(4, 1), ulps=1000)
    assert cli.main(args) == 1


@pytest.mark.gpu
def test_seed_config_is_bit_identical_to_upstream_on_gpu(tmp_path: Path) -> None:
    """The seed's claim, on a slice of its grid: (8,1) == (4,4) bit for bit at dstate 128."""
    assert (
        cli.main(
            [
                "verify",
                "--a",
                "8,1",
                "--b",
                "4,4",
                "--heads",
                "16",
                "128",
                "--batch",
                "1",
                "7",
                "64",
                "512",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
