"""Did a change to the kernel source change any instruction? Without a GPU: compile the kernel
for sm_90 over a matrix of inputs x launch configs, as real calls specialize it, and write each
PTX with its debug sections and debug labels cut; then compare two such snapshots, or a snapshot
with a JSON of the SHA-256 digests of another (benchmarks/ptx_reference.json: the committed
kernel's, under the Triton version it names).

    python benchmarks/ptx_snapshot.py write /tmp/before      # on the old tree
    python benchmarks/ptx_snapshot.py write /tmp/after       # on the new tree
    python benchmarks/ptx_snapshot.py compare /tmp/before /tmp/after
    python benchmarks/ptx_snapshot.py digest /tmp/after benchmarks/ptx_reference.json
    python benchmarks/ptx_snapshot.py compare benchmarks/ptx_reference.json /tmp/after

Identical PTX instructions mean identical bits and speed, so a refactor that passes needs no
GPU run to keep the measured tables valid. (The refactors that made, and later inlined, the
per-tile function _ssu_tile passed on 160 combinations.) The matrix: fp32 and bf16 states;
dstate 64, 128, 256 and an odd shape with masked tiles; tied and untied dt/A; z with separate
write slots; no state write; a bf16 state rounded stochastically, and an fp16 one at the
headline shape; upstream, default, layout-sum and ordered configs (the table's
(8,1,slot,evict,ordered) among them); and verify calls of 4 drafts in each mode (buffer, dst,
replay) at three configs, with a bf16 state also stochastically rounded (225 files); and the
fast replay route's kernel (replay_fast.py) for decode and verify, with its flush and engine
conventions and decode's flush kernels, after the main kernel and beside it (50 more: 275),
and its Grams' kernel with the main kernel launched programmatic-dependent on it, as on a GPU
(5 more: 280), and with the Grams' kernel also computing the dual form's weights
(replay_fast.WEIGHTS; 2 more: 282), and the verify step's flushing requests' whole steps beside
its main kernel (replay_fast.VERIFY_FLUSH_BESIDE; 4 more: 286), and the tiles' state tile
read in passes of columns, alone and with its flushing requests beside in flush programs that
are tiles too (replay_fast.TILES_COLS, BESIDE_FLUSH_TILES; 6 more: 292), and the draft-by-draft
verify step with its Grams' kernel before it, chained, and its flushing requests beside, as
from 64 requests on a GPU (6 more: 298). PTX depends on the Triton version: a digest file only
holds for the version it names.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # compile for the target, never interpret

import torch
import triton
from triton.backends.compiler import GPUTarget

from ssmdecode.bench.compile import compile_config
from ssmdecode.bench.inputs import make_inputs
from ssmdecode.bench.spec import SPEC_MODES, make_spec_inputs
from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update import replay_fast
from ssmdecode.shapes import Shape

TARGET = GPUTarget("cuda", 90, 32)
CONFIGS = (
    "8,1",
    "4,4",
    "4,8",
    "16,1,slot,evict",
    "4,1,slot,evict,ordered",
    "8,1,slot,evict,ordered",
    "16,1,slot,evict,ordered",
    "2,1,slot,evict,ordered",
    "8,2,slot,evict,ordered",
)


def _inputs() -> Iterator[tuple[str, dict]]:
    for sdt in (torch.float32, torch.bfloat16):
        for heads, headdim, dstate, groups in (
            (16, 64, 128, 1),
            (16, 64, 256, 1),
            (16, 64, 64, 1),
            (8, 12, 24, 2),
        ):
            for tie in (True, False):
                inp = make_inputs(
                    4, heads, headdim, dstate, groups, sdt, torch.bfloat16, 8, "cpu", 0, tie=tie
                )
                name = f"{str(sdt).removeprefix('torch.')}-P{headdim}-N{dstate}"
                kw = inp.kwargs(0)
                yield f"{name}-{'tie' if tie else 'untied'}", kw
                if tie and dstate == 128:
                    yield (
                        f"{name}-z-dst",
                        {
                            **kw,
                            "z": torch.randn_like(inp.x),
                            "dst_state_batch_indices": inp.slot_sets[0].flip(0).contiguous(),
                        },
                    )
                    yield f"{name}-nowrite", {**kw, "disable_state_update": True}
                    if sdt != torch.float32:  # stochastic rounding of the final store
                        yield f"{name}-sr", {**kw, "rand_seed": torch.tensor([1234], dtype=torch.int64)}
    # fp16's stochastic store (its own scale and bits), at the headline shape
    inp = make_inputs(4, 16, 64, 128, 1, torch.float16, torch.bfloat16, 8, "cpu", 0, tie=True)
    yield "float16-P64-N128-sr", {**inp.kwargs(0), "rand_seed": torch.tensor([1234], dtype=torch.int64)}


# The verify modes: each with round-to-nearest and (16-bit states) stochastic rounding.
SPEC_CONFIGS = ("4,1", "4,4", "16,1,slot,evict,ordered")


def _spec_inputs() -> Iterator[tuple[str, dict, bool]]:
    """(name, keyword arguments, whether they are selective_state_replay's) of verify calls
    of T = 4 drafts at one small shape: buffer, dst and replay, fp32 and bf16 states."""
    for sdt in (torch.float32, torch.bfloat16):
        shape = Shape(8, 64, 128, 1, sdt, torch.bfloat16)
        for mode in SPEC_MODES:
            spec = make_spec_inputs(shape, 4, 4, mode, torch.device("cpu"), 0, rotation=1)
            kw = spec.kwargs(0)
            name = f"spec-{mode}-{str(sdt).removeprefix('torch.')}"
            yield name, kw, mode == "replay"
            if sdt != torch.float32:
                seed = torch.tensor([1234], dtype=torch.int64)
                yield f"{name}-sr", {**kw, "rand_seed": seed}, mode == "replay"


# The fast replay route (selective_state_replay(..., exact=False)): no ordered sum; its
# default config shapes (config.replay_fast_config: 16 rows and 4 warps for a small batch, 16
# and one warp for decode and the row-sum verify, 32 and 64 rows with 4 warps for the tiles).
FAST_CONFIGS = ("16,4,slot,evict", "16,1,slot,evict", "32,4,slot,evict", "64,4,slot,evict")
FLUSH_PART = "flushes"  # the name of a split call's flush kernel (at replay_fast.flush_config's config)
BESIDE_PART = "beside"  # the name of the flush kernel beside the main kernel (replay_fast._side_flush)
GRAMS_PART = "grams"  # the name of the Grams' kernel, launched before the main one (replay_fast._gram_first)
PARTS = {
    "-split": ("main", "after"),
    "-beside": ("main", "beside", "after"),
    "-steps": ("main", "beside"),
    "-chain": ("before", "main"),
    "-chained": ("before", "main", "beside"),
    "-early": ("main",),
}


def _fast_inputs() -> Iterator[tuple[str, dict, tuple[str, ...]]]:
    """(name, selective_state_replay's keyword arguments with exact=False, the configs) of the
    fast route at one small shape: decode (T = 1) and verify (T = 4), fp32 and bf16 states (a
    bf16 one also stochastically rounded), each also as replay_flush runs it (every request
    flushes), verify also with its out draft by draft (compiled while the module's rule is set
    so), decode also under compat.vllm's conventions (the host's flush flags, a flush absorbing
    the token, cursors a request)."""
    for sdt in (torch.float32, torch.bfloat16):
        shape = Shape(8, 64, 128, 1, sdt, torch.bfloat16)
        for tokens in (1, 4):
            spec = make_spec_inputs(shape, 4, tokens, "replay", torch.device("cpu"), 0, rotation=1)
            kw = {**spec.kwargs(0), "exact": False}
            name = f"fast-T{tokens}-{str(sdt).removeprefix('torch.')}"
            yield name, kw, FAST_CONFIGS
            if sdt != torch.float32:
                yield f"{name}-sr", {**kw, "rand_seed": torch.tensor([1234], dtype=torch.int64)}, FAST_CONFIGS
            yield f"{name}-flush", {**kw, "_flush": True}, FAST_CONFIGS[:1]
            if sdt == torch.float32:  # the Grams' kernel first, the main kernel dependent on it
                yield from _chain_inputs(name, kw, tokens)
            if tokens > 1:  # the verify step's out draft by draft (a small batch takes the tiles)
                saved = replay_fast.TILES_MAX_REQUESTS, replay_fast.SPLIT_MIN_REQUESTS
                saved_beside = replay_fast.BESIDE_MIN_REQUESTS
                replay_fast.TILES_MAX_REQUESTS = 0
                try:
                    yield f"{name}-rows", kw, FAST_CONFIGS[:2]
                    # and with its flushes in a kernel of their own (from 16 requests on): the
                    # main kernel, then the flush kernel (FLUSH_PART) launched after it
                    replay_fast.SPLIT_MIN_REQUESTS = 1
                    yield f"{name}-split", kw, FAST_CONFIGS[1:2]
                    # and with its flushing requests' whole steps beside the main kernel (from
                    # BESIDE_MIN_REQUESTS on): the main kernel, and the flush programs (BESIDE_PART)
                    replay_fast.BESIDE_MIN_REQUESTS = 1
                    yield f"{name}-steps", kw, FAST_CONFIGS[1:2]
                    # and with the Grams' kernel before them, chained (as at bs >= 64 on a GPU:
                    # the main kernel's drafts' B the append's alone, replay_fast.DRAFTS_B_LATE)
                    with _grams_chained():
                        yield f"{name}-steps-chained", kw, FAST_CONFIGS[1:2]
                finally:
                    replay_fast.TILES_MAX_REQUESTS, replay_fast.SPLIT_MIN_REQUESTS = saved
                    replay_fast.BESIDE_MIN_REQUESTS = saved_beside
                # the tiles (a small batch's) reading the state tile in passes of columns (from
                # TILES_COLS_MIN_REQUESTS on), and with the flushing requests' whole steps beside
                # (BESIDE_TILES, from BESIDE_TILES_MIN_REQUESTS on) in flush programs that are tiles
                # in the same passes (BESIDE_FLUSH_TILES): the main kernel, and BESIDE_PART
                saved = replay_fast.TILES_COLS_MIN_REQUESTS, replay_fast.BESIDE_TILES_MIN_REQUESTS
                replay_fast.TILES_COLS_MIN_REQUESTS, replay_fast.BESIDE_TILES_MIN_REQUESTS = 1, 10**9
                try:
                    yield f"{name}-cols", kw, FAST_CONFIGS[3:]
                    replay_fast.BESIDE_TILES_MIN_REQUESTS = 1
                    yield f"{name}-cols-steps", kw, FAST_CONFIGS[3:]
                finally:
                    replay_fast.TILES_COLS_MIN_REQUESTS, replay_fast.BESIDE_TILES_MIN_REQUESTS = saved
                continue  # compat.vllm's conventions are decode's (T = 1)
            # decode with its flushes in a kernel of their own (from SPLIT_DECODE_MIN_REQUESTS on),
            # and with its flush programs first in the main kernel's grid (from
            # FLUSH_PROGRAMS_MIN_REQUESTS on)
            # (and from SIDE_DECODE_MIN_REQUESTS on with its flush programs beside the main kernel
            # and after it: the kernels main, BESIDE_PART and FLUSH_PART)
            saved_min = (
                replay_fast.SPLIT_DECODE_MIN_REQUESTS,
                replay_fast.FLUSH_PROGRAMS_MIN_REQUESTS,
                replay_fast.SIDE_DECODE_MIN_REQUESTS,
            )
            replay_fast.SPLIT_DECODE_MIN_REQUESTS, replay_fast.SIDE_DECODE_MIN_REQUESTS = 1, 10**9
            try:
                yield f"{name}-split", kw, FAST_CONFIGS[1:2]
                replay_fast.SPLIT_DECODE_MIN_REQUESTS, replay_fast.FLUSH_PROGRAMS_MIN_REQUESTS = 10**9, 1
                yield f"{name}-programs", kw, FAST_CONFIGS[1:2]
                replay_fast.SIDE_DECODE_MIN_REQUESTS = 1
                yield f"{name}-beside", kw, FAST_CONFIGS[1:2]
            finally:
                (
                    replay_fast.SPLIT_DECODE_MIN_REQUESTS,
                    replay_fast.FLUSH_PROGRAMS_MIN_REQUESTS,
                    replay_fast.SIDE_DECODE_MIN_REQUESTS,
                ) = saved_min
            batch = kw["x"].shape[0]
            vllm = {
                **kw,
                "ring_start": None,
                "num_cached": kw["num_cached"][:batch].contiguous(),
                "_host_flush": torch.tensor([0, 1] * (batch // 2), dtype=torch.int8),
                "_flush_drafts": True,
                "_cursors_by_request": True,
            }
            yield f"{name}-vllm", vllm, FAST_CONFIGS[:1]


@contextlib.contextmanager
def _grams_chained() -> Iterator[None]:
    """The Grams' kernel first, from one request on (replay_fast.GRAM_MIN_REQUESTS), and the
    kernels chained programmatic-dependent, as on a GPU (replay_fast.CHAIN_ON_CPU)."""
    saved = replay_fast.GRAM_MIN_REQUESTS, replay_fast.CHAIN_ON_CPU
    replay_fast.GRAM_MIN_REQUESTS, replay_fast.CHAIN_ON_CPU = 1, True
    try:
        yield
    finally:
        replay_fast.GRAM_MIN_REQUESTS, replay_fast.CHAIN_ON_CPU = saved


def _chain_inputs(name: str, kw: dict, tokens: int) -> Iterator[tuple[str, dict, tuple[str, ...]]]:
    """The call with its Grams precomputed (as from replay_fast.GRAM_MIN_REQUESTS requests on)
    and its kernels chained programmatic-dependent, as on a GPU (_grams_chained): the Grams'
    kernel and the main kernel, which waits just before it reads the Grams (-chain, LATE_WAIT);
    at T = 1 also the main kernel waiting after its state loads (-chain-early, as from
    replay_fast.LATE_WAIT_DECODE_BELOW requests on); and with the Grams' kernel computing the
    dual form's weights (-chain-weights, replay_fast.WEIGHTS; at T >= 2 draft by draft, the
    flushes split off)."""
    late_wait = replay_fast.LATE_WAIT
    weights = replay_fast.WEIGHTS, replay_fast.TILES_MAX_REQUESTS, replay_fast.SPLIT_MIN_REQUESTS
    try:
        with _grams_chained():
            yield f"{name}-chain", kw, FAST_CONFIGS[1:2]
            if tokens == 1:
                replay_fast.LATE_WAIT = False
                yield f"{name}-chain-early", kw, FAST_CONFIGS[1:2]
                replay_fast.LATE_WAIT = late_wait
            # the dual form's weights from the Grams' kernel (replay_fast.WEIGHTS): decode, and
            # the draft-by-draft verify step with its flushes split off (its route from 16
            # requests on)
            replay_fast.WEIGHTS, replay_fast.TILES_MAX_REQUESTS, replay_fast.SPLIT_MIN_REQUESTS = True, 0, 1
            yield f"{name}-chain-weights", kw, FAST_CONFIGS[1:2]
    finally:
        replay_fast.LATE_WAIT = late_wait
        replay_fast.WEIGHTS, replay_fast.TILES_MAX_REQUESTS, replay_fast.SPLIT_MIN_REQUESTS = weights


def instructions(ptx: str) -> list[str]:
    """The PTX's instructions: up to the debug sections, without debug labels and comments."""
    lines = []
    for line in ptx.splitlines():
        if line.lstrip().startswith(".section") and ".debug" in line:
            break
        if re.match(r"^\s*(//|\.loc|\.file)", line) or re.match(r"^\$L__tmp\d+:$", line.strip()):
            continue
        lines.append(line)
    return lines


def write(folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    count = 0
    for name, kwargs in _inputs():
        for text in CONFIGS:
            try:  # a config this tree does not know, or the ordered sum outside its range
                config = LaunchConfig.parse(text)
                compiled = compile_config(kwargs, config, TARGET)
            except ValueError:
                continue
            (folder / f"{name}_{config.label}.ptx").write_text("\n".join(instructions(compiled.asm["ptx"])))
            count += 1
    for name, kwargs, replay in _spec_inputs():
        for text in SPEC_CONFIGS:
            config = LaunchConfig.parse(text)
            compiled = compile_config(kwargs, config, TARGET, replay=replay)
            (folder / f"{name}_{config.label}.ptx").write_text("\n".join(instructions(compiled.asm["ptx"])))
            count += 1
    for name, kwargs, configs in _fast_inputs():
        for text in configs:
            config = LaunchConfig.parse(text)
            for part in PARTS.get(name[name.rfind("-") :], ("main",)):
                compiled = compile_config(kwargs, config, TARGET, replay=True, part=part)
                stems = {"main": name, "beside": f"{name}-{BESIDE_PART}", "before": f"{name}-{GRAMS_PART}"}
                stem = stems.get(part, f"{name}-{FLUSH_PART}")
                body = "\n".join(instructions(compiled.asm["ptx"]))
                (folder / f"{stem}_{config.label}.ptx").write_text(body)
                count += 1
    print(f"wrote {count} PTX files to {folder}")
    return 0


def digests(folder: Path) -> dict[str, str]:
    """The SHA-256 of each PTX file of a snapshot folder, by file name."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.ptx"))}


def digest(folder: Path, path: Path) -> int:
    """Write the digests of a snapshot folder as JSON: the Triton version and target they hold
    for, and one SHA-256 a file."""
    files = digests(folder)
    data = {
        "what": "SHA-256 of each PTX file of benchmarks/ptx_snapshot.py write (instructions "
        "only), for the Triton version and target named here",
        "triton": triton.__version__,
        "target": f"sm_{TARGET.arch}",
        "files": files,
    }
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote the digests of {len(files)} PTX files to {path}")
    return 0


def _read_digests(path: Path) -> dict[str, str]:
    """A digest file's digests; exits when it was made under another Triton version, whose PTX
    differs whatever the kernel."""
    data = json.loads(path.read_text())
    if data["triton"] != triton.__version__:
        raise SystemExit(
            f"{path} holds the PTX of Triton {data['triton']}; this is Triton "
            f"{triton.__version__}: the digests cannot be compared"
        )
    return data["files"]


def compare(a: Path, b: Path) -> int:
    """Two snapshots, file by file; where either is a digest file (.json), by digests."""
    if a.suffix == ".json" or b.suffix == ".json":
        want, got = (_read_digests(p) if p.suffix == ".json" else digests(p) for p in (a, b))
        names = sorted(want.keys() | got.keys())
        differ = [n for n in names if want.get(n) != got.get(n)]
        for name in differ[:5]:
            both = name in want and name in got
            print(f"{name}: " + ("differs" if both else f"only in {a if name in want else b}"))
        print(f"{len(names) - len(differ)} of {len(names)} identical")
        return 1 if differ else 0
    names = sorted({p.name for p in a.glob("*.ptx")} | {p.name for p in b.glob("*.ptx")})
    differ = []
    for name in names:
        pa, pb = a / name, b / name
        if not (pa.exists() and pb.exists()):
            differ.append(f"{name}: only in {a if pa.exists() else b}")
        elif pa.read_text() != pb.read_text():
            diff = difflib.unified_diff(
                pa.read_text().splitlines(), pb.read_text().splitlines(), lineterm="", n=1
            )
            differ.append(f"{name}:\n" + "\n".join(list(diff)[:12]))
    for d in differ[:5]:
        print(d)
    print(f"{len(names) - len(differ)} of {len(names)} identical")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    sub.add_parser("write", help="compile the matrix, write its PTX into FOLDER").add_argument(
        "folder", type=Path
    )
    d = sub.add_parser("digest", help="write the SHA-256 digests of a snapshot FOLDER as JSON")
    d.add_argument("folder", type=Path)
    d.add_argument("json", type=Path)
    c = sub.add_parser("compare", help="compare two snapshots (folders, or digest .json files)")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = p.parse_args(argv)
    if args.mode == "write":
        return write(args.folder)
    if args.mode == "digest":
        return digest(args.folder, args.json)
    return compare(args.a, args.b)


if __name__ == "__main__":
    raise SystemExit(main())
