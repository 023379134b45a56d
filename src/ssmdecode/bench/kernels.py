"""Which kernel the tools measure: ssmdecode's, or for comparison an upstream one.

`--kernel mamba_ssm` and `--kernel sglang` time the Triton kernel of an installed package:
mamba_ssm's `mamba_ssm.ops.triton.selective_state_update._selective_scan_update_kernel` (the
2.x version with heads, groups and state_batch_indices), or sglang's
`sglang.srt.layers.attention.mamba.ops.mamba_ssm._selective_scan_update_kernel` (the copy that
serving engines carry, with a loop over T tokens, pad_slot_id and intermediate states; vLLM's
is the same family). A launcher here passes each kernel parameter by name and takes the block
size and warps from the config being swept (the method's override in the launcher,
docs/measuring.md). Only upstream-grid configs apply (no slot/evict/ordered). This holds the
harness against figures measured on an upstream kernel, and shows what two kernels do
differently at one config.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

import torch
import triton

from ssmdecode import selective_state_update
from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update import ties_head_dim

__all__ = ["KERNELS", "UPSTREAM_MODULES", "kernel_function"]

KERNELS = ("ssmdecode", "mamba_ssm", "sglang")
# The module of each upstream kernel (benchmarks/run_gpu.sh sweep_upstream imports it to see
# whether the kernel is there).
UPSTREAM_MODULES = {
    "mamba_ssm": "mamba_ssm.ops.triton.selective_state_update",
    "sglang": "sglang.srt.layers.attention.mamba.ops.mamba_ssm",
}
_KERNEL = "_selective_scan_update_kernel"


def kernel_function(name: str) -> Callable[..., torch.Tensor]:
    """A callable with selective_state_update's keyword arguments (and config=) that runs the
    named kernel."""
    if name == "ssmdecode":
        return selective_state_update
    if name not in UPSTREAM_MODULES:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)}; got {name!r}")
    return _upstream_launcher(name, UPSTREAM_MODULES[name])


def _upstream_launcher(name: str, module_name: str) -> Callable[..., torch.Tensor]:
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(
            f"--kernel {name} needs {name} installed (import {module_name} failed: {e})"
        ) from None
    kernel = getattr(module, _KERNEL, None)
    if kernel is None:
        raise ValueError(f"{module_name} has no {_KERNEL}")
    params = _param_names(kernel)
    derived = _heuristic_names(kernel)

    def launch(
        *,
        state: torch.Tensor,
        x: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        D: torch.Tensor | None = None,
        z: torch.Tensor | None = None,
        dt_bias: torch.Tensor | None = None,
        dt_softplus: bool = False,
        state_batch_indices: torch.Tensor | None = None,
        out: torch.Tensor,
        config: LaunchConfig,
    ) -> torch.Tensor:
        if not config.upstream_grid:
            raise ValueError(
                f"config {config.label}: the {name} kernel has only the upstream grid (BLOCK_M, warps)"
            )
        values = _argument_values(
            params,
            state,
            x,
            dt,
            A,
            B,
            C,
            D,
            z,
            dt_bias,
            dt_softplus,
            state_batch_indices,
            out,
            config.block_m,
        )
        missing = [p for p in params if p not in values and p not in derived]
        if missing:
            raise ValueError(
                f"{module_name}.{_KERNEL} takes {missing}, which this launcher "
                "does not know: another version of the kernel"
            )
        batch, nheads, headdim = x.shape
        grid = (triton.cdiv(headdim, config.block_m), batch, nheads)
        kernel[grid](**{p: values[p] for p in params if p not in derived}, num_warps=config.num_warps)
        return out

    return launch


def _argument_values(
    params: list[str], state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, idx, out, block_m
) -> dict[str, object]:
    """Every parameter the upstream kernels of this family take, by name, for one call in the
    Mamba2 layout; with a token dim T (sglang, vLLM) the per-token tensors get T = 1."""
    multi_token = "T" in params
    if multi_token:
        x, dt, B, C, out = (t.unsqueeze(1) for t in (x, dt, B, C, out))
        z = z.unsqueeze(1) if z is not None else None

    def strides(prefix: str, t: torch.Tensor | None, dims: tuple[str, ...]) -> dict[str, int]:
        return {f"stride_{prefix}_{d}": (t.stride(i) if t is not None else 0) for i, d in enumerate(dims)}

    per_token = ("batch", "T", "head", "dim") if multi_token else ("batch", "head", "dim")
    groups = ("batch", "T", "group", "dstate") if multi_token else ("batch", "group", "dstate")
    tie_hdim = ties_head_dim(dt, A, dt_bias)
    values: dict[str, object] = {
        "state_ptr": state,
        "x_ptr": x,
        "dt_ptr": dt,
        "dt_bias_ptr": dt_bias,
        "A_ptr": A,
        "B_ptr": B,
        "C_ptr": C,
        "D_ptr": D,
        "z_ptr": z,
        "out_ptr": out,
        "state_batch_indices_ptr": idx,
        "pad_slot_id": -1,
        "intermediate_states_buffer": None,
        "cache_steps": 0,
        "retrieve_parent_token_ptr": None,
        "intermediate_state_indices_ptr": None,
        "batch": x.shape[0],
        "T": 1,
        "nheads": state.shape[1],
        "dim": state.shape[2],
        "dstate": state.shape[3],
        "nheads_ngroups_ratio": state.shape[1] // B.shape[-2],
        **strides("state", state, ("batch", "head", "dim", "dstate")),
        **strides("x", x, per_token),
        **strides("dt", dt, per_token),
        **strides("z", z, per_token),
        **strides("out", out, per_token),
        **strides("B", B, groups),
        **strides("C", C, groups),
        **strides("dt_bias", dt_bias, ("head", "dim")),
        **strides("D", D, ("head", "dim")),
        **strides("A", A, ("head", "dim", "dstate")),
        "stride_retrieve_parent_token_batch": 0,
        "stride_retrieve_parent_token_T": 0,
        "DT_SOFTPLUS": dt_softplus,
        "TIE_HDIM": tie_hdim,
        "BLOCK_SIZE_M": block_m,
        "DISABLE_STATE_UPDATE": False,
    }
    return values


def _param_names(kernel: object) -> list[str]:
    """A Triton kernel's parameter names, through any heuristics/autotune wrappers (each keeps
    the function it wraps in .fn)."""
    names = getattr(kernel, "arg_names", None)
    if names:
        return list(names)
    while hasattr(kernel, "fn"):
        kernel = kernel.fn
    return list(inspect.signature(kernel).parameters) if callable(kernel) else []


def _heuristic_names(kernel: object) -> set[str]:
    """The parameters that @triton.heuristics wrappers compute themselves."""
    names: set[str] = set()
    while hasattr(kernel, "fn"):
        names |= set(getattr(kernel, "values", {}) or {})
        kernel = kernel.fn
    return names
