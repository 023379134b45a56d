"""The subcommands of `ssmdecode`, one module each (bench, sweep, verify, tune, e2e), and the
command-line pieces they share: shapes (a preset or explicit dims), launch-config specs,
batch lists, the device and the output folder.

Every tool module exposes `add_parser(subparsers) -> None` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ssmdecode.bench.presets import PRESETS, Shape, parse_dtype, per_rank, with_overrides
from ssmdecode.config import LaunchConfig, default_config, lookup_config, upstream_config

__all__ = ["CPU_SHAPE", "HEADLINE", "ConfigSpec", "add_batch_argument", "add_common_arguments",
           "add_shape_arguments", "batches_from_args", "device_from_args", "shapes_from_args"]

# The shape of the seed's headline case (Nemotron-3-Super, TP8) is the GPU default; under the
# interpreter a tiny shape with P and N not equal, so a transposed index shows.
HEADLINE = ("nemotron3-super", 8)
CPU_SHAPE = Shape(nheads=2, headdim=8, dstate=16, ngroups=1, name="cpu-tiny")


def device_from_args(args: argparse.Namespace) -> torch.device:
    """--device, else the current CUDA device, else the CPU (under Triton's interpreter)."""
    if args.device:
        device = torch.device(args.device)
        if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            raise SystemExit("ssmdecode: --device cpu runs the kernels under Triton's "
                             "interpreter: set TRITON_INTERPRET=1 before starting")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def add_common_arguments(parser: argparse.ArgumentParser, out_help: str,
                         out_required: bool = False) -> None:
    """--device, --seed and --out, which every tool takes (the exploration scripts under
    benchmarks/ with --out required: they only write files)."""
    parser.add_argument("--device", help="torch device (default: the current CUDA device, "
                        "else cpu under Triton's interpreter)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--out", type=Path, required=out_required, help=out_help)


def add_shape_arguments(parser: argparse.ArgumentParser, several: bool = False) -> None:
    """A model preset cut for one rank (--preset, --tp), or explicit dims; explicit dims given
    with a preset override the preset's."""
    group = parser.add_argument_group(
        "shape", "a model preset (per rank under --tp) or explicit dims; default: "
        f"{HEADLINE[0]} at TP{HEADLINE[1]} on a GPU, a tiny shape on CPU")
    group.add_argument("--preset", choices=sorted(PRESETS), action="append" if several else None,
                       help="model preset" + (" (repeatable)" if several else ""))
    group.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (default 1)")
    group.add_argument("--heads", type=int, help="heads per rank, H")
    group.add_argument("--headdim", type=int, help="head dim, P")
    group.add_argument("--dstate", type=int, help="state dim, N")
    group.add_argument("--ngroups", type=int, help="groups per rank, G")
    group.add_argument("--state-dtype", type=parse_dtype, help="float32, bfloat16 or float16")
    group.add_argument("--dtype", type=parse_dtype, help="input dtype (x, B, C, dt, out)")


def shapes_from_args(args: argparse.Namespace, device: torch.device) -> list[Shape]:
    """The shapes the arguments name: one per --preset, else the default shape of the device
    (the headline on a GPU, a tiny one on CPU), explicit dims overriding either."""
    overrides = {"nheads": args.heads, "headdim": args.headdim, "dstate": args.dstate,
                 "ngroups": args.ngroups, "state_dtype": args.state_dtype, "dtype": args.dtype}
    presets = args.preset if isinstance(args.preset, list) else [args.preset] * bool(args.preset)
    if args.tp != 1 and not presets:
        raise SystemExit("ssmdecode: --tp cuts a --preset; explicit dims are already per rank")
    try:
        if presets:
            bases = [per_rank(PRESETS[name], args.tp) for name in presets]
        else:
            on_gpu = device.type == "cuda"
            base = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1]) if on_gpu else CPU_SHAPE
            explicit = any(v is not None for v in overrides.values())
            bases = [with_overrides(base, name="") if explicit else base]
        return [with_overrides(base, **overrides) for base in bases]
    except ValueError as e:
        raise SystemExit(f"ssmdecode: {e}") from None


def add_batch_argument(parser: argparse.ArgumentParser, gpu: tuple[int, ...],
                       cpu: tuple[int, ...], what: str = "batch sizes") -> None:
    """--batch, defaulting to gpu on a GPU and cpu (tiny) under the interpreter."""
    parser.add_argument("--batch", type=int, nargs="+",
                        help=f"{what} (default: {' '.join(map(str, gpu))} on a GPU; "
                        f"{' '.join(map(str, cpu))} on CPU)")
    parser.set_defaults(batch_defaults=(gpu, cpu))


def batches_from_args(args: argparse.Namespace, device: torch.device) -> list[int]:
    """--batch, else the tool's default for the device (see add_batch_argument)."""
    if args.batch:
        if min(args.batch) < 1:
            raise SystemExit(f"--batch: sizes must be >= 1, got {args.batch}")
        return list(args.batch)
    gpu, cpu = args.batch_defaults
    return list(gpu if device.type == "cuda" else cpu)


@dataclass(frozen=True)
class ConfigSpec:
    """A launch config as named on the command line: 'default' (default_config), 'upstream'
    (upstream_config), 'table' (this device's table, per batch: lookup_config) or explicit
    'BLOCK_M,WARPS[,slot][,evict]'."""

    text: str

    NAMED = ("default", "upstream", "table")

    @classmethod
    def parse(cls, text: str) -> ConfigSpec:
        """argparse type: validates explicit configs at parse time."""
        if text not in cls.NAMED:
            try:
                LaunchConfig.parse(text)
            except ValueError as e:
                raise argparse.ArgumentTypeError(str(e)) from None
        return cls(text)

    def resolve(self, shape: Shape, batch: int, device: torch.device) -> LaunchConfig:
        if self.text == "default":
            return default_config(shape.dstate, shape.state_dtype)
        if self.text == "upstream":
            return upstream_config(shape.dstate)
        if self.text == "table":
            return lookup_config(shape.headdim, shape.dstate, shape.state_dtype, batch, device)
        return LaunchConfig.parse(self.text)
