"""`ssmdecode <subcommand>` (also `python -m ssmdecode`): bench, sweep, verify, tune, e2e,
accuracy, bench-replay.

Without a GPU the kernels run under Triton's interpreter: TRITON_INTERPRET=1 is set here,
before any kernel module is imported (Triton reads it when a kernel is defined), and every
timing is then meaningless.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import shlex
import sys
from collections.abc import Sequence
from types import ModuleType

import torch

__all__ = ["SUBCOMMANDS", "main"]

SUBCOMMANDS = ("bench", "sweep", "verify", "tune", "e2e", "accuracy", "bench-replay")

log = logging.getLogger("ssmdecode")


def _use_interpreter_without_gpu() -> str | None:
    """Without a CUDA device, switch Triton to its interpreter. Returns why that failed, or
    None: Triton reads TRITON_INTERPRET when it is imported and when each kernel is defined,
    so the switch only works if nothing imported Triton before this runs."""
    if torch.cuda.is_available():
        return None
    if os.environ.get("TRITON_INTERPRET") != "1":
        if "triton" in sys.modules:
            return (
                "no CUDA device, and Triton was imported before its interpreter could be "
                "switched on; run with TRITON_INTERPRET=1 in the environment"
            )
        os.environ["TRITON_INTERPRET"] = "1"
    log.warning(
        "no CUDA device: kernels run under Triton's interpreter (TRITON_INTERPRET=1); timings mean nothing"
    )
    return None


def _load_tools() -> dict[str, ModuleType | None]:
    """The tool module of each subcommand; None for one whose module is not in this install
    (only that module missing: an import error inside a present module propagates)."""
    tools: dict[str, ModuleType | None] = {}
    for name in SUBCOMMANDS:
        module_name = f"ssmdecode.tools.{name.replace('-', '_')}"  # bench-replay: bench_replay
        try:
            tools[name] = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise
            tools[name] = None
    return tools


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    if not sys.stderr.isatty():
        # Progress bars into a log file: a line every 30 s, not a carriage return per step
        # (tqdm reads TQDM_* from the environment; an explicit setting wins).
        os.environ.setdefault("TQDM_MININTERVAL", "30")
    log.setLevel(logging.INFO)
    interpreter_error = _use_interpreter_without_gpu()
    tools = _load_tools()  # imports the kernels: after the interpreter switch

    parser = argparse.ArgumentParser(
        prog="ssmdecode", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="<subcommand>")
    for name, module in tools.items():
        if module is None:
            subparsers.add_parser(
                name, help=f"(not available: ssmdecode.tools.{name.replace('-', '_')} is not installed)"
            )
        else:
            module.add_parser(subparsers)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.command_line = shlex.join(["ssmdecode", *argv])
    if interpreter_error:
        print(f"ssmdecode: {interpreter_error}", file=sys.stderr)
        return 2
    module = tools[args.command]
    if module is None:
        print(
            f"ssmdecode {args.command}: not available in this install "
            f"(module ssmdecode.tools.{args.command} is missing)",
            file=sys.stderr,
        )
        return 2
    return module.run(args)
