"""`ssmdecode verify`: are two launch configs bit-identical, on this device, over a grid?

Default: this device's table (lookup_config) against upstream_config over the seed's grid:
heads 8, 16, 32, 64, 128 x batch 1..64, then every 8 up to 1024 (920 points), head dim 64,
state dim 128, float32 state, bfloat16 inputs, model-like inputs (ssmdecode.bench.inputs)
and a fresh state per point. Each point runs both configs from the same inputs and the same
initial state and compares out and the whole written state pool bit for bit (integer views,
so -0.0 != 0.0 and NaN payloads count). Exit 1 on any mismatch, naming the first one with
its max abs diff and max ULP distance.

--tolerance compares one config against the float64 reference (ssmdecode.reference) within
per-dtype tolerances instead.

The helpers here (run_config, bit_diff, compare_to) are also how sweep and tune decide which
configs are identical to upstream_config.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from tqdm import tqdm

from ssmdecode import selective_state_update
from ssmdecode.bench.inputs import DecodeInputs, make_shape_inputs
from ssmdecode.bench.presets import Shape, dtype_name, parse_dtype
from ssmdecode.config import LaunchConfig
from ssmdecode.reference import selective_state_update_reference
from ssmdecode.tools import ConfigSpec, add_common_arguments, device_from_args
from ssmdecode.tools.report import environment, markdown_table, results_dir, write_outputs

__all__ = ["BitDiff", "Comparison", "against_reference", "bit_diff", "compare_results",
           "compare_to", "fresh_inputs", "reference_result", "run_config"]

log = logging.getLogger(__name__)

SEED_HEADS = (8, 16, 32, 64, 128)
SEED_BATCHES = (*range(1, 65), *range(72, 1025, 8))  # 184 batch sizes
CPU_HEADS = (2, 4)
CPU_BATCHES = (1, 3)
GPU_DIMS = {"headdim": 64, "dstate": 128}
CPU_DIMS = {"headdim": 8, "dstate": 16}

# |got - want| <= atol + rtol * |want| against float64, by the dtype the kernel stored. The
# kernel computes in float32 and rounds once on store, so a 2-byte dtype is held to about
# two of its ULPs (2^-8 relative for bf16, 2^-11 for fp16); float32 to a few 1e-6 relative of
# the row sums over N with some slack for softplus's log(1 + exp(x)), the upstream formula.
TOLERANCES = {
    torch.float32: {"rtol": 1e-4, "atol": 1e-4},
    torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-2},
    torch.float16: {"rtol": 2e-3, "atol": 1e-3},
}


# ---------------------------------------------------------------------------------------------
# comparing bits


@dataclass(frozen=True)
class BitDiff:
    """How two tensors of one dtype and shape differ, bit for bit."""

    identical: bool
    mismatches: int
    max_abs: float  # over mismatching elements, in float64
    max_ulp: int  # over mismatching elements: distance in representable values


_INT_VIEW = {8: torch.int64, 4: torch.int32, 2: torch.int16}


def _ordered(bits: torch.Tensor) -> torch.Tensor:
    """Sign-magnitude float bits (as signed ints) -> int64 ordered like the floats."""
    width = bits.element_size() * 8
    v = bits.to(torch.int64)
    magnitude = v & ((1 << (width - 1)) - 1)
    return torch.where(v < 0, -magnitude, magnitude)


def bit_diff(a: torch.Tensor, b: torch.Tensor) -> BitDiff:
    """Compare a and b (same dtype and shape) bit for bit."""
    if a.dtype != b.dtype or a.shape != b.shape:
        raise ValueError(f"cannot compare {a.dtype}{list(a.shape)} with {b.dtype}{list(b.shape)}")
    int_dtype = _INT_VIEW[a.element_size()]
    ia, ib = a.view(int_dtype), b.view(int_dtype)
    differ = ia != ib
    mismatches = int(differ.sum())
    if mismatches == 0:
        return BitDiff(True, 0, 0.0, 0)
    abs_diff = (a[differ].double() - b[differ].double()).abs().nan_to_num(nan=float("inf"))
    ulp = (_ordered(ia[differ]) - _ordered(ib[differ])).abs()
    return BitDiff(False, mismatches, float(abs_diff.max()), int(ulp.max()))


@dataclass(frozen=True)
class Comparison:
    """out and the whole written state pool of two runs, compared."""

    out: BitDiff
    state: BitDiff

    @property
    def identical(self) -> bool:
        return self.out.identical and self.state.identical

    def to_dict(self) -> dict[str, object]:
        return {"identical": self.identical, "out": asdict(self.out), "state": asdict(self.state)}


def fresh_inputs(shape: Shape, batch: int, device: torch.device, seed: int) -> DecodeInputs:
    """Inputs of one comparison: one slot set on a pool with one slot more than the batch, so
    a write to a slot no row owns shows in the state comparison."""
    return make_shape_inputs(shape, batch, pool=batch + 1, device=device, seed=seed)


def run_config(
    inputs: DecodeInputs, config: LaunchConfig, *, last: bool = False,
    out_dtype: torch.dtype | None = None, fn: Callable[..., torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, state pool) after one call with config, with a NaN-poisoned out so unwritten
    output shows. The call runs on a copy of inputs' initial state, so the inputs stay
    reusable; last=True runs on inputs.state itself (the inputs' last use), which saves
    copying the pool: at the seed grid's largest points the pool is 4 GiB. out_dtype: the
    dtype out is stored in (default: the inputs', as a model stores it). fn: the kernel
    (ssmdecode.tools.kernels.kernel_function; default ssmdecode's)."""
    state = inputs.state if last else inputs.state.clone()
    out = torch.full(inputs.out.shape, float("nan"), dtype=out_dtype or inputs.out.dtype,
                     device=inputs.out.device)
    (fn or selective_state_update)(**inputs.kwargs(0, state=state, out=out), config=config)
    return out, state


def compare_results(
    a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]
) -> Comparison:
    """Compare two run_config results."""
    return Comparison(out=bit_diff(a[0], b[0]), state=bit_diff(a[1], b[1]))


# The dtype out is compared in. A bf16 out rounds a changed row-sum order away in all but a
# few elements: on the H200, (8,1) at dstate 256 and (16,4) with a bf16 state passed a bf16
# comparison at one shape, then differed at 84 of the 920 seed-grid points. Stored as float32,
# out shows the row sum's own bits, so any change of order shows at once.
STRICT_OUT_DTYPE = torch.float32


def compare_to(
    reference: LaunchConfig, configs: list[LaunchConfig], shape: Shape, batch: int,
    device: torch.device, seed: int, out_dtype: torch.dtype = STRICT_OUT_DTYPE,
    fn: Callable[..., torch.Tensor] | None = None,
) -> dict[LaunchConfig, Comparison]:
    """Each config against reference, bit for bit, every run from the same fresh inputs and
    initial state, out stored in out_dtype (default float32: the strict check)."""
    inputs = fresh_inputs(shape, batch, device, seed)
    want = run_config(inputs, reference, out_dtype=out_dtype, fn=fn)
    return {config: compare_results(want, run_config(inputs, config, out_dtype=out_dtype, fn=fn))
            for config in configs}


# ---------------------------------------------------------------------------------------------
# against the float64 reference


@dataclass(frozen=True)
class ToleranceCheck:
    """out or state of the kernel against the float64 reference."""

    within: bool
    max_abs: float
    worst_excess: float  # max of |got - want| / (atol + rtol |want|); <= 1 passes
    rtol: float
    atol: float


def tolerance_check(got: torch.Tensor, want: torch.Tensor) -> ToleranceCheck:
    """got (the kernel's, in its storage dtype) against want (float64), by TOLERANCES."""
    tol = TOLERANCES[got.dtype]
    diff = (got.double() - want).abs().nan_to_num(nan=float("inf"))
    excess = diff / (tol["atol"] + tol["rtol"] * want.abs())
    worst = float(excess.max())
    return ToleranceCheck(worst <= 1.0, float(diff.max()), worst, tol["rtol"], tol["atol"])


def reference_result(inputs: DecodeInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, state pool) of the float64 reference for call 0 of inputs."""
    kwargs = inputs.kwargs(0)
    del kwargs["out"]
    return selective_state_update_reference(**kwargs, compute_dtype=torch.float64)


def against_reference(
    inputs: DecodeInputs, config: LaunchConfig, want: tuple[torch.Tensor, torch.Tensor],
    *, last: bool = False,
) -> dict[str, ToleranceCheck]:
    """out and the written state of one call with config against want, the float64
    reference_result of the same inputs: {"out": ..., "state": ...}."""
    got = run_config(inputs, config, last=last)
    return {"out": tolerance_check(got[0], want[0]), "state": tolerance_check(got[1], want[1])}


# ---------------------------------------------------------------------------------------------
# the subcommand


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "verify", help="bit-for-bit comparison of two launch configs over a grid",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", type=ConfigSpec.parse, default=ConfigSpec("table"),
                   help="config under test: table, default, upstream or BM,W[,slot][,evict] "
                   "(default: table)")
    p.add_argument("--b", type=ConfigSpec.parse, default=ConfigSpec("upstream"),
                   help="config it must match bit for bit (default: upstream)")
    p.add_argument("--tolerance", action="store_true",
                   help="compare --a against the float64 reference within per-dtype "
                   "tolerances instead of against --b")
    p.add_argument("--heads", type=int, nargs="+",
                   help=f"heads (default {' '.join(map(str, SEED_HEADS))}; "
                   f"{' '.join(map(str, CPU_HEADS))} on CPU)")
    p.add_argument("--batch", type=int, nargs="+",
                   help="batch sizes (default 1..64 then every 8 up to 1024; "
                   f"{' '.join(map(str, CPU_BATCHES))} on CPU)")
    p.add_argument("--headdim", type=int, help=f"head dim (default {GPU_DIMS['headdim']}; "
                   f"{CPU_DIMS['headdim']} on CPU)")
    p.add_argument("--dstate", type=int, help=f"state dim (default {GPU_DIMS['dstate']}; "
                   f"{CPU_DIMS['dstate']} on CPU)")
    p.add_argument("--ngroups", type=int, default=1, help="groups (default 1)")
    p.add_argument("--state-dtype", type=parse_dtype, default=torch.float32,
                   help="state dtype (default float32)")
    p.add_argument("--dtype", type=parse_dtype, default=torch.bfloat16,
                   help="input dtype (default bfloat16)")
    p.add_argument("--out-dtype", type=parse_dtype, default=STRICT_OUT_DTYPE,
                   help="dtype out is stored in for the bit comparison (default float32, the "
                   "strict check: a bfloat16 out rounds most changes of the row-sum order "
                   "away); --tolerance stores out in --dtype")
    add_common_arguments(p, "folder for verify.json and verify.md "
                         "(default benchmarks/results/<device_key>/)")


def _grid(args: argparse.Namespace, device: torch.device) -> list[Shape]:
    on_gpu = device.type == "cuda"
    dims = GPU_DIMS if on_gpu else CPU_DIMS
    heads = args.heads or (SEED_HEADS if on_gpu else CPU_HEADS)
    try:
        return [
            Shape(nheads=h, headdim=args.headdim or dims["headdim"],
                  dstate=args.dstate or dims["dstate"], ngroups=args.ngroups,
                  state_dtype=args.state_dtype, dtype=args.dtype)
            for h in heads
        ]
    except ValueError as e:
        raise SystemExit(f"ssmdecode verify: {e}") from None


def _describe(point: dict[str, object]) -> str:
    parts = [f"heads {point['heads']} batch {point['batch']}"]
    for what in ("out", "state"):
        d = point["result"][what]
        if "identical" in d and not d["identical"]:
            parts.append(f"{what}: {d['mismatches']} elements differ, max abs diff "
                         f"{d['max_abs']:.3e}, max ULP {d['max_ulp']}")
        elif "within" in d and not d["within"]:
            parts.append(f"{what}: max abs diff {d['max_abs']:.3e}, {d['worst_excess']:.2f}x "
                         f"the tolerance (rtol {d['rtol']}, atol {d['atol']})")
    return "; ".join(parts)


def run(args: argparse.Namespace) -> int:
    device = device_from_args(args)
    shapes = _grid(args, device)
    batches = args.batch or (SEED_BATCHES if device.type == "cuda" else CPU_BATCHES)
    points: list[dict[str, object]] = []
    failing: list[dict[str, object]] = []
    progress = tqdm(total=len(shapes) * len(batches), desc="verify", unit="point")
    for shape in shapes:
        for batch in batches:
            seed = args.seed + len(points)
            inputs = fresh_inputs(shape, batch, device, seed)
            cfg_a = args.a.resolve(shape, batch, device)
            point: dict[str, object] = {"heads": shape.nheads, "batch": batch, "seed": seed,
                                        "a": cfg_a.label}
            if args.tolerance:
                checks = against_reference(inputs, cfg_a, reference_result(inputs), last=True)
                ok = all(c.within for c in checks.values())
                point["result"] = {"ok": ok, **{k: asdict(c) for k, c in checks.items()}}
            else:
                cfg_b = args.b.resolve(shape, batch, device)
                comparison = compare_results(
                    run_config(inputs, cfg_a, out_dtype=args.out_dtype),
                    run_config(inputs, cfg_b, last=True, out_dtype=args.out_dtype))
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
    what = ("tolerance vs float64 reference" if args.tolerance
            else f"bit-identity of {args.a.text} vs {args.b.text}")
    grid = {"heads": [s.nheads for s in shapes], "batches": list(batches),
            "headdim": shapes[0].headdim, "dstate": shapes[0].dstate,
            "ngroups": shapes[0].ngroups, "state_dtype": dtype_name(shapes[0].state_dtype),
            "dtype": dtype_name(shapes[0].dtype), "inputs": "model-like, fresh state per point",
            "out_dtype": None if args.tolerance else dtype_name(args.out_dtype)}
    data = {
        "environment": env,
        "method": {"check": what, "a": args.a.text,
                   "b": None if args.tolerance else args.b.text,
                   "tolerances": ({dtype_name(d): t for d, t in TOLERANCES.items()}
                                  if args.tolerance else None),
                   "compared": "out and the whole state pool after one call"},
        "grid": grid,
        "points": len(points),
        "failures": len(failing),
        "first_failure": failing[0] if failing else None,
        "results": points,
    }
    summary = (f"{what}: {len(points) - len(failing)}/{len(points)} points pass "
               f"(heads {grid['heads']}, {len(batches)} batch sizes, P{grid['headdim']} "
               f"N{grid['dstate']} G{grid['ngroups']}, state {grid['state_dtype']}, "
               f"inputs {grid['dtype']}"
               + (f", out stored as {grid['out_dtype']})" if grid["out_dtype"] else ")"))
    rows = [[p["heads"], p["batch"], p["a"], p.get("b", "float64 reference"), _describe(p)]
            for p in failing[:50]]
    markdown = f"{summary}\n\n"
    if rows:
        markdown += ("Failing points (first 50):\n\n"
                     + markdown_table(["heads", "batch", "a", "b", "difference"], rows))
    paths = write_outputs(results_dir(args.out, device), "verify", data, markdown)
    print(summary)
    if failing:
        print(f"first failing point: {_describe(failing[0])}")
    print("wrote " + ", ".join(map(str, paths)))
    return 1 if failing else 0
