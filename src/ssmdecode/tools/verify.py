"""`ssmdecode verify`: are two launch configs bit-identical, on this device, over a grid?

Default: this device's table (lookup_config) against upstream_config over the seed's grid:
heads 8, 16, 32, 64, 128 x batch 1..64, then every 8 up to 1024 (920 points), head dim 64,
state dim 128, float32 state, bfloat16 inputs, model-like inputs (ssmdecode.bench.inputs)
and a fresh state per point. Each point runs both configs from the same inputs and the same
initial state and compares out and the whole written state pool bit for bit (integer views,
so -0.0 != 0.0 and NaN payloads count). Exit 1 on any mismatch, naming the first one with
its max abs diff and max ULP distance.

--tolerance compares one config against the float64 reference (ssmdecode.reference) within
the tolerances of ssmdecode.numerics instead.

--rounding stochastic (a 16-bit --state-dtype): every call rounds its state stochastically,
both configs with the point's seed, and 'table' names the table's entries for such calls
(key "... rounding=stochastic", or round-to-nearest's where the table has none).

The comparisons are ssmdecode.bench.compare's, which sweep and tune admit configs by too.
"""

from __future__ import annotations

import argparse
import functools
import logging
from dataclasses import asdict

import torch
from tqdm import tqdm

from ssmdecode.bench.compare import (
    STRICT_OUT_DTYPE,
    against_reference,
    compare_results,
    fresh_inputs,
    reference_result,
    run_config,
)
from ssmdecode.bench.report import environment, markdown_table, results_dir, write_outputs
from ssmdecode.bench.spec import (
    DEFAULT_WINDOW,
    SPEC_MODES,
    check_spec_against_reference,
    compare_spec_configs,
    make_spec_inputs,
)
from ssmdecode.cli_args import (
    ConfigSpec,
    add_batch_argument,
    add_common_arguments,
    batches_from_args,
    device_from_args,
)
from ssmdecode.config import ROUNDINGS
from ssmdecode.numerics import TOLERANCES
from ssmdecode.ops.selective_state_update import selective_state_update
from ssmdecode.shapes import Shape, dtype_name, parse_dtype

__all__ = ["add_parser", "run"]

log = logging.getLogger(__name__)

SEED_HEADS = (8, 16, 32, 64, 128)
SEED_BATCHES = (*range(1, 65), *range(72, 1025, 8))  # 184 batch sizes
CPU_HEADS = (2, 4)
CPU_BATCHES = (1, 3)
GPU_DIMS = {"headdim": 64, "dstate": 128}
CPU_DIMS = {"headdim": 8, "dstate": 16}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "verify",
        help="bit-for-bit comparison of two launch configs over a grid",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--a",
        type=ConfigSpec.parse,
        default=ConfigSpec("table"),
        help=f"config under test: {ConfigSpec.HELP} (default: table)",
    )
    p.add_argument(
        "--b",
        type=ConfigSpec.parse,
        default=ConfigSpec("upstream"),
        help=f"config it must match bit for bit: {ConfigSpec.HELP} (default: upstream)",
    )
    p.add_argument(
        "--tolerance",
        action="store_true",
        help="compare --a against the float64 reference within per-dtype tolerances instead of against --b",
    )
    p.add_argument(
        "--rounding",
        choices=ROUNDINGS,
        default="nearest",
        help="the state stores (default nearest); stochastic: every call with rand_seed, the point's "
        "seed (a 16-bit --state-dtype, single-token calls)",
    )
    p.add_argument(
        "--heads",
        type=int,
        nargs="+",
        help=f"heads (default {' '.join(map(str, SEED_HEADS))}; {' '.join(map(str, CPU_HEADS))} on CPU)",
    )
    add_batch_argument(p, SEED_BATCHES, CPU_BATCHES, gpu_text="1..64 then every 8 up to 1024")
    p.add_argument(
        "--headdim", type=int, help=f"head dim (default {GPU_DIMS['headdim']}; {CPU_DIMS['headdim']} on CPU)"
    )
    p.add_argument(
        "--dstate", type=int, help=f"state dim (default {GPU_DIMS['dstate']}; {CPU_DIMS['dstate']} on CPU)"
    )
    p.add_argument("--ngroups", type=int, default=1, help="groups (default 1)")
    p.add_argument(
        "--state-dtype", type=parse_dtype, default=torch.float32, help="state dtype (default float32)"
    )
    p.add_argument("--dtype", type=parse_dtype, default=torch.bfloat16, help="input dtype (default bfloat16)")
    p.add_argument(
        "--out-dtype",
        type=parse_dtype,
        default=STRICT_OUT_DTYPE,
        help="dtype out is stored in for the bit comparison (default float32, the "
        "strict check: a bfloat16 out rounds most changes of the row-sum order "
        "away); --tolerance stores out in --dtype",
    )
    v = p.add_argument_group("speculative decoding (verify calls, bench --tokens)")
    v.add_argument(
        "--tokens",
        type=int,
        nargs="+",
        help="draft tokens a request, T: compare verify calls of --mode at every point, "
        "each T (their table entries: key '... mode=M tokens=T')",
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
    add_common_arguments(p, "folder for verify.json and verify.md (default benchmarks/results/<device_key>/)")


def _spec_point(
    args: argparse.Namespace, shape: Shape, batch: int, tokens: int, device: torch.device, seed: int
) -> dict[str, object]:
    """One point of verify --tokens: a fresh verify call of args.mode, --a against --b bit for
    bit (everything the call writes, out stored as float32), or --a against the reference."""
    spec = make_spec_inputs(shape, batch, tokens, args.mode, device, seed, rotation=1, window=args.window)
    cfg_a = args.a.resolve(shape, batch, device, args.mode, tokens)
    point: dict[str, object] = {
        "heads": shape.nheads,
        "batch": batch,
        "tokens": tokens,
        "mode": args.mode,
        "seed": seed,
        "a": cfg_a.label,
    }
    if args.tolerance:
        ok, line = check_spec_against_reference(spec, cfg_a)
        point["result"] = {"ok": ok, "summary": line}
    else:
        cfg_b = args.b.resolve(shape, batch, device, args.mode, tokens)
        ok = compare_spec_configs(spec, cfg_b, [cfg_a])[cfg_a]
        point["b"] = cfg_b.label
        point["result"] = {"ok": ok, "identical": ok}
    return point


def _grid(args: argparse.Namespace, device: torch.device) -> list[Shape]:
    on_gpu = device.type == "cuda"
    dims = GPU_DIMS if on_gpu else CPU_DIMS
    heads = args.heads or (SEED_HEADS if on_gpu else CPU_HEADS)
    try:
        return [
            Shape(
                nheads=h,
                headdim=args.headdim or dims["headdim"],
                dstate=args.dstate or dims["dstate"],
                ngroups=args.ngroups,
                state_dtype=args.state_dtype,
                dtype=args.dtype,
            )
            for h in heads
        ]
    except ValueError as e:
        raise SystemExit(f"ssmdecode verify: {e}") from None


def _describe(point: dict[str, object]) -> str:
    parts = [f"heads {point['heads']} batch {point['batch']}"]
    if "tokens" in point:  # a verify call's point
        parts[0] += f" T {point['tokens']} ({point['mode']})"
        result = point["result"]
        parts.append(
            result.get("summary") or ("identical" if result["ok"] else "out, state or buffer differ")
        )
        return "; ".join(parts)
    for what in ("out", "state"):
        d = point["result"][what]
        if "identical" in d and not d["identical"]:
            parts.append(
                f"{what}: {d['mismatches']} elements differ, max abs diff "
                f"{d['max_abs']:.3e}, max ULP {d['max_ulp']}"
            )
        elif "within" in d and not d["within"]:
            parts.append(
                f"{what}: max abs diff {d['max_abs']:.3e}, {d['worst_excess']:.2f}x "
                f"the tolerance (rtol {d['rtol']}, atol {d['atol']})"
            )
    return "; ".join(parts)


def run(args: argparse.Namespace) -> int:
    device = device_from_args(args)
    stochastic = args.rounding == "stochastic"
    if stochastic and (args.tokens or args.state_dtype == torch.float32):
        print(
            "ssmdecode verify: --rounding stochastic compares single-token calls with a 16-bit "
            "state (--state-dtype bfloat16 or float16, no --tokens)"
        )
        return 2
    shapes = _grid(args, device)
    batches = batches_from_args(args, device)
    points: list[dict[str, object]] = []
    failing: list[dict[str, object]] = []
    token_counts = args.tokens or [0]
    progress = tqdm(total=len(shapes) * len(batches) * len(token_counts), desc="verify", unit="point")
    for shape in shapes:
        for batch, tokens in ((b, t) for b in batches for t in token_counts):
            seed = args.seed + len(points)
            if tokens:
                point = _spec_point(args, shape, batch, tokens, device, seed)
                points.append(point)
                if not point["result"]["ok"]:
                    if not failing:
                        log.error("first mismatch: %s", _describe(point))
                    failing.append(point)
                progress.update()
                progress.set_postfix(failing=len(failing))
                continue
            inputs = fresh_inputs(shape, batch, device, seed)
            cfg_a = args.a.resolve(shape, batch, device, stochastic=stochastic)
            point: dict[str, object] = {"heads": shape.nheads, "batch": batch, "seed": seed, "a": cfg_a.label}
            fn = None
            if stochastic:
                rand_seed = torch.tensor([seed], dtype=torch.int64, device=device)
                fn = functools.partial(selective_state_update, rand_seed=rand_seed)
            if args.tolerance:
                checks = against_reference(inputs, cfg_a, reference_result(inputs), last=True, fn=fn)
                ok = all(c.within for c in checks.values())
                point["result"] = {"ok": ok, **{k: asdict(c) for k, c in checks.items()}}
            else:
                cfg_b = args.b.resolve(shape, batch, device, stochastic=stochastic)
                comparison = compare_results(
                    run_config(inputs, cfg_a, out_dtype=args.out_dtype, fn=fn),
                    run_config(inputs, cfg_b, last=True, out_dtype=args.out_dtype, fn=fn),
                )
                ok = comparison.identical
                point["b"] = cfg_b.label
                point["result"] = {"ok": ok, **comparison.to_dict()}
            points.append(point)
            if not ok:
                if not failing:
                    log.error("first mismatch: %s", _describe(point))
                failing.append(point)
            progress.update()
            progress.set_postfix(failing=len(failing))
    progress.close()

    env = environment(device, args.command_line)
    what = (
        "tolerance vs float64 reference"
        if args.tolerance
        else f"bit-identity of {args.a.text} vs {args.b.text}"
    )
    if args.tokens:
        what += f" (verify calls, mode {args.mode}, T {' '.join(map(str, args.tokens))})"
    if stochastic:
        what += " (stochastic rounding, each point's seed)"
    grid = {
        "heads": [s.nheads for s in shapes],
        "batches": list(batches),
        "headdim": shapes[0].headdim,
        "dstate": shapes[0].dstate,
        "ngroups": shapes[0].ngroups,
        "state_dtype": dtype_name(shapes[0].state_dtype),
        "dtype": dtype_name(shapes[0].dtype),
        "inputs": "model-like, fresh state per point",
        "out_dtype": None if args.tolerance else dtype_name(args.out_dtype),
    }
    data = {
        "environment": env,
        "method": {
            "check": what,
            "a": args.a.text,
            "b": None if args.tolerance else args.b.text,
            "rounding": args.rounding,
            "tolerances": ({dtype_name(d): t for d, t in TOLERANCES.items()} if args.tolerance else None),
            "compared": "out and the whole state pool after one call"
            + (" (and the intermediate-state buffer or the rings)" if args.tokens else ""),
        },
        "grid": grid,
        "points": len(points),
        "failures": len(failing),
        "first_failure": failing[0] if failing else None,
        "results": points,
    }
    summary = (
        f"{what}: {len(points) - len(failing)}/{len(points)} points pass "
        f"(heads {grid['heads']}, {len(batches)} batch sizes, P{grid['headdim']} "
        f"N{grid['dstate']} G{grid['ngroups']}, state {grid['state_dtype']}, "
        f"inputs {grid['dtype']}" + (f", out stored as {grid['out_dtype']})" if grid["out_dtype"] else ")")
    )
    rows = [
        [p["heads"], p["batch"], p["a"], p.get("b", "float64 reference"), _describe(p)] for p in failing[:50]
    ]
    markdown = f"{summary}\n\n"
    if rows:
        markdown += "Failing points (first 50):\n\n" + markdown_table(
            ["heads", "batch", "a", "b", "difference"], rows
        )
    paths = write_outputs(results_dir(args.out, device), "verify", data, markdown)
    print(summary)
    if failing:
        print(f"first failing point: {_describe(failing[0])}")
    print("wrote " + ", ".join(map(str, paths)))
    return 1 if failing else 0
