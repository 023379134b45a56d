"""`ssmdecode tune`: measure this device's config table of selective_state_update.

For each shape (presets or explicit; shapes that share a table key, the head dim, state dim
and state dtype, are tuned together) and each batch bucket:

1. admit: only configs whose out and written state are bit-identical to upstream_config on
   this device, at this bucket, on every shape of the key;
2. screen: time every admitted config once by the bench method (cold L2, CUDA graph, median
   of 5 repeats), summed over the key's shapes; with --in-model, a decode step of a Mamba2
   layer stack at each shape instead (the `e2e` step, every layer's call with the config);
3. re-time the leaders (the 3 fastest, the baseline and the previous bucket's choice)
   interleaved over several rounds, so drift hits them alike, each timing after an untimed
   run of the same config (so that it does not inherit the power state the previous
   config left); each one's time is the median
   of its rounds, its noise the spread of its rounds or of the repeats inside a round,
   whichever is larger, and never less than --noise-floor;
4. choose: keep the baseline (default_config, or upstream_config where default_config is not
   admitted) unless the fastest leader beats it by more than the noise of both; then, if the
   previous bucket's choice is within noise of this choice, keep the previous bucket's, so
   neighbouring buckets do not flap between configs that measure the same.

With --rounding stochastic (a 16-bit state) the run tunes the entries of calls that round the
state stochastically (key "... rounding=stochastic", which such calls take before the
round-to-nearest entries): each candidate is admitted as above and, besides, only if its
stochastically rounded out and state are bit-identical to upstream_config's with the same seed;
it is timed rounding stochastically (a fixed seed, the default Philox rounds). Such a store
runs more instructions an element, so its best config can differ from round-to-nearest's.

With --tokens and --params dense the run tunes the verify entries of calls whose dt, A or
dt_bias is not tied over the head dim (key "... params=dense"): each token then computes dA
element by element, and the configs that are fastest with tied parameters are the slowest
there (docs/performance.md, "A dense in the verify kernel"). With --tokens and --in-model, each
candidate is timed as a verify step of the Mamba2 stack with its acceptance (`e2e --spec`).

With --mode replay-fast (and --tokens) the run tunes the fast replay route's entries (key
"... mode=replay-fast tokens=T"). No config of that route can be bit-gated against an upstream
kernel (its row sums follow the tile's layout), so a candidate is admitted instead when, on
every shape of the key, its call is within the fast route's accuracy bars against float64
(numerics.fast_accuracy: out to 1 bf16 ulp, mean error at most 1.1x bf16's, state to 1e-5
max|state|) and two runs from the same inputs give the same bits; each entry written records
the worst accuracy measured (`accuracy` in the table). The baseline is
config.replay_fast_config; candidates with fewer than 16 rows or the ordered sum are left out
(the route multiplies tiles of at least 16 rows). Each candidate is timed as a step and its
replay_advance, the cursors advancing, at a window of 16 unless --window says otherwise (the
engines' and bench-replay's; a shorter window flushes more often, and a table tuned at 8 ranked
configs differently from the bench at 16: docs/performance.md, step 25).

Why --in-model: back to back, each call streams its state through an L2 that holds nothing
else; in a model the same call shares it with the step's other kernels, and on the H200 the
two rankings differ (docs/performance.md, "Cache hints in a model": evict-first hints gain
1.4% back to back at bs 512 and lengthen the model's step by 1.6%). The kernel is then a
fraction of what is timed, so the noise floor defaults to 0.5% of the step instead of 2%.

Writes the table with config.write_table into --out-dir (default: the package's configs
folder). Entries already there that this run did not tune (other keys, other buckets) are
kept, so a long tune can be split over runs by --batch; the first bucket of a run then
smooths against the table's bucket below it. Each entry written says which run chose it
(`tuned_by`: the command line, the UTC date and the git commit); the entries kept keep theirs.
Every timing goes to tune.json and tune.md in the results folder.
"""

from __future__ import annotations

import argparse
import functools
import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
from tqdm import tqdm

from ssmdecode.bench.calls import time_config, timing_inputs
from ssmdecode.bench.compare import compare_to
from ssmdecode.bench.report import MEANINGLESS, environment, markdown_table, results_dir, write_outputs
from ssmdecode.bench.spec import (
    DEFAULT_WINDOW,
    ENGINE_WINDOW,
    SPEC_MODES,
    SpecInputs,
    compare_spec_configs,
    make_spec_inputs,
    spec_reference,
    time_spec_config,
)
from ssmdecode.bench.spec_step import SpecStepBench
from ssmdecode.bench.step import StepBench, model_dims
from ssmdecode.bench.timer import Timing, interleaved, method, time_cold
from ssmdecode.cli_args import (
    STEP_LAYERS,
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
from ssmdecode.config import (
    PACKAGE_CONFIG_DIR,
    PARAMS,
    ROUNDINGS,
    LaunchConfig,
    TableEntry,
    candidate_configs,
    default_config,
    device_key,
    load_table_entries,
    replay_fast_config,
    table_key,
    upstream_config,
    write_table,
)
from ssmdecode.numerics import bits, fast_accuracy
from ssmdecode.ops.selective_state_update import selective_state_replay, selective_state_update
from ssmdecode.ops.selective_state_update.checks import DEFAULT_PHILOX_ROUNDS
from ssmdecode.shapes import Shape

__all__ = ["Measured", "choose"]

log = logging.getLogger(__name__)

FAST = "replay-fast"  # the fast replay route's mode: replay's inputs, exact=False


def _spec_mode(mode: str) -> str:
    """The bench.spec inputs a mode runs on (the fast route on replay's)."""
    return "replay" if mode == FAST else mode


def _fast_call(spec: SpecInputs, config: LaunchConfig, i: int = 0) -> dict[str, torch.Tensor]:
    """What fast-route call i with config writes, from copies of the spec's initial values
    (the spec stays reusable): {"out" (as stored, NaN-poisoned first), "state", rings}."""
    kw = spec.kwargs(i)
    copies = {"state": spec.base.state.clone()}
    copies.update({k: spec.rings[k].clone() for k in ("x_cache", "B_cache", "dt_cache")})
    # On the CPU out is stored as float32 and rounded by fast_accuracy: Triton's interpreter
    # converts float32 to bf16 toward zero, where the GPU's store rounds to nearest.
    dtype = kw["out"].dtype if kw["out"].device.type == "cuda" else torch.float32
    out = torch.full(kw["out"].shape, float("nan"), dtype=dtype, device=kw["out"].device)
    kw.update(copies, out=out)
    selective_state_replay(**kw, config=config, exact=False)
    return {"out": out, **copies}


def admit_fast(spec: SpecInputs, configs: list[LaunchConfig]) -> dict[LaunchConfig, tuple[bool, dict]]:
    """Each fast-route config: (admitted, record): within numerics' bars against the float64
    reference of call 0 (out of live requests, the whole state pool) and the same bits in two
    runs; record holds the accuracy and whether the runs matched."""
    want = spec_reference(spec)
    live = spec.src[0] != -1
    result = {}
    for config in configs:
        got = _fast_call(spec, config)
        again = _fast_call(spec, config)
        same = all(torch.equal(bits(got[k]), bits(again[k])) for k in got)
        acc = fast_accuracy(got["out"][live], want["out"][live], got["state"], want["state"])
        result[config] = (acc.within and same, {**acc.to_dict(), "run_to_run_identical": same})
    return result


def _time_fast(spec: SpecInputs, config: LaunchConfig, device: torch.device) -> Timing:
    """A fast-route step's time with config (its bookkeeping included, as replay's), call i on
    set i mod K, by the cold-L2 CUDA-graph timer."""

    def step(i: int) -> None:
        selective_state_replay(**spec.kwargs(i), config=config, exact=False)
        spec.advance(i)

    return time_cold(step, device, rotation=spec.rotation)


GPU_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
CPU_BUCKETS = (1, 2, 4)
NOISE_FLOOR = {False: 0.02, True: 0.005}  # by --in-model: of the kernel's time, of the step's


@dataclass(frozen=True)
class Measured:
    """A leader's re-timed result at one bucket: us is the median of its rounds; spread its
    noise, the larger of the rounds' (max - min) / median and the spread of the repeats
    inside any one round."""

    config: LaunchConfig
    us: float
    spread: float

    @classmethod
    def from_rounds(cls, config: LaunchConfig, rounds: Sequence[tuple[float, float]]) -> Measured:
        """rounds: (us, spread of its repeats) of each round."""
        times = [us for us, _ in rounds]
        us = statistics.median(times)
        across = (max(times) - min(times)) / us if us else 0.0
        return cls(config, us, max(across, *(spread for _, spread in rounds)))


def choose(
    measured: dict[LaunchConfig, Measured],
    baseline: LaunchConfig,
    previous: LaunchConfig | None,
    noise_floor: float,
) -> tuple[LaunchConfig, str]:
    """The config of one bucket and why: the baseline unless the fastest beats it by more
    than the noise; then the previous bucket's choice if within noise of that."""

    def noise(*ms: Measured) -> float:
        return max(noise_floor, *(m.spread for m in ms))

    base = measured[baseline]
    best = min(measured.values(), key=lambda m: m.us)
    if best.config != baseline and best.us < base.us * (1 - noise(base, best)):
        choice, reason = (
            best,
            (
                f"{best.config.label} beats baseline {baseline.label} by "
                f"{1 - best.us / base.us:.1%} > noise {noise(base, best):.1%}"
            ),
        )
    else:
        choice, reason = base, (f"baseline {baseline.label}: no leader beats it by more than the noise")
    if previous is not None and previous != choice.config and previous in measured:
        prev = measured[previous]
        if prev.us <= choice.us * (1 + noise(prev, choice)):
            return previous, (
                f"{previous.label}, the previous bucket's choice, is within "
                f"{noise(prev, choice):.1%} of {choice.config.label}"
            )
    return choice.config, reason


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tune",
        help="measure and write this device's config table",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_shape_arguments(p, several=True)
    add_batch_argument(p, GPU_BUCKETS, CPU_BUCKETS, what="batch buckets")
    add_config_argument(
        p,
        named=False,
        what="candidates to consider (the baseline and upstream are always included)",
        default_text="the --space",
    )
    p.add_argument(
        "--space",
        choices=("basic", "full", "tune"),
        default="tune",
        help="candidate_configs space when --config is not given (default tune)",
    )
    p.add_argument("--leaders", type=int, default=3, help="fastest screened configs to re-time (default 3)")
    p.add_argument(
        "--rounds", type=int, default=3, help="interleaved re-timing rounds of the leaders (default 3)"
    )
    p.add_argument(
        "--noise-floor",
        type=float,
        help=f"smallest relative gain taken as real (default {NOISE_FLOOR[False]}; "
        f"{NOISE_FLOOR[True]} with --in-model)",
    )
    p.add_argument(
        "--rounding",
        choices=ROUNDINGS,
        default="nearest",
        help="the state stores of the calls tuned (default nearest); stochastic: a 16-bit "
        "state's entries for calls with rand_seed, timed and admitted rounding stochastically",
    )
    p.add_argument(
        "--slot-order",
        action="store_true",
        help="time calls with batch_order=slot_order(slots), as an engine that "
        "passes it makes them (bench --slot-order)",
    )
    m = p.add_argument_group("timing inside a model step (--in-model)")
    m.add_argument(
        "--in-model",
        action="store_true",
        help="time each candidate as a decode step of a Mamba2 layer stack at each "
        "shape (what `ssmdecode e2e` times) instead of back-to-back calls",
    )
    add_layers_argument(m)
    m.add_argument("--d-model", type=int, help="model width (default: the preset's the shape was cut from)")
    p.add_argument(
        "--out-dir",
        type=Path,
        help="config folder the table is written into (its "
        "selective_state_update/<device_key>.json; default on a GPU: the "
        "package's; required on CPU, whose timings mean nothing)",
    )
    v = p.add_argument_group("speculative decoding (verify calls, bench --tokens)")
    v.add_argument(
        "--tokens",
        type=int,
        nargs="+",
        help="draft tokens a request, T: tune the table's entries of verify calls "
        "(key '... mode=M tokens=T'), timed as bench --tokens times them",
    )
    v.add_argument(
        "--mode",
        choices=(*SPEC_MODES, FAST),
        default="buffer",
        help="the verify calls' mode (default buffer; see bench --mode); replay-fast: replay's "
        "fast route (exact=False), admitted by accuracy and run-to-run bits",
    )
    v.add_argument(
        "--window",
        type=int,
        help=f"replay: the ring's window (default {ENGINE_WINDOW} for replay-fast, the engines' and "
        f"bench-replay's; {DEFAULT_WINDOW} for replay, as bench --tokens)",
    )
    v.add_argument(
        "--params",
        choices=PARAMS,
        default="tied",
        help="dt, A (and D, dt_bias) tied over the head dim, or dense tensors of the same "
        "values: the entries of such calls (key '... params=dense', modes buffer and dst; "
        "default tied)",
    )
    add_common_arguments(p, "folder for tune.json and tune.md (default benchmarks/results/<device_key>/)")


def _kernel(args: argparse.Namespace, device: torch.device) -> Callable[..., torch.Tensor] | None:
    """The kernel the run times and admits by: None (ssmdecode's, rounding to nearest), or with
    --rounding stochastic ssmdecode's with a fixed seed at the default Philox rounds."""
    if args.rounding == "nearest":
        return None
    seed = torch.tensor([args.seed], dtype=torch.int64, device=device)
    return functools.partial(selective_state_update, rand_seed=seed, philox_rounds=DEFAULT_PHILOX_ROUNDS)


def _timers(
    shapes: list[Shape], bucket: int, args: argparse.Namespace, device: torch.device, tokens: int = 0
) -> list[Callable[[LaunchConfig], Timing]]:
    """One timer a shape: a config's call by the bench method (with --rounding stochastic, a
    stochastically rounding call), or with --in-model its decode step of args.layers Mamba2
    layers; with tokens, a verify call of args.mode."""
    if tokens and args.in_model:  # the verify step of the Mamba2 stack (`e2e --spec`)
        spec_benches = [
            SpecStepBench.build(
                model_dims(shape, args.d_model, device),
                args.layers,
                bucket,
                tokens,
                args.mode,
                device,
                args.seed,
                args.window,
            )
            for shape in shapes
        ]
        return [functools.partial(_time_spec_step, b) for b in spec_benches]
    if tokens:
        specs = [
            make_spec_inputs(
                shape,
                bucket,
                tokens,
                _spec_mode(args.mode),
                device,
                args.seed,
                window=args.window,
                params=args.params,
            )
            for shape in shapes
        ]
        timer = _time_fast if args.mode == FAST else time_spec_config
        return [functools.partial(timer, sp, device=device) for sp in specs]
    if not args.in_model:
        inputs = [timing_inputs(shape, bucket, device, args.seed) for shape in shapes]
        fn = _kernel(args, device)
        return [
            functools.partial(time_config, i, device=device, fn=fn, slot_ordered=args.slot_order)
            for i in inputs
        ]
    benches = [
        StepBench.build(model_dims(shape, args.d_model, device), args.layers, bucket, device, args.seed)
        for shape in shapes
    ]
    return [functools.partial(_time_step, b, slot_ordered=args.slot_order) for b in benches]


def _admit(
    shapes: list[Shape],
    bucket: int,
    candidates: list[LaunchConfig],
    args: argparse.Namespace,
    device: torch.device,
    progress: tqdm,
    tokens: int,
) -> tuple[list[LaunchConfig], dict[str, dict[str, object]], dict[LaunchConfig, dict]]:
    """The candidates admitted at this bucket on every shape of the key: bit-identical to
    upstream_config (verify calls in their mode; with --rounding stochastic the rounded bits
    too), or for the fast replay route within its accuracy bars and the same bits twice.
    Returns (admitted, the rejected with why, each fast candidate's worst accuracy)."""
    upstream = upstream_config(shapes[0].dstate)
    rejected: dict[str, dict[str, object]] = {}
    admitted = list(candidates)
    accuracy: dict[LaunchConfig, dict] = {}
    for shape in shapes:
        if tokens and args.mode == FAST:
            fresh = make_spec_inputs(
                shape, bucket, tokens, "replay", device, args.seed, rotation=1, window=args.window
            )
            for config, (ok, record) in admit_fast(fresh, list(admitted)).items():
                worst = accuracy.setdefault(config, {})
                for k in ("out_ulps", "mean_ratio", "state_rel"):
                    worst[k] = max(worst.get(k, 0.0), record[k])
                if not ok:
                    admitted.remove(config)
                    rejected[config.label] = {"shape": shape.label, **record}
            del fresh
            progress.update()
            continue
        if tokens:
            fresh = make_spec_inputs(
                shape,
                bucket,
                tokens,
                args.mode,
                device,
                args.seed,
                rotation=1,
                window=args.window,
                params=args.params,
            )
            same = compare_spec_configs(fresh, upstream, admitted)
            for config, identical in same.items():
                if not identical:
                    admitted.remove(config)
                    rejected[config.label] = {"shape": shape.label, "identical": False}
            del fresh
            progress.update()
            continue
        for config, comparison in compare_to(upstream, admitted, shape, bucket, device, args.seed).items():
            if not comparison.identical:
                admitted.remove(config)
                rejected[config.label] = {"shape": shape.label, **comparison.to_dict()}
        if args.rounding == "stochastic":  # and the same random bits and rounding as upstream's
            fn = _kernel(args, device)
            for config, comparison in compare_to(
                upstream, admitted, shape, bucket, device, args.seed, fn=fn
            ).items():
                if not comparison.identical:
                    admitted.remove(config)
                    rejected[config.label] = {
                        "shape": shape.label,
                        "rounding": "stochastic",
                        **comparison.to_dict(),
                    }
        progress.update()
    return admitted, rejected, accuracy


def _baseline(
    first: Shape,
    bucket: int,
    admitted: list[LaunchConfig],
    rejected: dict[str, dict[str, object]],
    args: argparse.Namespace,
    tokens: int,
) -> LaunchConfig:
    """The config a leader must beat: default_config (replay_fast_config for the fast route),
    or upstream's (the first admitted fast config) where that one was not admitted."""
    upstream = upstream_config(first.dstate)
    baseline = default_config(first.dstate, first.state_dtype)
    if tokens and args.mode == FAST:
        baseline = replay_fast_config(first.headdim, first.dstate, bucket, tokens)
        if baseline not in admitted:
            if not admitted:
                raise SystemExit(
                    f"ssmdecode tune: no fast-route config is within the accuracy bars at batch {bucket} "
                    f"({rejected})"
                )
            log.warning("replay_fast_config %s was not admitted at batch %d", baseline.label, bucket)
            baseline = admitted[0]
    elif baseline not in admitted:
        log.warning(
            "default_config %s is not bit-identical to upstream %s at batch %d on this "
            "device: the baseline is upstream",
            baseline.label,
            upstream.label,
            bucket,
        )
        baseline = upstream
    return baseline


def _time_spec_step(bench: SpecStepBench, config: LaunchConfig) -> Timing:
    with torch.inference_mode():
        return bench.time(config)


def _time_step(bench: StepBench, config: LaunchConfig, slot_ordered: bool) -> Timing:
    with torch.inference_mode():
        return bench.time(config, slot_ordered=slot_ordered)


def _tune_bucket(
    shapes: list[Shape],
    bucket: int,
    candidates: list[LaunchConfig],
    previous: LaunchConfig | None,
    args: argparse.Namespace,
    device: torch.device,
    progress: tqdm,
    tokens: int = 0,
) -> dict[str, object]:
    """Admit, screen, re-time and choose at one bucket for the shapes of one table key (with
    tokens: of verify calls of args.mode)."""
    first = shapes[0]

    # 1. admit: bit-identical to upstream on every shape (the fast route: by accuracy)
    admitted, rejected, accuracy = _admit(shapes, bucket, candidates, args, device, progress, tokens)
    baseline = _baseline(first, bucket, admitted, rejected, args, tokens)

    # 2. screen every admitted config, and 3. re-time the leaders in interleaved rounds
    timers = _timers(shapes, bucket, args, device, tokens)

    def measure(config: LaunchConfig) -> tuple[float, float]:
        """(us summed over the key's shapes, the largest spread of their repeats)."""
        timings = [timer(config) for timer in timers]
        return sum(t.us for t in timings), max(t.spread for t in timings)

    screen = {config: measure(config)[0] for config in admitted}
    progress.update()
    ranked = sorted(admitted, key=screen.__getitem__)
    leaders = list(
        dict.fromkeys([*ranked[: args.leaders], baseline, *([previous] if previous in screen else [])])
    )

    def settled(config: LaunchConfig) -> tuple[float, float]:
        """measure, after the config has run once untimed: a GPU at its power cap runs a kernel
        faster right after one that drew less power (run 90, bs 1024: the rounds that timed a
        stochastic store right after upstream's slow (4,4) gave 142.8 and 143.0 us, its other
        rounds 144.0 and 148.6)."""
        measure(config)
        return measure(config)

    rounds = interleaved(leaders, settled, args.rounds)
    progress.update()
    measured = {c: Measured.from_rounds(c, rounds[c]) for c in leaders}

    # 4. choose
    choice, reason = choose(measured, baseline, previous, args.noise_floor)
    log.info("batch %d: %s (%s)", bucket, choice.label, reason)
    return {
        "batch": bucket,
        "choice": choice.to_dict(),
        "choice_label": choice.label,
        "reason": reason,
        "baseline": baseline.label,
        "admitted": [c.label for c in admitted],
        "accuracy": {c.label: accuracy[c] for c in admitted if c in accuracy},
        "rejected": rejected,
        "screen_us": {c.label: us for c, us in screen.items()},
        "leaders": {
            c.label: {
                "rounds_us": [us for us, _ in rounds[c]],
                "us": measured[c].us,
                "spread": measured[c].spread,
            }
            for c in leaders
        },
    }


def run(args: argparse.Namespace) -> int:
    device = device_from_args(args)
    if args.noise_floor is None:
        args.noise_floor = NOISE_FLOOR[args.in_model]
    args.layers = int_option(args, "layers", STEP_LAYERS, device, "tune")
    if args.window is None:
        args.window = ENGINE_WINDOW if args.mode == FAST else DEFAULT_WINDOW
    shapes = shapes_from_args(args, device)
    buckets = sorted(set(batches_from_args(args, device)))
    _check_args(args, shapes)
    if device.type != "cuda":
        if args.out_dir is None:
            raise SystemExit(
                "ssmdecode tune: on CPU the timings mean nothing; pass --out-dir "
                "to write the table somewhere other than the package"
            )
        print(MEANINGLESS)
    out_dir = args.out_dir or PACKAGE_CONFIG_DIR
    groups, key_tokens = _table_keys(args, shapes)
    dev_key = device_key(device)
    existing = load_table_entries(dev_key, out_dir) or {}
    progress = tqdm(total=sum(len(g) + 2 for g in groups.values()) * len(buckets), desc="tune", unit="step")
    report: dict[str, list[dict[str, object]]] = {}
    for key, group in groups.items():
        candidates = _candidates(args, group[0], buckets, key_tokens[key])
        earlier = existing.get(key, {})
        below = [b for b in earlier if b < buckets[0]]
        previous = earlier[max(below)].config if below else None  # a split run smooths like one
        report[key] = []
        for bucket in buckets:
            progress.set_postfix(key=key, batch=bucket)
            result = _tune_bucket(
                group, bucket, candidates, previous, args, device, progress, key_tokens[key]
            )
            previous = LaunchConfig.from_dict(result["choice"])
            report[key].append(result)
    progress.close()

    env = environment(device, args.command_line)
    # Each tuned bucket names the run that chose it; the entries kept keep their own.
    tuned_by = {"command": args.command_line, "date": env["date_utc"], "git_commit": env["git_commit"]}
    entries: dict[str, dict[int, TableEntry]] = {key: dict(old) for key, old in existing.items()}
    for key, results in report.items():
        entries.setdefault(key, {}).update(
            {
                r["batch"]: TableEntry(
                    LaunchConfig.from_dict(r["choice"]), tuned_by, r["accuracy"].get(r["choice_label"])
                )
                for r in results
            }
        )
    table = write_table(
        dev_key,
        entries,
        {
            "device": env["device"],
            "made_by": args.command_line,
            "date": env["date_utc"],
            "torch": torch.__version__,
            "triton": triton.__version__,
            "timing_meaningful": env["timing_meaningful"],
        },
        out_dir,
    )
    kept = {
        key: [b for b in sorted(old) if key not in groups or b not in buckets]
        for key, old in existing.items()
    }
    data = {
        "environment": env,
        "method": _method(args),
        "shapes": {key: [s.to_dict() for s in group] for key, group in groups.items()},
        "table": str(table),
        "kept_from_existing_table": {k: b for k, b in kept.items() if b},
        "keys": report,
    }
    rows = [
        [
            key,
            r["batch"],
            r["choice_label"],
            r["baseline"],
            len(r["admitted"]),
            len(r["rejected"]),
            r["leaders"][r["choice_label"]]["us"],
            r["reason"],
        ]
        for key, results in report.items()
        for r in results
    ]
    markdown = markdown_table(
        ["key", "batch", "choice", "baseline", "admitted", "rejected", "us", "why"], rows
    )
    paths = write_outputs(results_dir(args.out, device), "tune", data, markdown)
    print(markdown)
    print(f"wrote table {table}; report " + ", ".join(map(str, paths)))
    return 0


def _check_args(args: argparse.Namespace, shapes: list[Shape]) -> None:
    """What this run cannot tune, refused before any timing."""
    if args.rounding == "stochastic":
        if args.tokens or args.in_model:
            raise SystemExit(
                "ssmdecode tune: --rounding stochastic tunes single-token calls timed back to back "
                "(not with --tokens or --in-model)"
            )
        if any(shape.state_dtype == torch.float32 for shape in shapes):
            raise SystemExit(
                "ssmdecode tune: --rounding stochastic needs a 16-bit state "
                "(--state-dtype bfloat16 or float16)"
            )
    if args.params == "dense" and (not args.tokens or args.mode == "replay" or args.in_model):
        raise SystemExit(
            "ssmdecode tune: --params dense tunes verify calls of modes buffer and dst timed "
            "back to back (--tokens, not replay, not --in-model)"
        )
    if args.in_model and args.tokens and args.mode == "dst":
        raise SystemExit(
            "ssmdecode tune: --in-model times verify steps of the Mamba2 stack, whose paths are "
            "buffer and replay (not dst)"
        )


def _table_keys(
    args: argparse.Namespace, shapes: list[Shape]
) -> tuple[dict[str, list[Shape]], dict[str, int]]:
    """The table keys this run tunes, each with its shapes (shapes that share a key are tuned
    together) and its token count (0 for single-token keys)."""
    groups: dict[str, list[Shape]] = {}
    key_tokens: dict[str, int] = {}
    for shape in dict.fromkeys(shapes):
        for tokens in args.tokens or [0]:
            key = (
                table_key(
                    shape.headdim, shape.dstate, shape.state_dtype, args.mode, tokens, params=args.params
                )
                if tokens
                else table_key(shape.headdim, shape.dstate, shape.state_dtype, rounding=args.rounding)
            )
            groups.setdefault(key, []).append(shape)
            key_tokens[key] = tokens
    return groups, key_tokens


def _candidates(
    args: argparse.Namespace, first: Shape, buckets: list[int], tokens: int
) -> list[LaunchConfig]:
    """A key's candidates: the baseline(s) first, then --config or the --space; the fast
    replay route's are tiles of 16 rows and more with the layout's sums, every bucket's
    baseline among them."""
    space = args.config or candidate_configs(first.headdim, first.dstate, first.state_dtype, args.space)
    if tokens and args.mode == FAST:
        fast = [c for c in space if c.block_m >= 16 and not c.ordered_sum]
        defaults = [replay_fast_config(first.headdim, first.dstate, b, tokens) for b in buckets]
        return list(dict.fromkeys([*defaults, *fast]))
    baselines = [default_config(first.dstate, first.state_dtype), upstream_config(first.dstate)]
    return list(dict.fromkeys([*baselines, *space]))


def _method(args: argparse.Namespace) -> dict[str, object]:
    """tune.json's method: the timer's, how candidates were admitted and timed, the knobs."""
    return {
        **method(),
        "admission": (
            "within the fast replay route's accuracy bars against float64 (numerics.fast_accuracy) "
            "and the same bits in two runs, on this device at the bucket, on every shape of the key"
            if args.tokens and args.mode == FAST
            else "bit-identical to upstream_config (out and whole "
            "state pool) on this device at the bucket, on every shape of the key"
            + ("" if args.rounding == "nearest" else ", rounding to nearest and stochastically (one seed)")
        ),
        "rounding": args.rounding,
        "philox_rounds": DEFAULT_PHILOX_ROUNDS if args.rounding == "stochastic" else None,
        "leaders": args.leaders,
        "rounds": args.rounds,
        "noise_floor": args.noise_floor,
        "slot_order": args.slot_order,
        "seed": args.seed,
        "params": args.params,
        "window": args.window if args.tokens and args.mode in ("replay", FAST) else None,
        "timed": (
            f"a verify step of {args.layers} Mamba2 layers and its acceptance "
            f"(ssmdecode.models.mamba2_spec, path {args.mode}), every layer's call with the config"
            if args.in_model and args.tokens
            else f"a decode step of {args.layers} Mamba2 layers "
            "(ssmdecode.models.mamba2), every layer's call with the config"
            if args.in_model
            else "one call, back to back"
        ),
    }
