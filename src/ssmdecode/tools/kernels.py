"""Which kernel the tools measure: ssmdecode's, or for comparison the upstream one.

`--kernel mamba_ssm` times the Triton kernel of an installed mamba_ssm (its
`mamba_ssm.ops.triton.selective_state_update._selective_scan_update_kernel`, the version with
heads, groups, state_batch_indices and TIE_HDIM: mamba_ssm 2.x) through a launcher here that
takes the block size and warps from the config being swept, as ../shared/MEASURING.md's
override did. Only upstream-grid configs apply to it (no slot/evict/ordered). It lets a
user hold this harness against the figures measured on the upstream kernel, and see what the
two kernels do differently at the same config.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

import torch
import triton

from ssmdecode import selective_state_update
from ssmdecode.config import LaunchConfig

__all__ = ["KERNELS", "kernel_function"]

KERNELS = ("ssmdecode", "mamba_ssm")
_MAMBA_MODULE = "mamba_ssm.ops.triton.selective_state_update"
_MAMBA_KERNEL = "_selective_scan_update_kernel"
# Parameters the launcher below passes; a kernel without them is another version.
_MAMBA_PARAMS = ("state_batch_indices_ptr", "nheads_ngroups_ratio", "TIE_HDIM", "BLOCK_SIZE_M")


def kernel_function(name: str) -> Callable[..., torch.Tensor]:
    """A callable with selective_state_update's keyword arguments (and config=) that runs the
    named kernel."""
    if name == "ssmdecode":
        return selective_state_update
    if name == "mamba_ssm":
        return _mamba_ssm_launcher()
    raise ValueError(f"kernel must be one of {', '.join(KERNELS)}; got {name!r}")


def _mamba_ssm_launcher() -> Callable[..., torch.Tensor]:
    try:
        module = importlib.import_module(_MAMBA_MODULE)
    except ImportError as e:
        raise ValueError(f"--kernel mamba_ssm needs mamba_ssm installed (import {_MAMBA_MODULE} "
                         f"failed: {e})") from None
    kernel = getattr(module, _MAMBA_KERNEL, None)
    params = _param_names(kernel) if kernel is not None else []
    missing = [p for p in _MAMBA_PARAMS if p not in params]
    if missing:
        raise ValueError(f"{_MAMBA_MODULE}.{_MAMBA_KERNEL} lacks {missing}: this launcher "
                         "knows the mamba_ssm 2.x kernel (heads, groups, state_batch_indices)")

    def launch(*, state: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor,
               B: torch.Tensor, C: torch.Tensor, D: torch.Tensor | None = None,
               z: torch.Tensor | None = None, dt_bias: torch.Tensor | None = None,
               dt_softplus: bool = False, state_batch_indices: torch.Tensor | None = None,
               out: torch.Tensor, config: LaunchConfig) -> torch.Tensor:
        if config.slot_major or config.evict_first or config.ordered_sum:
            raise ValueError(f"config {config.label}: the mamba_ssm kernel has only the "
                             "upstream grid (BLOCK_M, warps)")
        batch, nheads, headdim = x.shape
        dstate = state.shape[-1]
        tie_hdim = (A.stride(-1) == 0 and A.stride(-2) == 0 and dt.stride(-1) == 0
                    and (dt_bias is None or dt_bias.stride(-1) == 0))
        zs = z.stride() if z is not None else (0, 0, 0)
        grid = (triton.cdiv(headdim, config.block_m), batch, nheads)
        kernel[grid](
            state, x, dt, dt_bias, A, B, C, D, z, out, state_batch_indices,
            batch, nheads, headdim, dstate, nheads // B.shape[1],
            *state.stride(), *x.stride(), *dt.stride(),
            *(dt_bias.stride() if dt_bias is not None else (0, 0)),
            *A.stride(), *B.stride(), *C.stride(),
            *(D.stride() if D is not None else (0, 0)), *zs, *out.stride(),
            dt_softplus, tie_hdim, config.block_m,
            num_warps=config.num_warps,
        )
        return out

    return launch


def _param_names(kernel: object) -> list[str]:
    """A Triton kernel's parameter names, through any heuristics/autotune wrappers (each keeps
    the function it wraps in .fn)."""
    names = getattr(kernel, "arg_names", None)
    if names:
        return list(names)
    while hasattr(kernel, "fn"):
        kernel = kernel.fn
    return list(inspect.signature(kernel).parameters) if callable(kernel) else []
