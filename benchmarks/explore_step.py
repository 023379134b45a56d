"""A kernel switch A/B inside the model step: configs x batches x the switch's values,
interleaved rounds of `ssmdecode e2e`'s timed decode step (a Mamba2 stack on cold slot sets,
CUDA graph), each followed by the eager profile of the same config for the SSU's own kernel
time per step; JSON and a short table.

    python benchmarks/explore_step.py --preset nemotron3-super --tp 8 --batch 8 64 512 \
        --config 16,1,slot,evict,ordered 8,1 --switch _PACKED_ROWS --out DIR

Where explore.py asks a question of back-to-back calls, this asks it of the step a user runs:
the two have ranked configs differently (docs/performance.md, "Cache hints in a model"). Not a
results tool.
"""

from __future__ import annotations

import argparse
import json
import statistics

from ssmdecode.config import LaunchConfig
from ssmdecode.ops import selective_state_update as ssu_module
from ssmdecode.tools import (
    add_common_arguments,
    add_shape_arguments,
    device_from_args,
    shapes_from_args,
)
from ssmdecode.tools.e2e import StepBench, model_dims, profile_step
from ssmdecode.tools.report import environment, gpu_clocks


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_arguments(p)
    p.add_argument("--batch", type=int, nargs="+", default=[8, 64, 512])
    p.add_argument("--config", type=LaunchConfig.parse, nargs="+", required=True)
    p.add_argument("--switch", choices=ssu_module.SWITCHES, required=True,
                   help="the kernel module's boolean switch, timed on (shipped) and off")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=None)
    p.add_argument("--rounds", type=int, default=3)
    add_common_arguments(p, "folder for explore_step.json", out_required=True)
    args = p.parse_args()
    device = device_from_args(args)
    (shape,) = shapes_from_args(args, device)
    dims = model_dims(shape, args.d_model, device)
    shipped = getattr(ssu_module, args.switch)
    rows = []
    for batch in args.batch:
        bench = StepBench.build(dims, args.layers, batch, device, args.seed)
        steps: dict[tuple[str, bool], list[float]] = {}
        ssu: dict[tuple[str, bool], list[float]] = {}
        try:
            for _ in range(args.rounds):
                for config in args.config:
                    for value in (shipped, not shipped):
                        setattr(ssu_module, args.switch, value)
                        key = (config.label, value)
                        steps.setdefault(key, []).append(bench.time(config).us)
                        share = profile_step(bench, config, None)["ssu_us_per_step"]
                        ssu.setdefault(key, []).append(share or float("nan"))
        finally:
            setattr(ssu_module, args.switch, shipped)
        clocks = gpu_clocks(device) if device.type == "cuda" else None
        for (label, value), us in steps.items():
            rows.append({"batch": batch, "config": label, args.switch: value,
                         "step_us": min(us), "rounds_step_us": us,
                         "ssu_us_per_step": statistics.median(ssu[label, value]),
                         "rounds_ssu_us_per_step": ssu[label, value], "clocks_after": clocks})
        del bench
    args.out.mkdir(parents=True, exist_ok=True)
    data = {"environment": environment(device), "shape": shape.to_dict(), "layers": args.layers,
            "d_model": dims.d_model, "switch": args.switch, "rows": rows}
    (args.out / "explore_step.json").write_text(json.dumps(data, indent=1) + "\n")
    print(f"shape {shape.label}, {args.layers} layers, d_model {dims.d_model}; step: min over "
          f"{args.rounds} interleaved rounds; SSU: median of the rounds' profiles")
    print(f"{'batch':>5} {'config':<30} {args.switch:>12} {'step us':>9} {'SSU us/step':>12} "
          f"{'step spread':>11}")
    for r in rows:
        spread = max(r["rounds_step_us"]) / min(r["rounds_step_us"]) - 1
        print(f"{r['batch']:>5} {r['config']:<30} {r[args.switch]!s:>12} {r['step_us']:9.2f} "
              f"{r['ssu_us_per_step']:12.2f} {spread:11.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
