"""What the compiler makes of a launch config, without a GPU: compile selective_state_update's
kernel for a target (default sm_90, the H100/H200) as a real call would specialize it, and
print registers, spills, shared memory, a few PTX facts, the SASS instruction count and the
number of address registers the global stores use (st.addr) per config.

    python benchmarks/compile_info.py --preset nemotron3-super --tp 8 \
        --config 16,1,slot,evict 16,1,slot,evict,ordered,regs96 [--ptx DIR]

Registers bound occupancy (65536 a multiprocessor), and occupancy bounds the bytes in flight
of a memory-bound kernel; this answers "how many registers does (32,1) take with a bf16
state" in a second, where a GPU run costs minutes. Triton's own ptxas compiles here; nothing
runs.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # compile for the target, never interpret

import torch
import triton
from triton.backends.compiler import GPUTarget

from ssmdecode.bench.compile import compile_config
from ssmdecode.bench.inputs import make_shape_inputs
from ssmdecode.cli_args import (
    add_batch_argument,
    add_config_argument,
    add_shape_arguments,
    batches_from_args,
    shapes_from_args,
)
from ssmdecode.ops.selective_state_update.decode import Variant


def _cuobjdump(cubin: bytes, flag: str) -> str:
    """Triton's cuobjdump run with flag on a cubin."""
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([str(tool), flag, f.name], capture_output=True, text=True, check=True).stdout


def _resource_usage(cubin: bytes) -> tuple[int, int]:
    """(registers a thread, spill stores in bytes) of a cubin, read by Triton's cuobjdump (a
    kernel's own n_regs is only known once it is loaded on a GPU)."""
    text = _cuobjdump(cubin, "-res-usage")
    regs = int(re.search(r"REG:(\d+)", text).group(1))
    spills = int(re.search(r"STACK:(\d+)", text).group(1))
    return regs, spills


def _sass(cubin: bytes) -> list[str]:
    """The SASS instructions of a cubin, one a line."""
    return [
        m.group(1).strip()
        for m in re.finditer(r"^\s+/\*[0-9a-f]{4}\*/\s+(.*?)\s*;", _cuobjdump(cubin, "-sass"), re.MULTILINE)
    ]


def _store_bases(sass: list[str]) -> set[str]:
    """The address registers of the global stores: the state tile's and out's. Where the state's
    offsets are compile-time constants, one base serves the whole tile (STG [R+0x200], ...)."""
    return {m.group(1) for line in sass if (m := re.search(r"STG\S* desc\[\w+\]\[(R\d+)", line))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_arguments(p)
    add_config_argument(p, named=False, what="the configs compiled", required=True)
    add_batch_argument(p, (8,), several=False)
    p.add_argument("--arch", type=int, default=90, help="compute capability x 10 (default 90)")
    p.add_argument("--ptx", type=Path, help="also write each config's PTX and SASS here")
    p.add_argument(
        "--strided-rows",
        action="store_true",
        help="address the state tile with its runtime row stride, as before the "
        "packed-rows path (the kernel variant Variant(strided_rows=True))",
    )
    p.add_argument(
        "--masked-vectors",
        action="store_true",
        help="mask the vectors where the tile divides too, as before the unmasked "
        "vectors (Variant(masked_vectors=True))",
    )
    args = p.parse_args()
    variant = Variant(masked_vectors=args.masked_vectors, strided_rows=args.strided_rows)
    gpu = torch.device("cuda")  # the GPU defaults (nothing runs on it)
    (shape,) = shapes_from_args(args, gpu)
    (batch,) = batches_from_args(args, gpu)
    inputs = make_shape_inputs(shape, batch, torch.device("cpu"), seed=0)
    kwargs = inputs.kwargs(0)
    target = GPUTarget("cuda", args.arch, 32)
    print(f"shape {shape.label}, sm_{args.arch}")
    print(
        f"{'config':<34} {'regs':>5} {'stack':>6} {'smem B':>7} {'warps/SM':>8} "
        f"{'bar.sync':>8} {'shfl':>5} {'ld.v4':>6} {'cp.async':>8} {'SASS':>5} "
        f"{'st.addr':>7}"
    )
    for config in args.config:
        c = compile_config(kwargs, config, target, variant)
        ptx = c.asm["ptx"]
        regs, spills = _resource_usage(c.asm["cubin"])
        sass = _sass(c.asm["cubin"])
        per_warp = -(-regs * 32 // 256) * 256  # allocation granule: 256 registers a warp
        warps = min(64, 65536 // per_warp // config.num_warps * config.num_warps, 32 * config.num_warps)
        print(
            f"{config.label:<34} {regs:>5} {spills:>6} {c.metadata.shared:>7} {warps:>8} "
            f"{len(re.findall(r'bar.sync|barrier.sync', ptx)):>8} "
            f"{len(re.findall(r'shfl.sync', ptx)):>5} {len(re.findall(r'ld.global[^;]*v4', ptx)):>6} "
            f"{len(re.findall(r'cp.async.c[ag]', ptx)):>8} {len(sass):>5} "
            f"{len(_store_bases(sass)):>7}"
        )
        if args.ptx:
            args.ptx.mkdir(parents=True, exist_ok=True)
            (args.ptx / f"{config.label}.ptx").write_text(ptx)
            (args.ptx / f"{config.label}.sass").write_text("\n".join(sass) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
