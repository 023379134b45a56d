"""The launches Nsight Compute profiles for docs/performance.md: selective_state_update with this
GPU's table config (or --config) at one batch, and the ceiling's Triton stream over the same bytes, each
launched twice (a warm-up that compiles, then the profiled launch: the next slot set, or the
same one where a single set holds 3x the L2; the stream's second buffer). With --rounding
stochastic, the call rounds its 16-bit state stochastically (rand_seed; --state-dtype bfloat16
or float16).

    ncu --clock-control none --kernel-name regex:'_selective_state_update_kernel|_scale_in_place' \
        --launch-skip 2 --launch-count 2 --section SpeedOfLight --section Occupancy ... \
        python benchmarks/ncu_driver.py --preset nemotron3-super --tp 8 --batch 512

Order of the matching launches: SSU warm-up, stream warm-up, SSU, stream. Nsight Compute
flushes the caches before each profiled pass by default, so both run from HBM.
"""

from __future__ import annotations

import argparse

import torch

from ssmdecode import LaunchConfig, selective_state_update
from ssmdecode.bench.calls import timing_inputs
from ssmdecode.bench.ceiling import stream_calls
from ssmdecode.cli_args import (
    add_batch_argument,
    add_shape_arguments,
    batches_from_args,
    device_from_args,
    shapes_from_args,
)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_arguments(p)
    add_batch_argument(p, (512,), several=False)
    p.add_argument("--device", help="torch device (default: the current CUDA device)")
    p.add_argument("--config", type=LaunchConfig.parse, help="a launch config (default: this GPU's table)")
    p.add_argument(
        "--rounding",
        choices=("nearest", "stochastic"),
        default="nearest",
        help="how the call stores its state (stochastic: a 16-bit --state-dtype, rand_seed)",
    )
    args = p.parse_args()
    device = device_from_args(args)
    (shape,) = shapes_from_args(args, device)
    (batch,) = batches_from_args(args, device)
    extra: dict[str, object] = {}
    if args.rounding == "stochastic":
        if shape.state_dtype == torch.float32:
            p.error("--rounding stochastic needs a 16-bit state (--state-dtype bfloat16 or float16)")
        extra["rand_seed"] = torch.tensor([12345], dtype=torch.int64, device=device)
    inputs = timing_inputs(shape, batch, device, seed=0)
    n = -(-shape.state_bytes(batch) // 4)  # fp32 elements, as measure_ceiling counts
    streams = stream_calls("triton", torch.randn(2, n, device=device))
    for i in range(2):
        selective_state_update(**inputs.kwargs(i), config=args.config, **extra)
        streams[i]()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    print(f"profiled: {shape.label} batch {batch}, {args.rounding}, {2 * 4 * n / 2**20:.0f} MiB moved each")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
