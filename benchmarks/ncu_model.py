"""Where a decode step's DRAM traffic lands, kernel by kernel: Nsight Compute over eager steps of
the Mamba2 layer stack of `ssmdecode e2e`, with the L2 left as the previous kernel left it.

`docs/performance.md` ("Cache hints in a model") asks why evict-first hints lengthen the model's
step while they shorten back-to-back calls. One explanation: with the hint the state's dirty
lines leave L2 during the kernel, without it up to an L2's worth of them drains during the
kernels after it. Nsight Compute's default flushes the caches before each kernel, which hides
exactly that, so this runs it with `--cache-control none` and reads the DRAM bytes each kernel
reads and writes.

    ncu --clock-control none --cache-control none --profile-from-start off \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum -o REPORT \
        python benchmarks/ncu_model.py run --preset nemotron3-super --tp 8 --batch 512 \
        --config 4,1,slot,evict
    ncu --import REPORT.ncu-rep --csv --page raw --print-units base > REPORT.csv
    python benchmarks/ncu_model.py summarize REPORT.csv [...]

`run` compiles in two warm-up steps, then profiles `--steps` steps (cudaProfilerStart/Stop),
each on its own cold slot set as in `ssmdecode e2e`. `summarize` prints, per CSV, the step's
kernels in launch order with their time and DRAM MiB, averaged over the steps, and the totals
of selective_state_update against the rest.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch

from ssmdecode.bench.spec import call as spec_call
from ssmdecode.bench.spec import make_spec_inputs
from ssmdecode.bench.spec_step import SpecStepBench
from ssmdecode.bench.step import StepBench, model_dims
from ssmdecode.cli_args import (
    STEP_LAYERS,
    add_batch_argument,
    add_layers_argument,
    add_shape_arguments,
    batches_from_args,
    device_from_args,
    int_option,
    shapes_from_args,
)
from ssmdecode.config import KERNEL, LABEL_SYNTAX, LaunchConfig
from ssmdecode.models.mamba2 import Mamba2Dims
from ssmdecode.shapes import Shape

_METRICS = {
    "gpu__time_duration.sum": "us",
    "dram__bytes_read.sum": "read MiB",
    "dram__bytes_write.sum": "write MiB",
    # what the SM side asks of L2, and how much of it L2 holds (verify steps: every program
    # reads its tokens' B and C, which the state's stream competes with)
    "lts__t_sectors_srcunit_tex_op_read.sum": "L2 rd MiB",
    "lts__t_sector_op_read_hit_rate.pct": "L2 rd hit%",
}
_SCALE = {
    "gpu__time_duration.sum": 1e-3,
    "dram__bytes_read.sum": 2.0**-20,
    "dram__bytes_write.sum": 2.0**-20,
    "lts__t_sectors_srcunit_tex_op_read.sum": 32 * 2.0**-20,
    "lts__t_sector_op_read_hit_rate.pct": 1.0,
}  # ns -> us, bytes and 32-byte sectors -> MiB (units printed as base)
# Metrics an older export may lack (read as 0): the first three are required.
_OPTIONAL = ("lts__t_sectors_srcunit_tex_op_read.sum", "lts__t_sector_op_read_hit_rate.pct")
METRIC_LIST = ",".join(_METRICS)


def run(args: argparse.Namespace) -> int:
    device = device_from_args(args)
    (shape,) = shapes_from_args(args, device)
    (batch,) = batches_from_args(args, device)
    layers = int_option(args, "layers", STEP_LAYERS, device, "ncu_model")
    dims = model_dims(shape, None, device)  # the preset's width; on CPU the interpreter's tiny one
    config = None if args.config == "table" else LaunchConfig.parse(args.config)
    if args.spec is not None:
        return _run_spec(args, dims, shape, batch, layers, config, device)
    # each step on its own slot set: the two warm-up steps', then the profiled ones'
    bench = StepBench.build(dims, layers, batch, device, args.seed, min_sets=2 + args.steps)
    stack, hidden, slot_sets = bench.stack, bench.hidden, bench.slot_sets
    _profiled(lambda i: stack.step(hidden, slot_sets[i], config), args.steps, device)
    print(
        f"profiled: {dims.shape.label}, d_model {dims.d_model}, {layers} layers, batch "
        f"{batch}, config {args.config}, {args.steps} steps",
        file=sys.stderr,
    )
    return 0


def _profiled(step: Callable[[int], object], steps: int, device: torch.device) -> None:
    """Two warm-up steps (every kernel compiled outside the profiled range), then `steps`
    steps between cudaProfilerStart and Stop; step i on working set i."""
    cuda = device.type == "cuda"
    for i in range(2):
        step(i)
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.cudart().cudaProfilerStart()
    for i in range(steps):
        step(2 + i)
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.cudart().cudaProfilerStop()


def _run_spec(
    args: argparse.Namespace,
    dims: Mamba2Dims,
    shape: Shape,
    batch: int,
    layers: int,
    config: LaunchConfig | None,
    device: torch.device,
) -> int:
    """--spec T: verify steps of the stack on the buffer path with their acceptance (`e2e
    --spec`), or with --alone the same verify calls back to back on cold slot sets (`bench
    --tokens T --mode buffer`), `layers` calls a step."""
    tokens = args.spec
    if args.alone:
        spec = make_spec_inputs(shape, batch, tokens, "buffer", device, args.seed, rotation=2 + args.steps)

        def step(i: int) -> None:
            for _ in range(layers):
                spec_call(spec, i, config)

    else:
        bench = SpecStepBench.build(dims, layers, batch, tokens, "buffer", device, args.seed)

        def step(i: int) -> None:
            bench.step(i, config)

    with torch.inference_mode():
        _profiled(step, args.steps, device)
    where = "back to back" if args.alone else "in the model"
    print(
        f"profiled: {dims.shape.label}, verify calls T = {tokens} {where}, batch {batch}, "
        f"config {args.config}, {args.steps} steps of {layers} calls",
        file=sys.stderr,
    )
    return 0


def read_kernels(path: Path) -> list[tuple[str, dict[str, float]]]:
    """The profiled kernels of an `ncu --csv --page raw --print-units base` export, in launch
    order: (kernel name, {metric: value in us or MiB})."""
    kernels = []
    with path.open(newline="") as f:
        for row in csv.DictReader(line for line in f if not line.startswith("==")):
            if not row.get("ID", "").strip().isdigit():
                continue  # the units row
            values = {}
            for metric in _METRICS:
                text = row.get(metric, "").replace(",", "").strip()
                if not text and metric in _OPTIONAL:
                    text = "0"
                if not text:
                    raise ValueError(f"{path}: kernel {row['ID']} has no {metric} value")
                values[metric] = float(text) * _SCALE[metric]
            kernels.append((row["Kernel Name"], values))
    return kernels


def summarize(paths: list[Path], steps: int) -> str:
    """Per export: the kernels of one step in launch order, averaged over `steps` steps, then
    selective_state_update's kernels against the rest of the step."""
    out = []
    for path in paths:
        kernels = read_kernels(path)
        if not kernels or len(kernels) % steps:
            raise ValueError(f"{path}: {len(kernels)} kernels is not {steps} steps of one length")
        per_step = len(kernels) // steps
        out.append(f"{path.name}: {per_step} kernels a step, mean of {steps} steps")
        out.append(f"{'#':>3} {'kernel':<60} " + " ".join(f"{u:>10}" for u in _METRICS.values()))
        mean = [defaultdict(float) for _ in range(per_step)]
        for i, (_, values) in enumerate(kernels):
            for metric, value in values.items():
                mean[i % per_step][metric] += value / steps
        for i in range(per_step):
            name = kernels[i][0][:60]
            out.append(f"{i:>3} {name:<60} " + " ".join(f"{mean[i][m]:>10.2f}" for m in _METRICS))
        groups = {"selective_state_update": [i for i in range(per_step) if KERNEL in kernels[i][0]]}
        groups["the rest"] = [i for i in range(per_step) if i not in groups["selective_state_update"]]
        for label, idx in groups.items():
            out.append(
                f"    {label:<60} " + " ".join(f"{sum(mean[i][m] for i in idx):>10.2f}" for m in _METRICS)
            )
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="the profiled program (run it under ncu)")
    add_shape_arguments(r)
    add_batch_argument(r, (512,), several=False)
    add_layers_argument(r)
    r.add_argument("--steps", type=int, default=2)
    r.add_argument("--spec", type=int, metavar="T", help="verify steps of T tokens (buffer path)")
    r.add_argument(
        "--alone", action="store_true", help="with --spec: the verify calls back to back, no model"
    )
    r.add_argument("--config", default="table", help=f"a launch config, {LABEL_SYNTAX}, or table")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--device", help="torch device (default: the current CUDA device, else cpu)")
    s = sub.add_parser("summarize", help="per-kernel table of `ncu --csv --page raw` exports")
    s.add_argument("csv", type=Path, nargs="+")
    s.add_argument("--steps", type=int, default=2)
    args = p.parse_args(argv)
    if args.command == "run":
        return run(args)
    print(summarize(args.csv, args.steps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
