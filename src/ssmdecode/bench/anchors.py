"""The engines' ReplaySSM kernels, found where they lie (never shipped, never required).

`ssmdecode bench-replay` times ssmdecode's replay beside the kernels the engines run, on the same
tensors in one process. Those kernels are not ssmdecode's to ship: they are local, untracked
copies (the README of the folder says where each came from), found in one folder, the anchors
folder:

    <anchors>/vllm_output_only/vllm/...   vLLM's Triton files of selective_state_update_replayssm_
                                          output_only (T = 1 decode) with import stubs beside
    <anchors>/vllm_spec/vllm/...          vLLM's Triton ReplaySSM spec kernel (T >= 2), likewise
    <anchors>/fi_ckpt/so/<uri>.so         flashinfer's checkpointing_ssu module, one build per
                                          configuration (uri: flashinfer's JIT name of it), loaded
                                          with apache-tvm-ffi (`tvm_ffi` importable)

The anchors folder: the environment variable SSMDECODE_ANCHORS, else the first entry of sys.path
(PYTHONPATH) holding vllm_output_only/, vllm_spec/ or fi_ckpt/, else ./.upstream.
SSMDECODE_FI_CKPT names flashinfer's folder of .so files instead of <anchors>/fi_ckpt/so.

The two vLLM copies are both a package `vllm` (each with its own replayssm_config.py), so each is
imported alone: the vllm modules already imported (an installed vLLM, or another copy) are set
aside, the copy's folder goes first on sys.path, its function is imported, and everything is put
back; the function keeps its own module's globals. Nothing here touches CUDA at import time.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ANCHORS_ENV",
    "FI_CKPT_ENV",
    "Anchor",
    "anchors_dir",
    "flashinfer_uri",
    "load_flashinfer",
    "load_vllm_output_only",
    "load_vllm_spec",
]

ANCHORS_ENV = "SSMDECODE_ANCHORS"
FI_CKPT_ENV = "SSMDECODE_FI_CKPT"
_SUBDIRS = ("vllm_output_only", "vllm_spec", "fi_ckpt")
_VLLM_OPS = "vllm.model_executor.layers.mamba.ops"


@dataclass(frozen=True)
class Anchor:
    """One engine kernel: fn when it loaded, else None and why not (a sentence)."""

    name: str
    fn: Callable[..., object] | None
    why_not: str = ""
    source: str = ""

    @property
    def available(self) -> bool:
        return self.fn is not None


def anchors_dir() -> Path:
    """The anchors folder (see the module docstring); it may not exist."""
    if os.environ.get(ANCHORS_ENV):
        return Path(os.environ[ANCHORS_ENV])
    for entry in sys.path:
        if entry and any((Path(entry) / sub).is_dir() for sub in _SUBDIRS):
            return Path(entry)
    return Path(".upstream")


def _import_alone(root: Path, module: str, name: str) -> Callable[..., object]:
    """module.name imported from the package tree under root alone (see the module docstring)."""
    saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, str(root))
    try:
        return getattr(importlib.import_module(module), name)
    finally:
        sys.path.remove(str(root))
        for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def _load_vllm(sub: str, module: str, name: str) -> Anchor:
    root = anchors_dir() / sub
    label = f"vLLM {name}"
    if not (root / "vllm").is_dir():
        return Anchor(label, None, f"not available: no {root}/vllm (local copy of vLLM's file)")
    try:
        fn = _import_alone(root, f"{_VLLM_OPS}.{module}", name)
    except Exception as e:  # an anchor that does not import is reported, never fatal
        return Anchor(label, None, f"not available: importing it from {root} failed: {e!r}")
    return Anchor(label, fn, source=str(root))


def load_vllm_output_only() -> Anchor:
    """vLLM's selective_state_update_replayssm_output_only (T = 1 decode)."""
    return _load_vllm(
        "vllm_output_only",
        "selective_state_update_replayssm_output_only",
        "selective_state_update_replayssm_output_only",
    )


def load_vllm_spec() -> Anchor:
    """vLLM's Triton selective_state_update_replayssm_spec (verify, T >= 2)."""
    return _load_vllm(
        "vllm_spec", "selective_state_update_replayssm_spec", "selective_state_update_replayssm_spec"
    )


def flashinfer_uri(
    tokens: int, window: int, headdim: int, dstate: int, heads_per_group: int, ngroups: int
) -> str:
    """flashinfer's JIT name of the checkpointing_ssu module for a float32 state, bfloat16
    x/B/C and dt, float32 D, dt_bias and A, int32 slots, no state scale, no Philox, no PDL."""
    return (
        "checkpointing_ssu_s_f32_i_bf16_dt_bf16_w_f32_a_f32_si_i32_"
        f"d_{headdim}_ds_{dstate}_np_{tokens}_mw_{window}_hpg_{heads_per_group}_ng_{ngroups}"
    )


def load_flashinfer(uri: str) -> Anchor:
    """flashinfer's checkpointing_ssu entry point of the module named uri (its positional
    arguments: those of flashinfer/mamba/checkpointing_ssu.py's module call)."""
    folder = Path(os.environ.get(FI_CKPT_ENV) or anchors_dir() / "fi_ckpt" / "so")
    label = "flashinfer checkpointing_ssu"
    path = folder / f"{uri}.so"
    if not path.is_file():
        return Anchor(label, None, f"not available: no {path} (build it: the anchors' README)")
    try:
        import tvm_ffi  # apache-tvm-ffi, the loader flashinfer's JIT modules are built for
    except ImportError as e:
        return Anchor(label, None, f"not available: tvm_ffi does not import ({e})")
    try:
        fn = tvm_ffi.load_module(str(path)).checkpointing_ssu
    except Exception as e:
        return Anchor(label, None, f"not available: loading {path} failed: {e!r}")
    return Anchor(label, fn, source=str(path))
