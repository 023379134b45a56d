"""Did a change to the kernel source change any instruction? Without a GPU: compile the kernel
for sm_90 over a matrix of inputs x launch configs, as real calls specialize it, and write each
PTX with its debug sections and debug labels cut; then compare two such snapshots.

    python benchmarks/ptx_snapshot.py write /tmp/before      # on the old tree
    python benchmarks/ptx_snapshot.py write /tmp/after       # on the new tree
    python benchmarks/ptx_snapshot.py compare /tmp/before /tmp/after

Identical PTX instructions mean identical bits and speed, so a refactor that passes needs no
GPU run to keep the measured tables valid. (The refactors that made, and later inlined, the
per-tile function _ssu_tile passed on 160 combinations.) The matrix: fp32 and bf16 states;
dstate 64, 128, 256 and an odd shape with masked tiles; tied and untied dt/A; z with separate
write slots; no state write; upstream, default, layout-sum and ordered configs.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # compile for the target, never interpret

import torch
from triton.backends.compiler import GPUTarget

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_info import compile_config

from ssmdecode.bench.inputs import make_inputs
from ssmdecode.config import LaunchConfig

CONFIGS = ("8,1", "4,4", "4,8", "16,1,slot,evict", "4,1,slot,evict,ordered",
           "16,1,slot,evict,ordered", "2,1,slot,evict,ordered", "8,2,slot,evict,ordered")


def _inputs() -> Iterator[tuple[str, dict]]:
    for sdt in (torch.float32, torch.bfloat16):
        for heads, headdim, dstate, groups in ((16, 64, 128, 1), (16, 64, 256, 1),
                                               (16, 64, 64, 1), (8, 12, 24, 2)):
            for tie in (True, False):
                inp = make_inputs(4, heads, headdim, dstate, groups, sdt, torch.bfloat16, 8,
                                  "cpu", 0, tie=tie)
                name = f"{str(sdt).removeprefix('torch.')}-P{headdim}-N{dstate}"
                kw = inp.kwargs(0)
                yield f"{name}-{'tie' if tie else 'untied'}", kw
                if tie and dstate == 128:
                    yield f"{name}-z-dst", {**kw, "z": torch.randn_like(inp.x),
                                            "dst_state_batch_indices":
                                                inp.slot_sets[0].flip(0).contiguous()}
                    yield f"{name}-nowrite", {**kw, "disable_state_update": True}


def _code(ptx: str) -> list[str]:
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
    target = GPUTarget("cuda", 90, 32)
    count = 0
    for name, kwargs in _inputs():
        for text in CONFIGS:
            try:  # a config this tree does not know, or the ordered sum outside its range
                config = LaunchConfig.parse(text)
                compiled = compile_config(kwargs, config, target)
            except ValueError:
                continue
            (folder / f"{name}_{config.label}.ptx").write_text("\n".join(_code(compiled.asm["ptx"])))
            count += 1
    print(f"wrote {count} PTX files to {folder}")
    return 0


def compare(a: Path, b: Path) -> int:
    names = sorted({p.name for p in a.glob("*.ptx")} | {p.name for p in b.glob("*.ptx")})
    differ = []
    for name in names:
        pa, pb = a / name, b / name
        if not (pa.exists() and pb.exists()):
            differ.append(f"{name}: only in {a if pa.exists() else b}")
        elif pa.read_text() != pb.read_text():
            diff = difflib.unified_diff(pa.read_text().splitlines(), pb.read_text().splitlines(),
                                        lineterm="", n=1)
            differ.append(f"{name}:\n" + "\n".join(list(diff)[:12]))
    for d in differ[:5]:
        print(d)
    print(f"{len(names) - len(differ)} of {len(names)} identical")
    return 1 if differ else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    sub.add_parser("write").add_argument("folder", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = p.parse_args()
    return write(args.folder) if args.mode == "write" else compare(args.a, args.b)


if __name__ == "__main__":
    raise SystemExit(main())
