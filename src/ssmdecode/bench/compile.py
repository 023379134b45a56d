"""Compiling the kernel a call launches for a GPU target, without a GPU: what
benchmarks/compile_info.py reports registers and instructions of, and benchmarks/ptx_snapshot.py
compares PTX of. The call is prepared by the library exactly as selective_state_update would
launch it (decode.prepare, on CPU tensors, nothing run), then each argument is typed and
specialized as Triton's launcher does (pointers 16-byte aligned, ints equal to 1 constant, ints
divisible by 16 marked so) and the kernel compiled with Triton's own ptxas.

Triton must not be in interpreter mode when the kernel module is first imported (the scripts
drop TRITON_INTERPRET before importing anything): an interpreted kernel cannot be compiled.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update.arguments import UpdateArgs
from ssmdecode.ops.selective_state_update.decode import Variant, prepare
from ssmdecode.ops.selective_state_update.launch import Launch
from ssmdecode.ops.selective_state_update.replay import prepare as replay_prepare

__all__ = ["compile_config", "compile_launch"]

_TRITON_TYPES = {
    torch.float32: "fp32",
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.int8: "i8",  # vLLM's is_flush flags (the fast replay route)
}


def compile_config(
    kwargs: dict[str, Any],
    config: LaunchConfig,
    target: GPUTarget,
    variant: Variant | None = None,
    replay: bool = False,
    part: str = "main",
) -> Any:
    """The compiled kernel (Triton's CompiledKernel: .asm["ptx"], .asm["cubin"], .metadata) of
    a call with these selective_state_update keyword arguments (selective_state_replay's with
    replay=True) and config, for target. variant: a kernel variant of the same bits
    (decode.Variant). part: the call's main kernel, or the one launched "before" or "after" it
    (the fast replay route's Grams and flushes: Launch.before, Launch.after)."""
    if replay:
        _, launch = replay_prepare(**kwargs, config=config)
    else:
        _, launch = prepare(UpdateArgs(**kwargs, config=config), _variant=variant or Variant())
    if part != "main":
        launch = getattr(launch, part)
        if launch is None:
            raise ValueError(f"the call launches no kernel {part} its main one")
    return compile_launch(launch, target)


def compile_launch(launch: Launch, target: GPUTarget) -> Any:
    """The compiled kernel of a prepared launch (any kernel of the family: decode.prepare's,
    replay's), for target."""
    heuristics = launch.kernel
    jit = heuristics.fn
    if not isinstance(jit, triton.runtime.JITFunction):
        raise RuntimeError(
            "the kernel was defined under Triton's interpreter: unset TRITON_INTERPRET before "
            "ssmdecode's kernels are imported"
        )
    names = jit.arg_names
    args = dict(zip(names, launch.args, strict=False))
    kw = dict(launch.kwargs)
    options = {k: kw.pop(k) for k in ("num_warps", "maxnreg", "launch_pdl") if k in kw}
    args.update(kw)
    for name, fn in heuristics.values.items():  # the heuristics' constexprs
        args[name] = fn(args)
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(names):
        param = jit.params[i]
        value = args.get(name, param.default)  # a constexpr left at its default
        if param.is_constexpr:
            signature[name] = "constexpr"
            constexprs[name] = value
        elif value is None:
            signature[name] = "constexpr"
            constexprs[name] = None
        elif isinstance(value, torch.Tensor):
            signature[name] = "*" + _TRITON_TYPES[value.dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int) and param.do_not_specialize:  # a runtime int, as launched
            signature[name] = "i64" if abs(value) >= 2**31 else "i32"
        elif isinstance(value, int):
            if value == 1:  # Triton specializes ints equal to 1 as constants
                signature[name] = "constexpr"
                constexprs[name] = 1
            else:
                signature[name] = "i64" if abs(value) >= 2**31 else "i32"
                if value % 16 == 0:
                    attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            raise TypeError(f"{name}: cannot type {value!r}")
    src = ASTSource(fn=jit, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=target, options=options)
