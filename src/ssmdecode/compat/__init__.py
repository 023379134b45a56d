"""Drop-in adapters that take a serving engine's calling convention and run ssmdecode's kernels
instead: for the Triton decode kernel of Mamba (selective_state_update, single-token and verify
steps), and for flashinfer's verify step by replay (checkpointing_ssu).

    ssmdecode.compat.sglang.selective_state_update   # sglang's mamba_ssm.selective_state_update
    ssmdecode.compat.vllm.selective_state_update     # vLLM's mamba_ssm.selective_state_update
    ssmdecode.compat.flashinfer.checkpointing_ssu    # flashinfer's mamba checkpointing_ssu

Each adapter keeps its engine's argument names, order and defaults, its pad / null-slot
sentinel, and its in-place `out` (required and written in place; returned only by
checkpointing_ssu, as flashinfer returns it). The sglang and vLLM adapters keep their engines'
bits (vLLM's kernel computes dA with exp2, sglang's with exp). vLLM's ReplaySSM output-only
decode runs ssmdecode's fast replay route, and flashinfer's checkpointing_ssu the exact one
(exact=False: the fast one): their engines' semantics and float32 accuracy, not their bits
(neither engine's kernel is exact); the exact route writes the per-token recurrence's bits.
Stochastic rounding (sglang's and vLLM's enable_stochastic_rounding, cache_philox_rounds)
follows each engine's rules: fp16 states, the state slots' stores, a fresh seed a call
(`stochastic_rounding`); its random bits are ssmdecode's own, not the engines'
(docs/numerics.md). Arguments of features ssmdecode does not implement yet (flashinfer's
stochastic rounding, int8 / fp8 states, in every adapter) raise NotImplementedError naming the
argument: an adapter never drops an argument that would change what the engine computes. Every
tensor argument is checked to be a tensor (or None where optional) before anything is touched,
and every error names the caller's argument: where an adapter passes an argument on under
ssmdecode's name (flashinfer's prev_num_accepted_tokens is replay's num_cached), its messages
are given the engine's name (`engine_names`). docs/compat.md maps every argument and names the
engine file and version it was read from.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from ssmdecode.ops.selective_state_update.checks import QUANTIZED_DTYPES

__all__: list[str] = []  # the adapters live in the submodules; below, helpers they share

# What sglang's and vLLM's cache_philox_rounds=0 means: Triton's tl.randint default, 10 rounds
# (ssmdecode's own default, DEFAULT_PHILOX_ROUNDS, is 4).
ENGINE_PHILOX_ROUNDS = 10


def stochastic_rounding(
    engine: str, state: torch.Tensor, enable: object, rounds: object
) -> tuple[torch.Tensor | None, int]:
    """(rand_seed, philox_rounds) for ssmdecode's kernels from an engine's
    enable_stochastic_rounding and cache_philox_rounds, with sglang's and vLLM's rules: a bool;
    rounds >= 0, 0 meaning Triton's default of 10; fp16 states only; a fresh seed drawn for
    every call from torch's generator on the state's device (as both engines draw it), so that
    torch.manual_seed makes a run repeatable."""
    where = f"ssmdecode.compat.{engine}"
    if type(enable) is not bool:
        raise TypeError(f"{where}: enable_stochastic_rounding must be a bool, got {type(enable).__name__}")
    if type(rounds) is not int:
        raise TypeError(f"{where}: cache_philox_rounds must be an int, got {type(rounds).__name__}")
    if rounds < 0:
        raise ValueError(f"{where}: cache_philox_rounds must be non-negative, got {rounds}")
    if not enable:
        return None, ENGINE_PHILOX_ROUNDS
    if state.dtype != torch.float16:
        raise ValueError(
            f"{where}: stochastic rounding of the SSM state requires state dtype "
            f"torch.float16 (as {engine}'s kernel), got {state.dtype}; ssmdecode.selective_state_update "
            "takes rand_seed for bfloat16 states too"
        )
    seed = torch.randint(0, 2**32, (1,), device=state.device, dtype=torch.int64)
    return seed, rounds or ENGINE_PHILOX_ROUNDS


def unsupported(engine: str, argument: str, feature: str) -> NotImplementedError:
    """The error an adapter raises for an engine argument that ssmdecode cannot honour yet."""
    return NotImplementedError(
        f"ssmdecode.compat.{engine}: {argument} ({feature}) is not supported by ssmdecode yet; "
        "call the engine's own kernel for this case"
    )


def require_supported_state(engine: str, state: torch.Tensor) -> None:
    """A quantized state (int8 / fp8, which the engines pair with a block scale) is a feature
    ssmdecode does not implement yet: NotImplementedError, in every adapter, before anything is
    read."""
    if state.dtype in QUANTIZED_DTYPES:
        raise unsupported(engine, "state", f"a quantized {state.dtype} state")


@contextmanager
def engine_names(engine: str, names: dict[str, str]) -> Iterator[None]:
    """Inside: a ValueError, TypeError or NotImplementedError raised by ssmdecode's checks gets
    the engine's argument names (names: ssmdecode's name -> the engine's, whole words only) and
    the adapter's prefix, so that it names what the caller passed. The exception itself (its
    type, its traceback) is re-raised, not replaced."""
    where = f"ssmdecode.compat.{engine}: "
    try:
        yield
    except (ValueError, TypeError, NotImplementedError) as err:
        if not err.args or not isinstance(err.args[0], str):
            raise
        message = err.args[0]
        for ours, theirs in names.items():
            message = re.sub(rf"\b{re.escape(ours)}\b", theirs, message)
        if not message.startswith("ssmdecode.compat."):
            message = where + message
        err.args = (message, *err.args[1:])
        raise


def require_tensors(engine: str, optional: tuple[str, ...], **tensors: object) -> None:
    """Each named argument must be a torch.Tensor (or None, for the names in optional): a
    list or a NumPy array raises TypeError naming it, before the adapter reads any of its
    attributes."""
    for name, value in tensors.items():
        if value is None and name in optional:
            continue
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"ssmdecode.compat.{engine}: {name} must be a torch.Tensor, got {type(value).__name__}"
            )


def require_out(engine: str, out: torch.Tensor | None) -> torch.Tensor:
    """The engine's kernel writes into a preallocated `out` and returns nothing; so do we."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(
            f"ssmdecode.compat.{engine}: out is required: the engine's selective_state_update "
            "writes its output in place into a preallocated tensor shaped like x and returns None"
        )
    return out
