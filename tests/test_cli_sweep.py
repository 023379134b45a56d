"""`ssmdecode sweep` end to end on CPU: bits first, then times; a config that is not
bit-identical to upstream is marked and never recommended, even when it is the fastest."""

from __future__ import annotations

import inspect
import json
import sys
import types
from pathlib import Path

import pytest
import torch

from conftest import Case, make_inputs
from ssmdecode import cli
from ssmdecode.bench import kernels
from ssmdecode.bench.timer import Timing
from ssmdecode.config import LaunchConfig
from ssmdecode.tools import sweep
from test_cli_verify import perturb_out_of

TINY = ["--heads", "2", "--headdim", "4", "--dstate", "8"]


def test_sweep_checks_bits_then_times(tmp_path: Path, capsys) -> None:
    code = cli.main(
        ["sweep", *TINY, "--batch", "1", "2", "--config", "4,1", "2,2,slot", "--out", str(tmp_path)]
    )
    assert code == 0
    data = json.loads((tmp_path / "sweep.json").read_text())
    labels = [c["label"] for c in data["configs"]]
    assert labels == ["(32,4)", "(4,1)", "(2,2,slot)"]  # upstream (= default at N 8) first
    assert data["method"]["reference"] == "(32,4)"
    for config in data["configs"]:
        for result in config["batches"].values():
            assert result["identical"] and result["us"] > 0 and "comparison" in result
    assert [s["batch"] for s in data["summary"]] == [1, 2]
    assert all(s["fastest_identical"] in labels and not s["not_identical"] for s in data["summary"])
    printed = capsys.readouterr().out
    assert "fastest identical" in printed and "batch 2, us" in printed
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_sweep_never_recommends_a_config_that_changes_bits(tmp_path: Path, monkeypatch) -> None:
    bad = LaunchConfig(2, 2, slot_major=True)
    perturb_out_of(monkeypatch, bad)

    def fake_time(inputs, config: LaunchConfig, device, fn=None) -> Timing:
        us = 1.0 if config == bad else 10.0 + config.block_m  # bad is by far the fastest
        return Timing(us, (us,), 1, 1, 1, False)

    monkeypatch.setattr(sweep, "time_config", fake_time)
    assert (
        cli.main(["sweep", *TINY, "--batch", "3", "--config", "4,1", "2,2,slot", "--out", str(tmp_path)]) == 0
    )
    data = json.loads((tmp_path / "sweep.json").read_text())
    (summary,) = data["summary"]
    assert summary["not_identical"] == ["(2,2,slot)"]
    assert summary["fastest_identical"] == "(4,1)"
    by_label = {c["label"]: c["batches"]["3"] for c in data["configs"]}
    assert not by_label["(2,2,slot)"]["identical"] and by_label["(2,2,slot)"]["us"] == 1.0
    assert "1.00 ≠" in (tmp_path / "sweep.md").read_text()


def test_kernel_mamba_ssm_needs_mamba_ssm(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "mamba_ssm", None)  # not importable
    with pytest.raises(SystemExit, match="needs mamba_ssm installed"):
        cli.main(["sweep", *TINY, "--batch", "1", "--kernel", "mamba_ssm", "--out", str(tmp_path)])


def _fake_mamba_kernel(params: list[str], launches: list) -> object:
    """Stands in for mamba_ssm's jitted kernel: records each launch."""

    def fn(*args): ...

    fn.__signature__ = inspect.Signature(
        [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params]
    )

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **kw: launches.append((grid, args, kw))

    kernel = Kernel()
    kernel.fn = fn
    return kernel


MAMBA_PARAMS = (  # mamba_ssm 2.x's kernel, less the heuristics' constexprs
    "state_ptr",
    "x_ptr",
    "dt_ptr",
    "dt_bias_ptr",
    "A_ptr",
    "B_ptr",
    "C_ptr",
    "D_ptr",
    "z_ptr",
    "out_ptr",
    "state_batch_indices_ptr",
    "batch",
    "nheads",
    "dim",
    "dstate",
    "nheads_ngroups_ratio",
    "stride_state_batch",
    "stride_state_head",
    "stride_state_dim",
    "stride_state_dstate",
    "stride_x_batch",
    "stride_x_head",
    "stride_x_dim",
    "stride_dt_batch",
    "stride_dt_head",
    "stride_dt_dim",
    "stride_dt_bias_head",
    "stride_dt_bias_dim",
    "stride_A_head",
    "stride_A_dim",
    "stride_A_dstate",
    "stride_B_batch",
    "stride_B_group",
    "stride_B_dstate",
    "stride_C_batch",
    "stride_C_group",
    "stride_C_dstate",
    "stride_D_head",
    "stride_D_dim",
    "stride_z_batch",
    "stride_z_head",
    "stride_z_dim",
    "stride_out_batch",
    "stride_out_head",
    "stride_out_dim",
    "DT_SOFTPLUS",
    "TIE_HDIM",
    "BLOCK_SIZE_M",
)


def test_mamba_ssm_launcher_passes_the_kernels_arguments(monkeypatch) -> None:
    launches: list = []
    module = types.ModuleType("mamba_ssm.ops.triton.selective_state_update")
    module._selective_scan_update_kernel = _fake_mamba_kernel(MAMBA_PARAMS, launches)
    monkeypatch.setitem(sys.modules, "mamba_ssm.ops.triton.selective_state_update", module)
    fn = kernels.kernel_function("mamba_ssm")
    kw = make_inputs(Case(batch=3, nheads=4, headdim=12, dstate=24, ngroups=2))
    kw.pop("dst_state_batch_indices", None)
    kw.pop("pad_slot_id", None)
    out = torch.empty_like(kw["x"])
    assert fn(**kw, out=out, config=LaunchConfig(8, 2)) is out
    ((grid, args, options),) = launches
    assert grid == (2, 3, 4)  # (row blocks of P 12 by 8, batch, heads): the upstream order
    assert args == () and set(options) == {*MAMBA_PARAMS, "num_warps"}  # every one, by name
    assert options["BLOCK_SIZE_M"] == 8 and options["num_warps"] == 2
    assert options["nheads_ngroups_ratio"] == 2 and options["x_ptr"] is kw["x"]
    assert options["stride_B_group"] == kw["B"].stride(1)
    with pytest.raises(ValueError, match="upstream grid"):
        fn(**kw, out=out, config=LaunchConfig(8, 2, slot_major=True))


def test_sglang_launcher_gives_the_token_dim(monkeypatch) -> None:
    """sglang's (and vLLM's) kernel loops over T tokens: the per-token tensors get T = 1."""
    launches: list = []
    params = [*MAMBA_PARAMS, "T", "pad_slot_id", "stride_x_T", "DISABLE_STATE_UPDATE"]
    module = types.ModuleType("sglang.srt.layers.attention.mamba.ops.mamba_ssm")
    module._selective_scan_update_kernel = _fake_mamba_kernel(params, launches)
    monkeypatch.setitem(sys.modules, "sglang.srt.layers.attention.mamba.ops.mamba_ssm", module)
    kw = make_inputs(Case(batch=3, nheads=4, headdim=12, dstate=24, ngroups=2))
    kw.pop("dst_state_batch_indices", None)
    kw.pop("pad_slot_id", None)
    out = torch.empty_like(kw["x"])
    kernels.kernel_function("sglang")(**kw, out=out, config=LaunchConfig(4, 4))
    ((_, _, options),) = launches
    assert options["T"] == 1 and options["x_ptr"].shape == (3, 1, 4, 12)
    assert options["stride_x_T"] == kw["x"].unsqueeze(1).stride(1)
    assert options["pad_slot_id"] == -1 and options["DISABLE_STATE_UPDATE"] is False


def test_mamba_ssm_of_another_version_is_refused(monkeypatch) -> None:
    module = types.ModuleType("mamba_ssm.ops.triton.selective_state_update")
    module._selective_scan_update_kernel = _fake_mamba_kernel([*MAMBA_PARAMS, "stride_new"], [])
    monkeypatch.setitem(sys.modules, "mamba_ssm.ops.triton.selective_state_update", module)
    fn = kernels.kernel_function("mamba_ssm")
    kw = make_inputs(Case(batch=1, nheads=2, headdim=4, dstate=8, ngroups=1))
    kw.pop("dst_state_batch_indices", None)
    kw.pop("pad_slot_id", None)
    with pytest.raises(ValueError, match="stride_new"):
        fn(**kw, out=torch.empty_like(kw["x"]), config=LaunchConfig(4, 4))
