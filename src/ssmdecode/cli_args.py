"""The command-line pieces that the tools (`ssmdecode <subcommand>`) and the scripts under
benchmarks/ share: the device, the seed and the output folder; shapes (a preset or explicit
dims); batch lists; launch-config specs and their help; the layers of a model step.

Defaults depend on the device: on a GPU the headline shape and real batch sizes, under Triton's
interpreter (CPU) a tiny shape and tiny batches, whose timings mean nothing.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ssmdecode.config import LABEL_SYNTAX, LaunchConfig, default_config, lookup_config, upstream_config
from ssmdecode.shapes import CPU_SHAPE, HEADLINE, PRESETS, Shape, parse_dtype, per_rank, with_overrides

__all__ = [
    "STEP_LAYERS",
    "ConfigSpec",
    "add_batch_argument",
    "add_common_arguments",
    "add_config_argument",
    "add_layers_argument",
    "add_shape_arguments",
    "batches_from_args",
    "device_from_args",
    "int_option",
    "shapes_from_args",
]

# Mamba2 layers of a timed decode step (`ssmdecode e2e`, `tune --in-model`): (GPU, CPU).
STEP_LAYERS = (4, 2)


def device_from_args(args: argparse.Namespace) -> torch.device:
    """--device, else the current CUDA device, else the CPU (under Triton's interpreter)."""
    if args.device:
        device = torch.device(args.device)
        if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            raise SystemExit(
                "ssmdecode: --device cpu runs the kernels under Triton's "
                "interpreter: set TRITON_INTERPRET=1 before starting"
            )
        return device
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def add_common_arguments(parser: argparse.ArgumentParser, out_help: str, out_required: bool = False) -> None:
    """--device, --seed and --out, which every tool takes (the exploration scripts under
    benchmarks/ with --out required: they only write files)."""
    parser.add_argument(
        "--device",
        help="torch device (default: the current CUDA device, else cpu under Triton's interpreter)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--out", type=Path, required=out_required, help=out_help)


def add_shape_arguments(parser: argparse.ArgumentParser, several: bool = False) -> None:
    """A model preset cut for one rank (--preset, --tp), or explicit dims; explicit dims given
    with a preset override the preset's."""
    group = parser.add_argument_group(
        "shape",
        "a model preset (per rank under --tp) or explicit dims; default: "
        f"{HEADLINE[0]} at TP{HEADLINE[1]} on a GPU, a tiny shape on CPU",
    )
    group.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        action="append" if several else None,
        help="model preset" + (" (repeatable)" if several else ""),
    )
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
    overrides = {
        "nheads": args.heads,
        "headdim": args.headdim,
        "dstate": args.dstate,
        "ngroups": args.ngroups,
        "state_dtype": args.state_dtype,
        "dtype": args.dtype,
    }
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


def add_batch_argument(
    parser: argparse.ArgumentParser,
    gpu: Sequence[int],
    cpu: Sequence[int] | None = None,
    *,
    what: str | None = None,
    several: bool = True,
    gpu_text: str | None = None,
) -> None:
    """--batch, defaulting to gpu on a GPU and cpu (tiny; default: gpu) under the interpreter;
    one value unless several. what: the help's noun (default: batch sizes, or batch size).
    gpu_text: the GPU default as the help should say it, where the list is too long to print."""
    cpu = gpu if cpu is None else cpu
    what = what or ("batch sizes" if several else "batch size")

    def listed(values: Sequence[int]) -> str:
        return " ".join(map(str, values))

    default = gpu_text or listed(gpu)
    if list(cpu) != list(gpu):
        default = f"{default} on a GPU; {listed(cpu)} on CPU"
    parser.add_argument(
        "--batch", type=int, nargs="+" if several else None, help=f"{what} (default: {default})"
    )
    parser.set_defaults(batch_defaults=(tuple(gpu), tuple(cpu)))


def batches_from_args(args: argparse.Namespace, device: torch.device) -> list[int]:
    """--batch (a list, also where one value is taken), else the default for the device (see
    add_batch_argument)."""
    if args.batch:
        batches = list(args.batch) if isinstance(args.batch, list) else [args.batch]
        if min(batches) < 1:
            raise SystemExit(f"--batch: sizes must be >= 1, got {args.batch}")
        return batches
    gpu, cpu = args.batch_defaults
    return list(gpu if device.type == "cuda" else cpu)


def add_layers_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--layers, the Mamba2 layers of a timed decode step (read it with int_option and
    STEP_LAYERS)."""
    parser.add_argument(
        "--layers",
        type=int,
        help=f"Mamba2 layers per step (default: {STEP_LAYERS[0]} on a GPU, {STEP_LAYERS[1]} on CPU)",
    )


def int_option(
    args: argparse.Namespace, name: str, defaults: tuple[int, int], device: torch.device, tool: str
) -> int:
    """An integer option, else its default (GPU, CPU) for the device; must be >= 1."""
    value = getattr(args, name)
    if value is None:
        value = defaults[device.type != "cuda"]
    if value < 1:
        raise SystemExit(f"ssmdecode {tool}: --{name.replace('_', '-')} must be >= 1, got {value}")
    return value


@dataclass(frozen=True)
class ConfigSpec:
    """A launch config as named on the command line: 'default' (default_config), 'upstream'
    (upstream_config), 'table' (this device's table, per batch: lookup_config) or explicit
    (LaunchConfig.parse: BLOCK_M,WARPS[,slot][,evict][,ordered][,regsN])."""

    text: str

    NAMED = ("default", "upstream", "table")
    # The syntax, for help strings.
    HELP = f"{', '.join(NAMED)} or {LABEL_SYNTAX}"

    @classmethod
    def parse(cls, text: str) -> ConfigSpec:
        """argparse type: validates explicit configs at parse time."""
        if text not in cls.NAMED:
            try:
                LaunchConfig.parse(text)
            except ValueError as e:
                raise argparse.ArgumentTypeError(str(e)) from None
        return cls(text)

    def resolve(
        self,
        shape: Shape,
        batch: int,
        device: torch.device,
        mode: str = "single",
        tokens: int = 0,
        stochastic: bool = False,
        dense: bool = False,
    ) -> LaunchConfig:
        """The config this spec names for a call of this shape and batch; mode and tokens:
        a multi-token or replay call's table entry, stochastic: a call that rounds its 16-bit
        state stochastically, dense: a multi-token call whose dt, A or dt_bias is not tied
        over the head dim (see lookup_config)."""
        if self.text == "default":
            return default_config(shape.dstate, shape.state_dtype)
        if self.text == "upstream":
            return upstream_config(shape.dstate)
        if self.text == "table":
            return lookup_config(
                shape.headdim,
                shape.dstate,
                shape.state_dtype,
                batch,
                device,
                mode=mode,
                tokens=tokens,
                stochastic=stochastic,
                dense=dense,
            )
        return LaunchConfig.parse(self.text)


def add_config_argument(
    parser: argparse.ArgumentParser,
    *,
    named: bool,
    what: str = "configs",
    default: Sequence[str] | None = None,
    default_text: str | None = None,
    required: bool = False,
) -> None:
    """--config, one or more launch configs: with named, ConfigSpecs (default, upstream, table
    or explicit; default: the ConfigSpecs of `default`), else explicit LaunchConfigs only.
    default_text: the default as the help should say it (default: `default` listed)."""
    syntax = ConfigSpec.HELP if named else LABEL_SYNTAX
    said = default_text or (" ".join(default) if default else None)
    parser.add_argument(
        "--config",
        type=ConfigSpec.parse if named else LaunchConfig.parse,
        nargs="+",
        required=required,
        default=[ConfigSpec.parse(text) for text in default] if named and default else None,
        help=f"{what}: {syntax}" + (f" (default: {said})" if said else ""),
    )
