"""`ssmdecode sweep`: every candidate launch config at a few batch sizes, the seed's table.

First, at each batch, every config runs from the same inputs and initial state as
upstream_config and out and the written state are compared bit for bit: a config that
differs is marked and never recommended (on an H200, (2,4), (2,8) and (4,8) differed from
(4,4) at dstate 128). Then every config is timed by the bench method (cold L2, CUDA graph,
median of 5), the non-identical ones too, marked. The table gives microseconds per call,
configs x batches, with the fastest identical config of each batch.

--kernel mamba_ssm (or sglang) sweeps the upstream Triton kernel of an installed mamba_ssm (or
sglang) instead, through the same harness (upstream-grid configs only): the way to hold this
instrument against figures measured on an upstream kernel, such as the H200 table of
docs/measuring.md.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from tqdm import tqdm

from ssmdecode.bench.calls import bench_row, time_config, timing_inputs
from ssmdecode.bench.ceiling import Ceiling, measure_ceiling, measure_peak
from ssmdecode.bench.compare import compare_to
from ssmdecode.bench.kernels import KERNELS, kernel_function
from ssmdecode.bench.report import (
    MEANINGLESS,
    environment,
    markdown_table,
    plot_vs_batch,
    results_dir,
    write_outputs,
)
from ssmdecode.bench.spec import (
    DEFAULT_WINDOW,
    SPEC_MODES,
    compare_spec_configs,
    make_spec_inputs,
    measure_spec_ceiling,
    spec_bytes,
    time_spec_config,
)
from ssmdecode.bench.timer import method
from ssmdecode.cli_args import (
    add_batch_argument,
    add_common_arguments,
    add_config_argument,
    add_shape_arguments,
    batches_from_args,
    device_from_args,
    shapes_from_args,
)
from ssmdecode.config import LaunchConfig, candidate_configs, default_config, upstream_config
from ssmdecode.shapes import Shape

__all__ = ["add_parser", "run"]

GPU_BATCHES = (8, 128, 512)
CPU_BATCHES = (1, 3)
NOT_IDENTICAL = "≠"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="check every candidate config bit for bit, then time it",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_shape_arguments(p)
    add_batch_argument(p, GPU_BATCHES, CPU_BATCHES)
    add_config_argument(
        p,
        named=False,
        what="sweep only these configs (upstream and default are always included)",
        default_text="the --space",
    )
    p.add_argument(
        "--space",
        choices=("basic", "full", "tune"),
        default="basic",
        help="candidate_configs space when --config is not given: basic = every "
        "(BLOCK_M, warps) of the upstream grid, as the seed swept; full = basic with "
        "the slot-major grid and cache hints; tune = the tuner's space (default "
        "basic)",
    )
    p.add_argument(
        "--kernel",
        choices=KERNELS,
        default="ssmdecode",
        help="the kernel swept: ssmdecode's, or the Triton kernel of an installed "
        "mamba_ssm or sglang (upstream-grid configs only), for comparison (default "
        "ssmdecode)",
    )
    v = p.add_argument_group("speculative decoding (verify calls, bench --tokens)")
    v.add_argument(
        "--tokens", type=int, help="draft tokens a request, T: sweep verify calls of --mode instead"
    )
    v.add_argument(
        "--mode",
        choices=SPEC_MODES,
        default="buffer",
        help="the verify calls' mode (default buffer; see bench --mode)",
    )
    v.add_argument(
        "--window",
        type=int,
        default=DEFAULT_WINDOW,
        help=f"replay: the ring's window (default {DEFAULT_WINDOW})",
    )
    add_common_arguments(
        p, "folder for sweep.json, sweep.md and sweep.png (default benchmarks/results/<device_key>/)"
    )


class _SpecCeiling:
    """A verify call's stream, reported where sweep reports the same-bytes ceiling (the 1 -> T
    stream; for replay the read-write stream, the flushes' upper bound)."""

    def __init__(self, us: float, moved: int) -> None:
        self.us, self.moved = us, moved

    @property
    def tbps(self) -> float:
        return self.moved / (self.us * 1e-6) / 1e12

    def to_dict(self) -> dict[str, float]:
        return {"us": self.us, "bytes_moved": self.moved, "tbps": self.tbps}


def run(args: argparse.Namespace) -> int:
    device = device_from_args(args)
    (shape,) = shapes_from_args(args, device)
    batches = batches_from_args(args, device)
    upstream = upstream_config(shape.dstate)
    default = default_config(shape.dstate, shape.state_dtype)
    swept = args.config or candidate_configs(shape.headdim, shape.dstate, shape.state_dtype, args.space)
    configs = list(dict.fromkeys([upstream, default, *swept]))
    fn = None  # ssmdecode's selective_state_update, as verify and bench call it
    if args.kernel != "ssmdecode":
        try:
            fn = kernel_function(args.kernel)
        except ValueError as e:
            raise SystemExit(f"--kernel: {e}") from None
        bad = [c.label for c in configs if not c.upstream_grid]
        if bad:
            raise SystemExit(f"--kernel {args.kernel} runs upstream-grid configs only; got {', '.join(bad)}")
    if device.type != "cuda":
        print(MEANINGLESS)

    peak = measure_peak(device)
    results: dict[LaunchConfig, dict[int, dict[str, object]]] = {c: {} for c in configs}
    summary: list[dict[str, object]] = []
    winners: list[LaunchConfig] = []
    progress = tqdm(total=2 * len(batches) * len(configs), desc="sweep", unit="step")
    for batch in batches:
        progress.set_postfix(batch=batch, phase="bits")
        if args.tokens:  # verify calls: the bits of everything a call writes, then its streams
            if fn is not None:
                raise SystemExit("--tokens sweeps ssmdecode's kernels only")
            ceiling = _sweep_spec_batch(args, shape, batch, device, upstream, configs, results, progress)
        else:
            ceiling = _sweep_batch(args, shape, batch, device, upstream, configs, results, progress, fn)

        identical = [c for c in configs if results[c][batch]["identical"]]
        best = min(identical, key=lambda c: results[c][batch]["us"])
        winners.append(best)
        summary.append(
            {
                "batch": batch,
                "fastest_identical": best.label,
                "fastest_identical_config": best.to_dict(),
                "us": results[best][batch]["us"],
                "upstream_us": results[upstream][batch]["us"],
                "speedup_vs_upstream": results[upstream][batch]["us"] / results[best][batch]["us"],
                "ceiling": ceiling.to_dict(),
                "not_identical": [c.label for c in configs if c not in identical],
            }
        )
    progress.close()

    data = {
        "environment": environment(device, args.command_line),
        "method": {
            **method(),
            "kernel": args.kernel,
            "reference": upstream.label,
            "default": default.label,
            "identity": "out and the whole state pool after one call, bit for bit, "
            "same inputs and initial state as the reference",
            "seed": args.seed,
        },
        "shape": shape.to_dict(),
        "peak": peak.to_dict(),
        "summary": summary,
        "configs": [
            {"config": c.to_dict(), "label": c.label, "batches": {str(b): r for b, r in results[c].items()}}
            for c in configs
        ],
    }
    title = shape.label if args.kernel == "ssmdecode" else f"{shape.label}, kernel {args.kernel}"
    if args.tokens:
        title += f", verify calls ({args.mode}, T = {args.tokens})"
    markdown = _markdown(title, configs, upstream, default, batches, results, summary)
    out_dir = results_dir(args.out, device)
    paths = write_outputs(out_dir, "sweep", data, markdown)
    plotted = dict.fromkeys([upstream, default, *winners])
    series = {c.label: {b: results[c][b]["tbps"] for b in batches} for c in plotted}
    ceilings = {s["batch"]: s["ceiling"]["tbps"] for s in summary}
    paths.append(plot_vs_batch(out_dir / "sweep.png", f"sweep, {title}", series, ceilings, peak.tbps))
    print(markdown)
    print("wrote " + ", ".join(map(str, paths)))
    return 0


def _sweep_spec_batch(
    args: argparse.Namespace,
    shape: Shape,
    batch: int,
    device: torch.device,
    upstream: LaunchConfig,
    configs: list[LaunchConfig],
    results: dict[LaunchConfig, dict[int, dict[str, object]]],
    progress: tqdm,
) -> _SpecCeiling:
    """One batch of verify calls: every config's bits against upstream's, then its time
    against the call's own stream, into results; returns the batch's ceiling."""
    fresh = make_spec_inputs(
        shape, batch, args.tokens, args.mode, device, args.seed, rotation=1, window=args.window
    )
    for config, same in compare_spec_configs(fresh, upstream, configs).items():
        results[config][batch] = {"identical": same, "comparison": {"identical": same}}
    del fresh
    progress.update(len(configs))
    progress.set_postfix(batch=batch, phase="time")
    spec = make_spec_inputs(shape, batch, args.tokens, args.mode, device, args.seed, window=args.window)
    streams = measure_spec_ceiling(spec, device)
    stream = streams.get("fanout") or streams["read_write"]
    moved = spec_bytes(shape, batch, args.tokens, args.mode, window=args.window)
    ceiling = _SpecCeiling(stream.us, moved)
    for config in configs:
        timing = time_spec_config(spec, config, device)
        results[config][batch].update(
            us=timing.us,
            tbps=moved / (timing.us * 1e-6) / 1e12,
            ceiling_us=stream.us,
            fraction_of_ceiling=stream.us / timing.us,
            timing=timing.to_dict(),
        )
        progress.update()
    del spec
    return ceiling


def _sweep_batch(
    args: argparse.Namespace,
    shape: Shape,
    batch: int,
    device: torch.device,
    upstream: LaunchConfig,
    configs: list[LaunchConfig],
    results: dict[LaunchConfig, dict[int, dict[str, object]]],
    progress: tqdm,
    fn: Callable[..., object] | None,
) -> Ceiling:
    """One batch of single-token calls: every config's bits against upstream's, then its
    time against the in-place ceiling of the same bytes, into results; returns the ceiling."""
    for config, comparison in compare_to(upstream, configs, shape, batch, device, args.seed, fn=fn).items():
        results[config][batch] = {
            "identical": comparison.identical,
            "comparison": comparison.to_dict(),
        }
    progress.update(len(configs))

    progress.set_postfix(batch=batch, phase="time")
    inputs = timing_inputs(shape, batch, device, args.seed)
    ceiling = measure_ceiling(shape.state_bytes(batch), device)
    for config in configs:
        timing = time_config(inputs, config, device, fn)
        results[config][batch].update(bench_row(shape, batch, timing, ceiling))
        progress.update()
    del inputs
    return ceiling


def _markdown(
    shape_label: str,
    configs: list[LaunchConfig],
    upstream: LaunchConfig,
    default: LaunchConfig,
    batches: list[int],
    results: dict[LaunchConfig, dict[int, dict[str, object]]],
    summary: list[dict[str, object]],
) -> str:
    """The seed-style table: configs x batches in us, non-identical configs marked."""

    def name(c: LaunchConfig) -> str:
        tags = [t for t, on in (("upstream", c == upstream), ("default", c == default)) if on]
        return f"{c.label} {', '.join(tags)}" if tags else c.label

    def cell(c: LaunchConfig, b: int) -> str:
        r = results[c][b]
        return f"{r['us']:.2f}" + ("" if r["identical"] else f" {NOT_IDENTICAL}")

    rows = [[name(c), *(cell(c, b) for b in batches)] for c in configs]
    rows.append(["**fastest identical**", *(f"{s['fastest_identical']} {s['us']:.2f}" for s in summary)])
    rows.append(["speedup vs upstream", *(f"{s['speedup_vs_upstream']:.2f}x" for s in summary)])
    rows.append(["same-bytes ceiling", *(f"{s['ceiling']['us']:.2f}" for s in summary)])
    table = markdown_table(["(BLOCK_M, num_warps)", *(f"batch {b}, us" for b in batches)], rows)
    return (
        f"Shape: {shape_label}. {NOT_IDENTICAL}: out or state not bit-identical to "
        f"upstream {upstream.label} at that batch; never recommended.\n\n{table}"
    )
