"""What the compiler makes of a launch config, without a GPU: compile selective_state_update's
kernel for a target (default sm_90, the H100/H200) as a real call would specialize it, and
print registers, spills, shared memory, a few PTX facts, the SASS instruction count and the
number of address registers the global stores use (st.addr) per config. With --tokens T, the
verify call of --mode (buffer, dst or replay) instead; with --stochastic, the call that rounds
a 16-bit state stochastically (rand_seed; --state-dtype bfloat16 or float16).

    python benchmarks/compile_info.py --preset nemotron3-super --tp 8 \
        --config 16,1,slot,evict 16,1,slot,evict,ordered,regs96 [--ptx DIR]
    python benchmarks/compile_info.py --preset nemotron3-super --tp 8 --tokens 4 --mode replay \
        --batch 512 --config 8,1,slot,evict,ordered,regs96 16,1,slot,evict,ordered
    python benchmarks/compile_info.py --preset nemotron3-super --tp 8 --tokens 1 --mode replay \
        --window 15 --fast --batch 512 --config 64,8,slot,evict,regs128 16,4,slot,evict

The last column, "issue us", is a floor from instruction issue alone: the warp instructions a
call executes over what the GPU issues a second (--sms multiprocessors x 4 schedulers x
--clock-ghz, one instruction a scheduler a cycle; the H200's 132 and 1.98 by default), with
each program taken to execute its whole SASS once, except replay's cached tokens: those count
at the steady state's mean, half the window (a branch skips the rest; a cached token's
instructions are the distance between the window's branches in the SASS). A call cannot run
faster than its issue floor however its memory overlaps; a kernel whose floor nears its
stream's time is bound by its instructions, not by HBM.

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
from ssmdecode.bench.spec import DEFAULT_WINDOW, SPEC_MODES, make_spec_inputs
from ssmdecode.cli_args import (
    add_batch_argument,
    add_config_argument,
    add_shape_arguments,
    batches_from_args,
    shapes_from_args,
)
from ssmdecode.ops.selective_state_update import replay_fast
from ssmdecode.ops.selective_state_update.checks import DEFAULT_PHILOX_ROUNDS
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
    return _sass_of(_cuobjdump(cubin, "-sass"))


def _sass_of(listing: str) -> list[str]:
    """The instructions of cuobjdump -sass's listing, one a line: each follows its address, four
    hex digits or more (a program of over 4096 instructions runs past 0xfff0)."""
    line = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", re.MULTILINE)
    return [m.group(1).strip() for m in line.finditer(listing)]


def _store_bases(sass: list[str]) -> set[str]:
    """The address registers of the global stores: the state tile's and out's. Where the state's
    offsets are compile-time constants, one base serves the whole tile (STG [R+0x200], ...)."""
    return {m.group(1) for line in sass if (m := re.search(r"STG\S* desc\[\w+\]\[(R\d+)", line))}


def _replay_token_span(sass: list[str], window: int) -> float | None:
    """The SASS instructions a cached token of replay costs: ptxas compiles the window's
    tokens one after another, each behind a predicated branch to the end of the replay (a
    request past its cached count skips the rest); the mean distance between those branches.
    None where the window's branches are not found."""
    targets: dict[str, list[int]] = {}
    for i, line in enumerate(sass):
        if m := re.match(r"@!?P\d BRA (\S+)", line):
            targets.setdefault(m.group(1), []).append(i)
    at = next((v for v in targets.values() if len(v) == window), None)
    if at is None or window < 2:
        return None
    return (at[-1] - at[0]) / (window - 1)


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
    p.add_argument("--tokens", type=int, default=0, help="a verify call of T draft tokens a request")
    p.add_argument("--mode", choices=SPEC_MODES, default="replay", help="with --tokens (default replay)")
    p.add_argument(
        "--window", type=int, default=DEFAULT_WINDOW, help=f"replay's window (default {DEFAULT_WINDOW})"
    )
    p.add_argument(
        "--fast",
        action="store_true",
        help="with --mode replay: the fast route (exact=False); its issue floor counts the whole "
        "SASS, the flush branch's too (an upper bound for the steps that do not flush)",
    )
    p.add_argument(
        "--split-flush",
        action="store_true",
        help="with --fast: the flushes in a kernel of their own at any T and batch (without it, "
        "replay_fast's rule: the draft-by-draft verify step from 4 drafts and 16 requests on); the "
        "main kernel compiled, which then has no flush branch",
    )
    p.add_argument(
        "--stochastic",
        action="store_true",
        help="stochastic rounding of the state store (rand_seed; a 16-bit --state-dtype)",
    )
    p.add_argument(
        "--philox-rounds",
        type=int,
        default=DEFAULT_PHILOX_ROUNDS,
        help=f"with --stochastic: Philox rounds (default {DEFAULT_PHILOX_ROUNDS})",
    )
    p.add_argument("--sms", type=int, default=132, help="multiprocessors, for the issue floor (H200: 132)")
    p.add_argument("--clock-ghz", type=float, default=1.98, help="the SM clock (H200: 1.98)")
    args = p.parse_args()
    variant = Variant(masked_vectors=args.masked_vectors, strided_rows=args.strided_rows)
    gpu = torch.device("cuda")  # the GPU defaults (nothing runs on it)
    (shape,) = shapes_from_args(args, gpu)
    (batch,) = batches_from_args(args, gpu)
    replay = args.tokens > 0 and args.mode == "replay"

    # A call's arguments, compiled as a real call specializes them: at batch 8 (the kernels do
    # not specialize on the batch, which only the issue floor uses), but the fast route's at
    # the batch itself (from replay_fast.GRAM_MIN_REQUESTS requests on it reads precomputed
    # Grams, and replay_fast._tiles picks its verify path by the batch too).
    cpu = torch.device("cpu")
    if args.tokens:
        rows = batch if args.fast else 8
        spec = make_spec_inputs(shape, rows, args.tokens, args.mode, cpu, 0, rotation=1, window=args.window)
        kwargs = spec.kwargs(0)
    else:
        kwargs = make_shape_inputs(shape, 8, cpu, seed=0).kwargs(0)
    if args.stochastic:
        kwargs.update(rand_seed=torch.tensor([1], dtype=torch.int64), philox_rounds=args.philox_rounds)
    if args.fast:
        if not replay:
            raise SystemExit("--fast is replay's fast route: pass --tokens T --mode replay")
        kwargs["exact"] = False
        # the kernels after the Grams' chained programmatic-dependent, as a GPU launches them
        replay_fast.CHAIN_ON_CPU = True
        if args.split_flush:  # else the module's rule (replay_fast._split_flush)
            replay_fast.SPLIT_FLUSH, replay_fast.SPLIT_FROM_TOKENS = True, 1
    elif args.split_flush:
        raise SystemExit("--split-flush is the fast route's: pass --fast")
    target = GPUTarget("cuda", args.arch, 32)
    what = (
        f", T = {args.tokens} ({args.mode}{' fast' if args.fast else ''}"
        + (f", window {args.window})" if replay else ")")
        if args.tokens
        else ""
    )
    print(f"shape {shape.label}, sm_{args.arch}{what}; issue floor at batch {batch}")
    print(
        f"{'config':<34} {'regs':>5} {'stack':>6} {'smem B':>7} {'warps/SM':>8} "
        f"{'bar.sync':>8} {'shfl':>5} {'ld.v4':>6} {'cp.async':>8} {'SASS':>5} "
        f"{'st.addr':>7} {'issue us':>8}"
    )
    issue_rate = args.sms * 4 * args.clock_ghz * 1e9  # warp instructions a second
    for config in args.config:
        c = compile_config(kwargs, config, target, variant, replay=replay)  # replay has no variants
        ptx = c.asm["ptx"]
        regs, spills = _resource_usage(c.asm["cubin"])
        sass = _sass(c.asm["cubin"])
        per_warp = -(-regs * 32 // 256) * 256  # allocation granule: 256 registers a warp
        warps = min(64, 65536 // per_warp // config.num_warps * config.num_warps, 32 * config.num_warps)
        executed = float(len(sass))
        if replay and not args.fast:  # the cached tokens past the steady state's mean are skipped
            per_cached = _replay_token_span(sass, args.window)
            executed = float("nan") if per_cached is None else executed - per_cached * args.window / 2
        programs = batch * shape.nheads * -(-shape.headdim // config.block_m)
        issue_us = programs * config.num_warps * executed / issue_rate * 1e6
        print(
            f"{config.label:<34} {regs:>5} {spills:>6} {c.metadata.shared:>7} {warps:>8} "
            f"{len(re.findall(r'bar.sync|barrier.sync', ptx)):>8} "
            f"{len(re.findall(r'shfl.sync', ptx)):>5} {len(re.findall(r'ld.global[^;]*v4', ptx)):>6} "
            f"{len(re.findall(r'cp.async.c[ag]', ptx)):>8} {len(sass):>5} "
            f"{len(_store_bases(sass)):>7} {issue_us:>8.2f}"
        )
        if args.ptx:
            args.ptx.mkdir(parents=True, exist_ok=True)
            (args.ptx / f"{config.label}.ptx").write_text(ptx)
            (args.ptx / f"{config.label}.sass").write_text("\n".join(sass) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
