"""`ssmdecode accuracy`: how far a 16-bit SSM state drifts over a long decode. A random-weight
Mamba2 LM (ssmdecode.models.mamba2, one rank's shapes of a preset) decodes --steps steps with
its state in float32 (fp32), bfloat16 and float16, each rounded to nearest (RTN) or
stochastically (SR), beside the same LM in float64 (weights cast, every activation and both
state pools in float64). Same weights, same first tokens, zero state at the start.

Teacher-forced rows (--rows of them): every variant is fed the float64 run's greedy tokens, so
all see the same inputs; reported per step, the SSM state's relative error ||s - s64|| / ||s64||
over all layers and those rows' slots, the logits' relative error, and the share of tokens
whose argmax differs from fp32's and from float64's. Free-running rows (as many again): each
variant decodes its own greedy tokens; reported, the first step at which its sequence departs
from fp32's and from float64's, per row.

--decay slow (the default) redraws A so that A*dt spans 1e-5 to 0.1: heads that remember past
the decode, as trained models have, where a 16-bit state's rounding accumulates; --decay init
keeps Mamba2's initialization (A*dt from 1e-3 to 1.6, memories under a thousand steps).
--dtype sets the activations' dtype (default: the preset's, bfloat16); --dtype float32 leaves
the state's rounding as the only 16-bit one.

Writes accuracy.json (every variant's curves at about --points steps spaced on a log axis and
its summary over all steps; the command, versions, date and device), accuracy.md and
accuracy.png under --out. On CPU the kernels run under Triton's interpreter at a tiny shape:
the numbers are real but of a toy model, and a step of the defaults takes about half a second.
"""

from __future__ import annotations

import argparse
import logging
import time

import torch
from tqdm import tqdm

import ssmdecode
from ssmdecode.bench.accuracy import (
    BASELINE,
    DECAYS,
    DEFAULT_VARIANTS,
    VARIANTS,
    decay_summary,
    plot_accuracy,
    run_accuracy,
    set_decay,
)
from ssmdecode.bench.report import environment, markdown_table, results_dir, write_outputs
from ssmdecode.bench.step import CPU_D_MODEL, model_dims
from ssmdecode.cli_args import (
    add_common_arguments,
    add_shape_arguments,
    device_from_args,
    int_option,
    shapes_from_args,
)
from ssmdecode.models.mamba2 import Mamba2LM
from ssmdecode.ops.selective_state_update.checks import DEFAULT_PHILOX_ROUNDS, PHILOX_ROUNDS_RANGE
from ssmdecode.shapes import dtype_name

__all__ = ["add_parser", "run"]

log = logging.getLogger(__name__)

DEFAULTS = {  # (GPU, CPU)
    "steps": (4096, 8),
    "layers": (4, 1),
    "rows": (8, 1),
    "vocab": (32000, 64),
    "points": (256, 256),
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "accuracy",
        help="fp32, bf16 and fp16 SSM states (round-to-nearest and stochastic) against float64 "
        "over a long decode",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_shape_arguments(p)
    p.add_argument("--d-model", type=int, help=f"model width (default: the preset's; {CPU_D_MODEL} on CPU)")
    for name, what in (
        ("steps", "decode steps"),
        ("layers", "Mamba2 layers"),
        ("rows", "teacher-forced rows (as many free-running rows run beside them)"),
        ("vocab", "vocabulary"),
        ("points", "steps the curves keep, spaced on a log axis"),
    ):
        gpu, cpu = DEFAULTS[name]
        default = f"{gpu}" if gpu == cpu else f"{gpu} on a GPU, {cpu} on CPU"
        p.add_argument("--" + name, type=int, help=f"{what} (default: {default})")
    p.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        default=list(DEFAULT_VARIANTS),
        metavar="VARIANT",
        help=f"state variants of {', '.join(VARIANTS)}; {BASELINE} is always run, first (default: "
        f"{' '.join(DEFAULT_VARIANTS)}; the replay variants decode by selective_state_replay, exact "
        "or fast route, their state the checkpoint with the cached tokens replayed)",
    )
    p.add_argument(
        "--decay",
        choices=list(DECAYS),
        default="slow",
        help="A's draw: slow (A*dt from 1e-5 to 0.1, the default) or init (Mamba2's, 1e-3 to 1.6)",
    )
    p.add_argument(
        "--sr-seed", type=int, help="seed of the stochastic-rounding seeds' generator (default: --seed)"
    )
    p.add_argument(
        "--philox-rounds",
        type=int,
        default=DEFAULT_PHILOX_ROUNDS,
        help="Philox rounds of the stochastic variants' rounding, "
        f"{PHILOX_ROUNDS_RANGE[0]} to {PHILOX_ROUNDS_RANGE[1]} "
        f"(default: {DEFAULT_PHILOX_ROUNDS}, the kernels')",
    )
    add_common_arguments(
        p, "folder for accuracy.json/.md/.png (default benchmarks/results/<device_key>/accuracy/)"
    )


def _error(message: str) -> SystemExit:
    return SystemExit(f"ssmdecode accuracy: {message}")


def _cell(v: float | None, fmt: str = ".2e") -> str:
    return "-" if v is None else format(v, fmt)


def _departures(values: list[int | None], steps: int) -> str:
    """Per-row first departures as 'earliest / median', '>N' for rows that never departed."""
    ordered = sorted(values, key=lambda v: steps + 1 if v is None else v)

    def said(v: int | None) -> str:
        return f">{steps}" if v is None else str(v)

    return f"{said(ordered[0])} / {said(ordered[len(ordered) // 2])}"


def _markdown(data: dict[str, object], steps: int) -> str:
    s = data["model"]
    lines = [
        f"Shape: {s['shape_label']}, d_model {s['d_model']}, {s['layers']} layers, vocab "
        f"{s['vocab']}, decay {s['decay']}; {steps} steps, {data['rows']} teacher-forced and "
        f"{data['rows']} free-running rows; SR with {data['method'].get('philox_rounds', 10)} "
        "Philox rounds. Errors against the float64 run (mean / last over "
        "the steps); argmax: share of teacher-forced tokens; free run: first step whose greedy "
        "token departs, earliest / median over rows.\n",
    ]
    rows = []
    for name, v in data["variants"].items():
        m = v["summary"]
        st, lg = m["state_rel_error"], m["logits_rel_error"]
        rows.append(
            [
                name,
                f"{_cell(st['mean'])} / {_cell(st['last'])}",
                f"{_cell(lg['mean'])} / {_cell(lg['last'])}",
                f"{100 * m[f'argmax_differs_from_{BASELINE}']:.3f}",
                f"{100 * m['argmax_differs_from_float64']:.3f}",
                _departures(m[f"free_run_first_departure_from_{BASELINE}"], steps),
                _departures(m["free_run_first_departure_from_float64"], steps),
            ]
        )
    lines.append(
        markdown_table(
            [
                "state",
                "state rel. error",
                "logits rel. error",
                f"argmax != {BASELINE} %",
                "argmax != float64 %",
                f"free run departs from {BASELINE}",
                "free run departs from float64",
            ],
            rows,
        )
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    device = device_from_args(args)
    if args.state_dtype is not None:
        raise _error("--state-dtype: the variants set the state's dtype (choose them with --variants)")
    if args.d_model is not None and args.d_model < 1:
        raise _error(f"--d-model must be >= 1, got {args.d_model}")
    (shape,) = shapes_from_args(args, device)
    dims = model_dims(shape, args.d_model, device)
    steps, layers, rows, vocab, points = (
        int_option(args, name, DEFAULTS[name], device, "accuracy")
        for name in ("steps", "layers", "rows", "vocab", "points")
    )
    names = [BASELINE, *dict.fromkeys(n for n in args.variants if n != BASELINE)]
    variants = [VARIANTS[n] for n in names]
    sr_seed = args.seed if args.sr_seed is None else args.sr_seed
    lo, hi = PHILOX_ROUNDS_RANGE
    if not lo <= args.philox_rounds <= hi:
        raise _error(f"--philox-rounds is {args.philox_rounds}; expected {lo} to {hi}")

    lm = Mamba2LM(dims, layers, vocab, slots=2, device=device, seed=args.seed)
    set_decay(lm, args.decay, args.seed)
    start = time.perf_counter()
    with torch.inference_mode(), tqdm(total=steps, desc="accuracy", unit="step") as bar:
        result = run_accuracy(
            lm, variants, steps, rows, args.seed, points, sr_seed, bar.update, args.philox_rounds
        )
    wall = time.perf_counter() - start
    log.info("%d steps of %d variants in %.1f s", steps, len(variants), wall)

    data: dict[str, object] = {
        "environment": {**environment(device, args.command_line), "ssmdecode": ssmdecode.__version__},
        "method": {
            "model": f"random-weight Mamba2 LM (ssmdecode.models.mamba2), {layers} layers",
            "reference": "the same weights cast to float64; every activation, the SSM and the conv "
            "state in float64 (ssmdecode.bench.accuracy.Float64LM)",
            "variants": "the same weights and inputs, activations in the shape's dtype, the SSM "
            "state in the variant's dtype: RTN rounds each store to nearest, SR stochastically "
            "(rand_seed: a fresh int64 seed a layer and step)",
            "teacher_forced": "rows fed the float64 run's greedy tokens: state and logits errors "
            "against float64, argmax comparisons",
            "free_running": "as many rows fed each variant's own greedy tokens from the same first "
            "token: the first step (1-based) whose token departs, per row (null: never)",
            "state_rel_error": "||s - s64|| / ||s64|| over all layers and the teacher-forced rows' slots",
            "logits_rel_error": "||l - l64|| / ||l64|| over the teacher-forced rows",
            "argmax_curves": "share of teacher-forced tokens up to the step whose argmax differs",
            "seed": args.seed,
            "sr_seed": sr_seed,
            "philox_rounds": args.philox_rounds,
        },
        "model": {
            "shape": {**shape.to_dict(), "state_dtype": "per variant"},
            "shape_label": f"{shape.name + ' ' if shape.name else ''}H{shape.nheads}-P{shape.headdim}-"
            f"N{shape.dstate}-G{shape.ngroups}, activations {dtype_name(shape.dtype)}",
            "d_model": dims.d_model,
            "d_conv": dims.d_conv,
            "layers": layers,
            "vocab": vocab,
            "decay": args.decay,
            "decay_rates": decay_summary(lm, steps),
        },
        "steps": steps,
        "rows": rows,
        "wall_s": wall,
        **result,
    }
    markdown = _markdown(data, steps)
    out_dir = args.out if args.out is not None else results_dir(None, device) / "accuracy"
    paths = write_outputs(out_dir, "accuracy", data, markdown)
    paths.append(
        plot_accuracy(
            out_dir / "accuracy.png",
            f"{layers}-layer Mamba2 LM, {data['model']['shape_label']}, decay {args.decay}: "
            "each state against float64",
            data,
        )
    )
    print(markdown)
    print("wrote " + ", ".join(map(str, paths)))
    return 0
