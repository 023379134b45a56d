"""Exploration timings for docs/performance.md: configs x batches, interleaved rounds, with
kernel variants of the same bits (`--variant`: the vectors masked where the tile divides, the
state tile addressed by its runtime strides instead of its packed rows), slot placements,
batch_order and programmatic dependent launch (`pdl=`) off and on, the GPU clocks sampled after
each row, and the same-bytes ceiling of each batch; JSON and a short table. Uses the bench
method's timer (consecutive calls in one CUDA graph, so with pdl=True each call may start under
the previous call's tail).

    python benchmarks/explore.py --preset nemotron3-super --tp 8 --batch 8 128 512 \
        --config 16,1,slot,evict 16,1,slot,evict,ordered --variant default strided_rows --out DIR

Not a results tool: the committed results come from `ssmdecode bench|sweep|tune`. This is for
asking one question of the kernel and writing down the answer.
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch

from ssmdecode.bench.calls import time_config, timing_inputs
from ssmdecode.bench.ceiling import measure_ceiling
from ssmdecode.bench.inputs import SLOT_MODES, slot_sets_by_mode
from ssmdecode.bench.kernels import variant_function
from ssmdecode.bench.report import environment, gpu_clocks
from ssmdecode.bench.timer import interleaved, round_spread
from ssmdecode.cli_args import (
    add_batch_argument,
    add_common_arguments,
    add_config_argument,
    add_shape_arguments,
    batches_from_args,
    device_from_args,
    shapes_from_args,
)
from ssmdecode.ops.selective_state_update.decode import Variant
from ssmdecode.shapes import Shape

VARIANTS = {
    "default": Variant(),
    "masked_vectors": Variant(masked_vectors=True),
    "strided_rows": Variant(strided_rows=True),
}


def _time_batch(
    args: argparse.Namespace,
    shape: Shape,
    batch: int,
    device: torch.device,
    slot_modes: list[str],
    pdls: list[bool],
    orders: list[bool],
) -> list[dict]:
    """Every (config, variant, pdl, slots, order) at one batch, in interleaved rounds: a row
    each, its time the fastest of its rounds."""
    inputs = timing_inputs(shape, batch, device, args.seed, pdls != [False])
    slot_sets = slot_sets_by_mode(inputs.slot_sets)
    ceiling = measure_ceiling(shape.state_bytes(batch), device, pdl=pdls != [False])
    pdl_ceiling = ceiling.timings.get("triton_pdl")
    kernels = {(v, pdl): variant_function(VARIANTS[v], pdl) for v in args.variant for pdl in pdls}
    configs = {config.label: config for config in args.config}
    cases = [
        (label, variant, pdl, slots, ordered)
        for slots in slot_modes
        for label in configs
        for variant, pdl, ordered in itertools.product(args.variant, pdls, orders)
    ]

    def measure(case: tuple[str, str, bool, str, bool]) -> float:
        label, variant, pdl, slots, ordered = case
        inputs.slot_sets.copy_(slot_sets[slots])
        return time_config(inputs, configs[label], device, kernels[variant, pdl], ordered).us

    times = interleaved(cases, measure, args.rounds)
    clocks = gpu_clocks(device) if device.type == "cuda" else None
    rows = []
    for (label, variant, pdl, slots, ordered), us in times.items():
        best = min(us)
        rows.append(
            {
                "batch": batch,
                "config": label,
                "variant": variant,
                "slots": slots,
                "batch_order": "slot" if ordered else "none",
                "pdl": "on" if pdl else "off",
                "us": best,
                "rounds_us": us,
                "ceiling_us": ceiling.us,
                "fraction_of_ceiling": ceiling.us / best,
                "pdl_ceiling_us": pdl_ceiling.us if pdl_ceiling else None,
                "clocks_after": clocks,
            }
        )
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_arguments(p)
    add_batch_argument(p, (8, 128, 512))
    add_config_argument(p, named=False, what="the configs timed", required=True)
    p.add_argument(
        "--variant",
        choices=sorted(VARIANTS),
        nargs="+",
        default=["default"],
        help="kernel variants of the same bits, interleaved: default (the shipped "
        "code), masked_vectors (x, dt, D, z, out, B, C masked where the tile "
        "divides), strided_rows (the state tile by its runtime strides)",
    )
    p.add_argument(
        "--pdl",
        choices=("off", "on", "both"),
        default="off",
        help="programmatic dependent launch off (the default call), on, or both, interleaved",
    )
    p.add_argument(
        "--slots",
        choices=(*SLOT_MODES, "padded", "all"),
        nargs="+",
        default=["random"],
        help="each call's slots: random in the pool (the bench's), random but in "
        "ascending order, consecutive (call i: slots i*B .. i*B+B-1, so the state "
        "it touches is one flat block, as the ceiling's), or random with the second "
        "half of the rows padding (pad_slot_id); several, or all of the first three, "
        "interleaved",
    )
    p.add_argument(
        "--order",
        choices=("none", "slot", "both"),
        default="none",
        help="batch_order: none (rows in order), slot (slot_order of each call's "
        "slots, computed before timing), or both, interleaved",
    )
    p.add_argument("--rounds", type=int, default=2)
    add_common_arguments(p, "folder for explore.json", out_required=True)
    args = p.parse_args()
    device = device_from_args(args)
    (shape,) = shapes_from_args(args, device)
    pdls = {"off": [False], "on": [True], "both": [False, True]}[args.pdl]
    slot_modes = list(dict.fromkeys(m for s in args.slots for m in (SLOT_MODES if s == "all" else (s,))))
    orders = {"none": [False], "slot": [True], "both": [False, True]}[args.order]
    rows = []
    for batch in batches_from_args(args, device):
        rows += _time_batch(args, shape, batch, device, slot_modes, pdls, orders)
    args.out.mkdir(parents=True, exist_ok=True)
    data = {"environment": environment(device), "shape": shape.to_dict(), "rows": rows}
    (args.out / "explore.json").write_text(json.dumps(data, indent=1) + "\n")
    print(f"shape {shape.label}; min over {args.rounds} interleaved rounds of the bench timer")
    print(
        f"{'batch':>5} {'config':<34} {'variant':<15} {'pdl':<5} {'slots':<10} "
        f"{'order':<5} {'us':>8} {'of ceiling':>10} {'ceiling':>8} {'pdl ceiling':>11}"
    )
    for r in rows:
        pdl_ceiling = f"{r['pdl_ceiling_us']:11.2f}" if r["pdl_ceiling_us"] else ""
        print(
            f"{r['batch']:>5} {r['config']:<34} {r['variant']:<15} {r['pdl']:<5} {r['slots']:<10} "
            f"{r['batch_order']:<5} {r['us']:8.2f} {r['fraction_of_ceiling']:10.1%} "
            f"{r['ceiling_us']:8.2f} {pdl_ceiling}"
        )
    print(round_spread(r["rounds_us"] for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
