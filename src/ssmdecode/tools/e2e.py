"""`ssmdecode e2e`: selective_state_update inside whole decode steps of a Mamba2 layer stack
(ssmdecode.models.mamba2) at one rank's shapes of a real model, with random weights.

Timing (the default): for each batch size and launch config, one step of --layers layers is
timed by the cold-L2 CUDA-graph timer (ssmdecode.bench.timer): K steps, step i on slot set i,
the K disjoint slot sets holding at least 3x the L2 of state, so every layer reads its states
from HBM as in serving. Reported: step time, tokens/s (= batch / step time), and the share of
the step's CUDA kernel time spent in selective_state_update, from torch.profiler over 5 eager
steps on cold slot sets (kernel times do not depend on how the kernels are launched; eager
launches keep the op names in the trace). --trace PATH writes those profiles as Chrome traces
(open in ui.perfetto.dev), one per config and batch: PATH's name gets -<config>-b<batch>.
Configs: the upstream kernel's default, the seed's (8,1), and this device's table (the step
gets config=None and the kernel looks the table up, as a caller would). --pdl times each
config a second time with pdl=True (row "<config>+pdl"), in the same run: what programmatic
dependent launch gains when the kernel before the SSU is an ordinary one (here the conv's).
--slot-order does the same with each step computing slot_order(slots) once and passing it to
every layer's SSU as batch_order (row "<config>+order"; the sort is part of the step time).

Greedy identity (--greedy): a random-weight Mamba2 LM (embedding, the stack, final RMSNorm, LM
head) decodes --new-tokens tokens greedily for --prompts prompts of different lengths (right-
aligned; rows wait in the null slot until their prompt starts) under two configs (default:
upstream against the table) and compares every generated token id and its log-prob bit for bit.
The first config also runs twice, as a control: a difference there means the step itself is not
reproducible and the comparison says nothing. Exit 1 on any difference.

Speculative decoding (--spec T): verify steps of T tokens a request through the same stack
(ssmdecode.models.mamba2_spec), the conv state kept as engines keep it for multi-token verify,
accepted counts uniform in 1 .. T, each step and its acceptance timed as a CUDA graph: (a) the
intermediate-state path at upstream's config (every draft's state into a buffer, then the
engine's copy of the accepted state into the pool), (b) the same at the table's configs, (c)
replay (selective_state_replay; the state written once a window), (d) replay by its fast route
where this tree has it (float32-accurate, not the bits). Reported: step time, tokens a second
(batch x mean accepted / step time) and the SSM kernels' share. With --greedy, greedy
speculative decoding of a random-weight LM against fixed drafts (plain greedy decoding's own
tokens with every third draft wrong), (a), (b) and (c) compared token for token and log-prob
for log-prob, bit for bit; (d) by the share of its token ids identical to (a)'s and its first
difference.

Replay decode (--replay): the same stack decoding with selective_state_replay, one token a
request (ssmdecode.models.mamba2, path "replay"; "replay-fast" too where this tree has the fast
route), rings of --replay-window + 1 rows, replay_advance once a step, each slot's cursors drawn
from the steady state: timed beside the configs (rows "replay exact" / "replay fast"; give
--config table to hold them to the single-token table path). With --greedy: greedy decoding by
the table path, exact replay and fast replay, each compared with exact replay token for token
(the share identical and the first divergence), and every path's logits against a float64 copy
of the model fed exact replay's tokens (teacher-forced; the largest error over the largest
|logit|, and the mean error over the mean |logit|).

On CPU the kernels run under Triton's interpreter at a tiny shape: no CUDA graph, no kernel
profile, and the timings mean nothing; the run only exercises the code.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Mapping
from pathlib import Path

import torch

from ssmdecode.bench.accuracy import Float64LM
from ssmdecode.bench.report import (
    MEANINGLESS,
    environment,
    markdown_table,
    plot_vs_batch,
    results_dir,
    write_outputs,
)
from ssmdecode.bench.spec_step import SSM_KERNELS, SpecStepBench
from ssmdecode.bench.step import (
    CPU_D_MODEL,
    PROFILED_STEPS,
    StepBench,
    StepVariant,
    model_dims,
    profile_step,
    step_options,
)
from ssmdecode.bench.timer import Timing, interleaved, median_timing, method
from ssmdecode.cli_args import (
    STEP_LAYERS,
    ConfigSpec,
    add_batch_argument,
    add_common_arguments,
    add_config_argument,
    add_layers_argument,
    add_shape_arguments,
    batches_from_args,
    device_from_args,
    int_option,
    shapes_from_args,
)
from ssmdecode.config import KERNEL, LaunchConfig
from ssmdecode.models.mamba2 import (
    NULL_SLOT,
    REPLAY_WINDOW,
    Mamba2Dims,
    Mamba2LM,
    fast_replay_available,
    greedy_generate,
)
from ssmdecode.models.mamba2_spec import Mamba2VerifyLM, speculative_greedy
from ssmdecode.numerics import bit_diff, bits
from ssmdecode.shapes import Shape

__all__ = ["add_parser", "run"]

log = logging.getLogger(__name__)

GPU_BATCHES = (1, 8, 32, 128, 512)
CPU_BATCHES = (3,)
# CPU (interpreter) sizes: the tiny shape of ssmdecode.shapes, a tiny model width, few layers.
DEFAULTS = {  # (GPU, CPU)
    "layers": STEP_LAYERS,
    "prompts": (8, 3),
    "max_prompt_len": (64, 4),
    "new_tokens": (32, 3),
    "vocab": (32000, 64),
}
TIMING_CONFIGS = ("upstream", "8,1", "table")
REPLAY_ROWS = {"replay": "replay exact", "replay-fast": "replay fast", "table": "table"}
GREEDY_CONFIGS = ("upstream", "table")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "e2e",
        help="selective_state_update inside decode steps of a Mamba2 layer stack",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_shape_arguments(p)
    p.add_argument("--d-model", type=int, help=f"model width (default: the preset's; {CPU_D_MODEL} on CPU)")
    add_layers_argument(p)
    add_batch_argument(p, GPU_BATCHES, CPU_BATCHES)
    add_config_argument(p, named=True, what="configs to time", default=TIMING_CONFIGS)
    p.add_argument(
        "--pdl", action="store_true", help="also time each config with pdl=True (rows <config>+pdl)"
    )
    p.add_argument(
        "--slot-order",
        action="store_true",
        help="also time each config with batch_order=slot_order(slots), computed "
        "once per step (rows <config>+order)",
    )
    p.add_argument(
        "--trace", type=Path, help="write the profiled steps as Chrome traces, PATH-<config>-b<batch>.json"
    )
    g = p.add_argument_group("greedy identity (--greedy)")
    g.add_argument(
        "--greedy",
        action="store_true",
        help="compare greedy decoding of a random-weight LM under two configs",
    )
    g.add_argument(
        "--greedy-configs",
        type=ConfigSpec.parse,
        nargs=2,
        default=[ConfigSpec(c) for c in GREEDY_CONFIGS],
        metavar=("A", "B"),
        help=f"the two configs: {ConfigSpec.HELP} (default: {' '.join(GREEDY_CONFIGS)})",
    )
    for name, what in (
        ("prompts", "prompts, the batch"),
        ("max_prompt_len", "longest prompt"),
        ("new_tokens", "tokens generated per prompt"),
        ("vocab", "vocabulary"),
    ):
        gpu, cpu = DEFAULTS[name]
        g.add_argument(
            "--" + name.replace("_", "-"), type=int, help=f"{what} (default: {gpu} on a GPU, {cpu} on CPU)"
        )
    r = p.add_argument_group("replay decode (--replay)")
    r.add_argument(
        "--replay",
        action="store_true",
        help="also decode by selective_state_replay (T = 1): exact, and fast where this tree has it",
    )
    r.add_argument(
        "--replay-window",
        type=int,
        default=REPLAY_WINDOW,
        help=f"replay decode: cached tokens a ring holds (default {REPLAY_WINDOW}; a flush once a window)",
    )
    v = p.add_argument_group("speculative decoding (--spec T)")
    v.add_argument(
        "--spec",
        type=int,
        metavar="T",
        help="verify steps of T draft tokens a request: the intermediate-state path at "
        "upstream's and the table's configs against replay",
    )
    v.add_argument(
        "--window",
        type=int,
        default=8,
        help="replay: cached tokens a ring holds besides the T drafts (default 8)",
    )
    v.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="time the ways of each batch in this many interleaved rounds (odd rounds "
        "backwards) and report each one's median (default 1)",
    )
    add_common_arguments(
        p, "folder for e2e.json/.md/.png or e2e-greedy.json/.md (default benchmarks/results/<device_key>/)"
    )


def option_or_default(args: argparse.Namespace, name: str, device: torch.device) -> int:
    """An integer option of DEFAULTS, else its GPU or CPU default; must be >= 1."""
    return int_option(args, name, DEFAULTS[name], device, "e2e")


def _dims(args: argparse.Namespace, device: torch.device) -> Mamba2Dims:
    """The rank's layer sizes: the shape arguments, and the width of the preset they name."""
    (shape,) = shapes_from_args(args, device)
    return model_dims(shape, args.d_model, device)


def _step_config(
    spec: ConfigSpec, shape: Shape, batch: int, device: torch.device
) -> tuple[LaunchConfig | None, LaunchConfig]:
    """(what the step is given, what the kernel runs): 'table' gives None, so the kernel looks
    its table up itself; the second item is the config that lookup resolves to."""
    resolved = spec.resolve(shape, batch, device)
    return (None if spec.text == "table" else resolved), resolved


def _trace_path(trace: Path, name: str, batch: int) -> Path:
    tag = re.sub(r"[^0-9A-Za-z]+", "_", name)
    return trace.with_name(f"{trace.stem}-{tag}-b{batch}{trace.suffix or '.json'}")


def _step_row(
    name: str,
    launch: str,
    launch_config: dict[str, object] | None,
    variant: str | None,
    batch: int,
    timing: Timing,
    share: Mapping[str, float | None],
    trace: Path | None,
) -> dict[str, object]:
    """One decode-step row of the report: the config or path, its step time and tokens/s, and
    the SSM kernels' share of it."""
    ssu = share["ssu_us_per_step"]
    return {
        "config": name,
        "launch": launch,
        "launch_config": launch_config,
        "variant": variant,
        "batch": batch,
        "step_us": timing.us,
        "tokens_per_s": batch / (timing.us * 1e-6),
        "vs_first": None,
        **share,
        "ssu_share_of_step": ssu / timing.us if ssu is not None else None,
        "timing": timing.to_dict(),
        "trace": str(trace) if trace is not None else None,
    }


def _time_batch(
    dims: Mamba2Dims,
    layers: int,
    batch: int,
    specs: list[ConfigSpec],
    device: torch.device,
    seed: int,
    trace: Path | None,
    variants: tuple[StepVariant, ...] = (None,),
    replay_paths: tuple[str, ...] = (),
    replay_window: int = REPLAY_WINDOW,
) -> list[dict[str, object]]:
    """Every config's step time and kernel share at one batch size, on one stack whose pools
    hold K disjoint slot sets of `batch` slots (slot 0 stays the null slot); then each replay
    decode path's on a stack of its own (its SSM share: every selective_state* kernel)."""
    bench = StepBench.build(dims, layers, batch, device, seed)
    rows: list[dict[str, object]] = []
    for spec, variant in [(spec, v) for spec in specs for v in variants]:
        config, resolved = _step_config(spec, dims.shape, batch, device)
        timing = bench.time(config, **step_options(variant))
        name = spec.text + (f"+{variant}" if variant else "")
        path = _trace_path(trace, name, batch) if trace is not None else None
        share = profile_step(bench, config, path, variant)
        rows.append(_step_row(name, resolved.label, resolved.to_dict(), variant, batch, timing, share, path))
        log.info("%s %s batch %d: %.2f us per step", name, resolved.label, batch, timing.us)
    for path in replay_paths:
        replay = StepBench.build(dims, layers, batch, device, seed, path=path, window=replay_window)
        timing = replay.time(None)
        name = REPLAY_ROWS[path]
        trace_to = _trace_path(trace, name, batch) if trace is not None else None
        share = profile_step(replay, None, trace_to, match=SSM_KERNELS)
        launch = f"replay table, window {replay_window}"
        rows.append(_step_row(name, launch, None, path, batch, timing, share, trace_to))
        log.info("%s batch %d: %.2f us per step", name, batch, timing.us)
        del replay
    for row in rows:
        row["vs_first"] = rows[0]["step_us"] / row["step_us"]
    return rows


def _replay_paths(args: argparse.Namespace) -> tuple[str, ...]:
    """The replay decode paths --replay asks for and this tree has."""
    if not args.replay:
        return ()
    return ("replay", "replay-fast") if fast_replay_available() else ("replay",)


def _run_timing(args: argparse.Namespace, dims: Mamba2Dims, layers: int, device: torch.device) -> int:
    rows: list[dict[str, object]] = []
    for batch in batches_from_args(args, device):
        variants = (None, *(["pdl"] if args.pdl else []), *(["order"] if args.slot_order else []))
        rows += _time_batch(
            dims,
            layers,
            batch,
            args.config,
            device,
            args.seed,
            args.trace,
            variants,
            _replay_paths(args),
            args.replay_window,
        )

    data = {
        "environment": environment(device, args.command_line),
        "method": {
            **method(),
            "step": f"{layers} Mamba2 layers (ssmdecode.models.mamba2)",
            "tokens_per_s": "batch / step time",
            "ssu_share": f"device time with a kernel named *{KERNEL}* running (replay rows: "
            f"*{SSM_KERNELS}*) / device time with any kernel running, torch.profiler over "
            f"{PROFILED_STEPS} eager steps on cold slot sets; kernels that overlap count once",
            "ssu_share_of_step": "the profiled selective_state_update time per step / the graphed step time",
            "variants": {
                "pdl": "rows <config>+pdl: calls with pdl=True",
                "order": "rows <config>+order: batch_order=slot_order(slots), computed once per step",
            },
            "seed": args.seed,
        },
        "shape": dims.shape.to_dict(),
        "d_model": dims.d_model,
        "d_conv": dims.d_conv,
        "layers": layers,
        "rows": rows,
    }

    def pct(v: object) -> float | None:
        return 100 * v if isinstance(v, float) else None

    table = markdown_table(
        [
            "config",
            "launch",
            "batch",
            "step us",
            "tokens/s",
            "x vs first",
            "SSU % of kernels",
            "SSU us/step",
            "SSU % of step",
        ],
        [
            [
                r["config"],
                r["launch"],
                r["batch"],
                r["step_us"],
                r["tokens_per_s"],
                r["vs_first"],
                pct(r["ssu_share"]),
                r["ssu_us_per_step"],
                pct(r["ssu_share_of_step"]),
            ]
            for r in rows
        ],
    )
    markdown = (
        f"Shape: {dims.shape.label}, d_model {dims.d_model}, {layers} layers per step. "
        f"x vs first: step time of the first config / this one.\n\n{table}"
    )
    out_dir = results_dir(args.out, device)
    paths = write_outputs(out_dir, "e2e", data, markdown)
    series: dict[str, dict[int, float]] = {}
    for r in rows:
        series.setdefault(r["config"], {})[r["batch"]] = r["tokens_per_s"]
    paths.append(
        plot_vs_batch(
            out_dir / "e2e.png",
            f"{layers}-layer Mamba2 decode step, {dims.shape.label}",
            series,
            ylabel="tokens/s",
        )
    )
    print(markdown)
    print("wrote " + ", ".join(map(str, paths)))
    return 0


def _prompts(count: int, max_len: int, vocab: int, seed: int) -> list[list[int]]:
    """Random prompts with lengths in [1, max_len]; the first has max_len tokens and the last
    one token, so rows join at different steps whenever max_len > 1."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_len + 1, (count,), generator=gen).tolist()
    lengths[0], lengths[-1] = max_len, 1 if count > 1 else max_len
    return [torch.randint(vocab, (n,), generator=gen).tolist() for n in lengths]


def _first_difference(
    ids_a: torch.Tensor, ids_b: torch.Tensor, lp_a: torch.Tensor, lp_b: torch.Tensor
) -> list[int] | None:
    """[prompt, token] of the first generated position where the ids or log-prob bits differ."""
    differ = (ids_a != ids_b) | (bits(lp_a) != bits(lp_b))
    where = differ.nonzero()
    return where[0].tolist() if len(where) else None


def _run_greedy(args: argparse.Namespace, dims: Mamba2Dims, layers: int, device: torch.device) -> int:
    count = option_or_default(args, "prompts", device)
    max_len = option_or_default(args, "max_prompt_len", device)
    new_tokens = option_or_default(args, "new_tokens", device)
    vocab = option_or_default(args, "vocab", device)
    prompts = _prompts(count, max_len, vocab, args.seed)
    lm = Mamba2LM(dims, layers, vocab, slots=count + 1, device=device, seed=args.seed)

    spec_a, spec_b = args.greedy_configs
    runs = {}
    for key, spec in (("a", spec_a), ("control", spec_a), ("b", spec_b)):
        config, resolved = _step_config(spec, dims.shape, count, device)
        ids, logprobs = greedy_generate(lm, prompts, new_tokens, config)
        runs[key] = {
            "spec": spec.text,
            "launch": resolved.label,
            "ids": ids.cpu(),
            "logprobs": logprobs.cpu(),
        }

    def compare(x: str, y: str) -> dict[str, object]:
        a, b = runs[x], runs[y]
        lp = bit_diff(a["logprobs"], b["logprobs"])
        id_mismatches = int((a["ids"] != b["ids"]).sum())
        return {
            "identical": id_mismatches == 0 and lp.identical,
            "token_id_mismatches": id_mismatches,
            "logprob_mismatches": lp.mismatches,
            "logprob_max_abs_diff": lp.max_abs,
            "first_difference": _first_difference(a["ids"], b["ids"], a["logprobs"], b["logprobs"]),
        }

    control, result = compare("a", "control"), compare("a", "b")
    compared = count * new_tokens
    data = {
        "environment": environment(device, args.command_line),
        "method": {
            "model": f"random-weight Mamba2 LM, {layers} layers, vocab {vocab}",
            "decoding": "greedy from zero state; prompts right-aligned, waiting rows "
            "in the null slot; prefill by decode steps",
            "compared": "every generated token id and its float32 log-prob, bit for bit",
            "control": "config A run twice",
            "seed": args.seed,
        },
        "shape": dims.shape.to_dict(),
        "d_model": dims.d_model,
        "layers": layers,
        "prompt_lengths": [len(p) for p in prompts],
        "new_tokens": new_tokens,
        "configs": {k: {"spec": runs[k]["spec"], "launch": runs[k]["launch"]} for k in ("a", "b")},
        "tokens_compared": compared,
        "control": control,
        "result": result,
        "identical": control["identical"] and result["identical"],
    }

    def line(name: str, c: Mapping[str, object]) -> list[object]:
        return [
            name,
            "identical" if c["identical"] else "DIFFERENT",
            compared,
            c["token_id_mismatches"],
            c["logprob_mismatches"],
            c["first_difference"],
        ]

    a_name = f"{runs['a']['spec']} {runs['a']['launch']}"
    b_name = f"{runs['b']['spec']} {runs['b']['launch']}"
    markdown = (
        f"Shape: {dims.shape.label}, d_model {dims.d_model}, {layers} layers, vocab {vocab}; "
        f"{count} prompts of {min(map(len, prompts))} to {max_len} tokens, {new_tokens} new "
        f"tokens each: {compared} token ids and {compared} log-probs compared per pair.\n\n"
        + markdown_table(
            [
                "pair",
                "verdict",
                "tokens",
                "id mismatches",
                "log-prob mismatches",
                "first difference [prompt, token]",
            ],
            [line(f"{a_name} vs itself (control)", control), line(f"{a_name} vs {b_name}", result)],
        )
    )
    paths = write_outputs(results_dir(args.out, device), "e2e-greedy", data, markdown)
    print(markdown)
    print("wrote " + ", ".join(map(str, paths)))
    if not control["identical"]:
        print(
            "the control differs: the decode step is not reproducible on this machine, so "
            "the comparison says nothing"
        )
    return 0 if data["identical"] else 1


def _teacher_forced_errors(
    lm: Mamba2LM, f64: Float64LM, prompts: list[list[int]], ids: torch.Tensor
) -> dict[str, float]:
    """lm's and f64's logits fed the same tokens, greedy_generate's schedule (prompts right-
    aligned, then ids [R, n] one a step): the largest |error| over the largest |float64 logit|,
    and the mean |error| over the mean |float64 logit|, over every generated position."""
    device = lm.stack.device
    steps, rows, n_new = max(map(len, prompts)), len(prompts), ids.shape[1]
    tokens = torch.zeros(steps, rows, dtype=torch.int64)
    slots = torch.full((steps, rows), NULL_SLOT, dtype=torch.int64)
    for r, prompt in enumerate(prompts):
        tokens[steps - len(prompt) :, r] = torch.tensor(prompt, dtype=torch.int64)
        slots[steps - len(prompt) :, r] = r + 1
    tokens, slots, ids = tokens.to(device), slots.to(device), ids.to(device)
    lm.stack.reset_state()
    for t in (*f64.ssm_state, *f64.conv_state):
        t.zero_()
    worst = scale = err_sum = ref_sum = 0.0
    count = 0
    for t in range(steps + n_new - 1):
        step_tokens, step_slots = (tokens[t], slots[t]) if t < steps else (ids[:, t - steps], slots[-1])
        got, want = lm.step(step_tokens, step_slots).double(), f64.step(step_tokens, step_slots)
        if t >= steps - 1:  # the logits of a generated token
            err = (got - want).abs()
            worst, scale = max(worst, float(err.max())), max(scale, float(want.abs().max()))
            err_sum, ref_sum, count = err_sum + float(err.sum()), ref_sum + float(want.abs().sum()), count + 1
    return {"max_rel": worst / scale if scale else 0.0, "mean_rel": err_sum / ref_sum if ref_sum else 0.0}


def _run_replay_greedy(args: argparse.Namespace, dims: Mamba2Dims, layers: int, device: torch.device) -> int:
    """--greedy --replay: the table path, exact replay and fast replay, greedy, against exact
    replay's tokens and a float64 copy's logits (see the module docstring)."""
    count = option_or_default(args, "prompts", device)
    max_len = option_or_default(args, "max_prompt_len", device)
    new_tokens = option_or_default(args, "new_tokens", device)
    vocab = option_or_default(args, "vocab", device)
    prompts = _prompts(count, max_len, vocab, args.seed)
    paths = ("table", *_replay_paths(args))
    runs: dict[str, dict[str, object]] = {}
    for path in paths:
        lm = Mamba2LM(dims, layers, vocab, count + 1, device, args.seed, path=path, window=args.replay_window)
        ids, logprobs = greedy_generate(lm, prompts, new_tokens)
        runs[path] = {"lm": lm, "ids": ids.cpu(), "logprobs": logprobs.cpu()}
    f64 = Float64LM(runs["replay"]["lm"], count + 1)
    exact_ids = runs["replay"]["ids"]
    results: dict[str, dict[str, object]] = {}
    for path in paths:
        ids = runs[path]["ids"]
        same = ids == exact_ids
        where = (~same).nonzero()
        results[path] = {
            "share_identical_to_exact_replay": float(same.float().mean()),
            "first_divergence": where[0].tolist() if len(where) else None,
            "bit_identical_to_exact_replay": bool(
                same.all() and torch.equal(bits(runs[path]["logprobs"]), bits(runs["replay"]["logprobs"]))
            ),
            "logits_vs_float64": _teacher_forced_errors(runs[path]["lm"], f64, prompts, exact_ids),
        }
    data = {
        "environment": environment(device, args.command_line),
        "method": {
            "model": f"random-weight Mamba2 LM, {layers} layers, vocab {vocab}",
            "decoding": "greedy from zero state; prompts right-aligned, waiting rows in the null slot; "
            "prefill by decode steps",
            "paths": {p: REPLAY_ROWS[p] for p in paths},
            "compared": "each path's token ids against exact replay's; logits teacher-forced on exact "
            "replay's tokens against the model in float64",
            "replay_window": args.replay_window,
            "seed": args.seed,
        },
        "shape": dims.shape.to_dict(),
        "d_model": dims.d_model,
        "layers": layers,
        "prompt_lengths": [len(p) for p in prompts],
        "new_tokens": new_tokens,
        "tokens_compared": count * new_tokens,
        "results": {REPLAY_ROWS[p]: r for p, r in results.items()},
    }
    markdown = (
        f"Shape: {dims.shape.label}, d_model {dims.d_model}, {layers} layers, vocab {vocab}; {count} "
        f"prompts of {min(map(len, prompts))} to {max_len} tokens, {new_tokens} new tokens each; "
        f"replay window {args.replay_window}.\n\n"
        + markdown_table(
            [
                "path",
                "tokens identical to exact replay",
                "first divergence [prompt, token]",
                "bit-identical",
                "logits: max err / max abs logit",
                "mean err / mean abs logit",
            ],
            [
                [
                    REPLAY_ROWS[p],
                    f"{100 * r['share_identical_to_exact_replay']:.2f}%",
                    r["first_divergence"],
                    r["bit_identical_to_exact_replay"],
                    f"{r['logits_vs_float64']['max_rel']:.2e}",
                    f"{r['logits_vs_float64']['mean_rel']:.2e}",
                ]
                for p, r in results.items()
            ],
        )
    )
    paths_written = write_outputs(results_dir(args.out, device), "e2e-replay-greedy", data, markdown)
    print(markdown)
    print("wrote " + ", ".join(map(str, paths_written)))
    # exact replay keeps the table path's bits (float32 state); anything else is a failure
    return 0 if results["table"]["bit_identical_to_exact_replay"] else 1


# The three ways --spec compares bit for bit: (name, path, config spec).
SPEC_WAYS = (
    ("a buffer, upstream", "buffer", "upstream"),
    ("b buffer, table", "buffer", "table"),
    ("c replay, table", "replay", "table"),
)
# The fourth, where this tree has the fast replay route: float32-accurate, not the bits, so the
# greedy comparison reports how many of its tokens match (a) instead of holding it to them.
SPEC_FAST_WAY = ("d replay fast", "replay-fast", "table")


EXACT_SPEC_WAYS = {name for name, _, _ in SPEC_WAYS}


def greedy_verdict(result: dict) -> str:
    """A way's verdict in the spec greedy table (and the report's): identical or DIFFERENT for
    the ways held to (a)'s bits, "float32-accurate" for the fast route (results written before
    it was compared held every way to the bits)."""
    if not result.get("bit_compared", True):
        return "float32-accurate (not compared bit for bit)"
    return "identical" if result["identical"] else "DIFFERENT"


def _spec_ways() -> tuple[tuple[str, str, str], ...]:
    return (*SPEC_WAYS, SPEC_FAST_WAY) if fast_replay_available() else SPEC_WAYS


def _spec_config(
    spec_text: str, dims: Mamba2Dims, batch: int, path: str, tokens: int, device: torch.device
) -> tuple[LaunchConfig | None, LaunchConfig]:
    """(what the step is given, what the kernel runs) for a way of --spec."""
    # each of mamba2_spec.SPEC_PATHS names its kernel's mode in the tables
    resolved = ConfigSpec(spec_text).resolve(dims.shape, batch, device, path, tokens)
    return (None if spec_text == "table" else resolved), resolved


def _run_spec_timing(args: argparse.Namespace, dims: Mamba2Dims, layers: int, device: torch.device) -> int:
    tokens = args.spec
    ways = _spec_ways()
    rows: list[dict[str, object]] = []
    if args.repeats < 1:
        raise SystemExit("ssmdecode e2e: --repeats must be >= 1")
    for batch in batches_from_args(args, device):
        # Every way's stack built first, then the ways timed in interleaved rounds, so that
        # drift over the run hits them alike.
        benches = {
            name: SpecStepBench.build(dims, layers, batch, tokens, path, device, args.seed, args.window)
            for name, path, _ in ways
        }
        configs = {
            name: _spec_config(spec_text, dims, batch, path, tokens, device) for name, path, spec_text in ways
        }
        rounds = interleaved(
            [name for name, _, _ in ways],
            lambda w, benches=benches, configs=configs: benches[w].time(configs[w][0]),
            args.repeats,
        )
        for name, path, spec_text in ways:
            bench, (config, resolved) = benches[name], configs[name]
            timing = median_timing(rounds[name])
            share = bench.profile(config)
            gained = bench.mean_accepted()
            rows.append(
                {
                    "way": name,
                    "path": path,
                    "config": spec_text,
                    "launch": resolved.label,
                    "batch": batch,
                    "tokens": tokens,
                    "step_us": timing.us,
                    "rounds_us": [t.us for t in rounds[name]],
                    "mean_accepted": gained,
                    "tokens_per_s": batch * gained / (timing.us * 1e-6),
                    **share,
                    "timing": timing.to_dict(),
                }
            )
            log.info("%s batch %d: %.2f us a step", name, batch, timing.us)
        del benches
        first = next(r for r in rows if r["batch"] == batch and r["way"] == SPEC_WAYS[0][0])
        for r in rows:
            if r["batch"] == batch:
                r["vs_a"] = r["tokens_per_s"] / first["tokens_per_s"]
    data = {
        "environment": environment(device, args.command_line),
        "method": {
            **method(),
            "step": f"one verify step of {layers} Mamba2 layers, T = {tokens} "
            "tokens a request, and its acceptance (ssmdecode.models.mamba2_spec)",
            "accepted": "uniform in 1 .. T, a request and step",
            "window": args.window,
            "tokens_per_s": "batch x mean accepted / step time",
            "repeats": f"the ways of a batch timed in {args.repeats} interleaved rounds, the median",
            "ssm_share": f"device time with a kernel named *{SSM_KERNELS}* running / device "
            "time with any kernel running (kernels that overlap count once)",
        },
        "shape": dims.shape.to_dict(),
        "d_model": dims.d_model,
        "layers": layers,
        "rows": rows,
    }
    markdown = (
        f"Shape: {dims.shape.label}, d_model {dims.d_model}, {layers} layers, T = {tokens}; "
        f"accepted counts uniform in 1..{tokens}.\n\n"
        + markdown_table(
            ["way", "launch", "batch", "step us", "tokens/s", "x (a)", "SSM share %", "SSM us/step"],
            [
                [
                    r["way"],
                    r["launch"],
                    r["batch"],
                    r["step_us"],
                    r["tokens_per_s"],
                    r["vs_a"],
                    None if r["ssm_share"] is None else 100 * r["ssm_share"],
                    r["ssm_us_per_step"],
                ]
                for r in rows
            ],
        )
    )
    out_dir = results_dir(args.out, device)
    paths = write_outputs(out_dir, "e2e", data, markdown)
    series: dict[str, dict[int, float]] = {}
    for r in rows:
        series.setdefault(r["way"], {})[r["batch"]] = r["tokens_per_s"]
    paths.append(
        plot_vs_batch(
            out_dir / "e2e.png", f"verify steps, T = {tokens}, {dims.shape.label}", series, ylabel="tokens/s"
        )
    )
    print(markdown)
    print("wrote " + ", ".join(map(str, paths)))
    return 0


def _run_spec_greedy(args: argparse.Namespace, dims: Mamba2Dims, layers: int, device: torch.device) -> int:
    tokens = args.spec
    count = option_or_default(args, "prompts", device)
    new_tokens = option_or_default(args, "new_tokens", device)
    vocab = option_or_default(args, "vocab", device)
    length = tokens * max(1, option_or_default(args, "max_prompt_len", device) // tokens)
    gen = torch.Generator().manual_seed(args.seed)
    prompts = torch.randint(vocab, (count, length), generator=gen)
    # Fixed drafts: plain greedy decoding's own tokens, every third wrong, so that acceptance
    # varies over 1 .. T.
    plain = Mamba2LM(dims, layers, vocab, slots=count + 1, device=device, seed=args.seed)
    drafts, _ = greedy_generate(plain, prompts.tolist(), new_tokens + tokens)
    drafts[:, 2::3] = (drafts[:, 2::3] + 1) % vocab
    runs = {}
    for name, path, spec_text in _spec_ways():
        lm = Mamba2VerifyLM(
            dims,
            layers,
            vocab,
            slots=count + 1,
            tokens=tokens,
            path=path,
            device=device,
            seed=args.seed,
            window=args.window,
        )
        config, resolved = _spec_config(spec_text, dims, count, path, tokens, device)
        ids, logprobs, counts = speculative_greedy(lm, prompts.to(device), drafts, new_tokens, config)
        runs[name] = {
            "launch": resolved.label,
            "ids": ids.cpu(),
            "logprobs": logprobs.cpu(),
            "accepted": counts.cpu(),
        }
    first = runs[SPEC_WAYS[0][0]]
    results = {}
    for name, run_ in runs.items():
        lp = bit_diff(first["logprobs"], run_["logprobs"])
        same = first["ids"] == run_["ids"]
        ids_differ = int((~same).sum())
        results[name] = {
            "launch": run_["launch"],
            "bit_compared": name in EXACT_SPEC_WAYS,
            "identical": ids_differ == 0 and lp.identical,
            "share_ids_identical": float(same.float().mean()),
            "token_id_mismatches": ids_differ,
            "logprob_mismatches": lp.mismatches,
            "first_difference": _first_difference(
                first["ids"], run_["ids"], first["logprobs"], run_["logprobs"]
            ),
            "steps": int(run_["accepted"].shape[0]),
            "mean_accepted": float(run_["accepted"].float().mean()),
        }
    identical = all(r["identical"] for r in results.values() if r["bit_compared"])
    data = {
        "environment": environment(device, args.command_line),
        "method": {
            "model": f"random-weight Mamba2 LM, {layers} layers, vocab {vocab}",
            "decoding": f"greedy speculative decoding, T = {tokens}, against fixed drafts "
            "(plain greedy decoding's tokens, every third wrong); prompts of "
            f"{length} tokens run as verify steps",
            "seed": args.seed,
            "compared": "every generated token id and its float32 log-prob, bit for bit, against (a); "
            "the fast replay route (float32-accurate, not the bits) by the share of its token ids "
            "identical to (a)'s and its first difference",
        },
        "shape": dims.shape.to_dict(),
        "d_model": dims.d_model,
        "layers": layers,
        "new_tokens": new_tokens,
        "prompts": count,
        "results": results,
        "identical": identical,
    }
    markdown = (
        f"Shape: {dims.shape.label}, {layers} layers, T = {tokens}: {count} prompts x "
        f"{new_tokens} generated tokens, ids and log-probs against (a).\n\n"
        + markdown_table(
            [
                "way",
                "launch",
                "verdict",
                "ids identical to (a)",
                "first difference [prompt, token]",
                "id mismatches",
                "log-prob mismatches",
                "steps",
                "mean accepted",
            ],
            [
                [
                    n,
                    r["launch"],
                    greedy_verdict(r),
                    f"{100 * r['share_ids_identical']:.2f}%",
                    r["first_difference"] or "-",
                    r["token_id_mismatches"],
                    r["logprob_mismatches"],
                    r["steps"],
                    r["mean_accepted"],
                ]
                for n, r in results.items()
            ],
        )
    )
    paths = write_outputs(results_dir(args.out, device), "e2e-greedy", data, markdown)
    print(markdown)
    print("wrote " + ", ".join(map(str, paths)))
    return 0 if identical else 1


def run(args: argparse.Namespace) -> int:
    device = device_from_args(args)
    dims = _dims(args, device)
    layers = option_or_default(args, "layers", device)
    if device.type != "cuda":
        print(MEANINGLESS)
    with torch.inference_mode():
        if args.spec is not None:
            if args.spec < 1:
                raise SystemExit("ssmdecode e2e: --spec must be >= 1")
            return (_run_spec_greedy if args.greedy else _run_spec_timing)(args, dims, layers, device)
        if args.replay and args.replay_window < 1:
            raise SystemExit("ssmdecode e2e: --replay-window must be >= 1")
        if args.greedy:
            return (_run_replay_greedy if args.replay else _run_greedy)(args, dims, layers, device)
        return _run_timing(args, dims, layers, device)
