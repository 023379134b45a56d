"""Exploration for docs/performance.md: what a kernel that only streams the gathered state (no
math; read, add one, write back) reaches against the same-bytes ceiling, by how the work is
laid out over programs and by how the slots lie in the pool. The question it answers: is the
gap left at batch 128 and 256 (random slots that are a third or a half of the pool) a property
of where the slots are, which no layout of the work removes, or of how the programs walk them?

Layouts (the state pool is the bench's, [S, H, P, N] fp32, and so are its slot sets):
    tile:BM:W     one program per (slot, head, BM rows): the shipped kernel's slot-major tiles
    flat:E:W      one program per E contiguous elements of one slot's [H, P, N] (1-D tiles)
    loop:HPP:BM:W one program per (slot, HPP heads), looping over its HPP x P/BM tiles, the
                  next tile's load issued before the current tile's store (two in flight)

    python benchmarks/explore_stream.py --preset nemotron3-super --tp 8 --batch 128 512 \
        --layout tile:4:1 flat:1024:4 kernel:4,1,slot,evict --slots all --out DIR

Not a results tool; timings use the bench's cold-L2 timer and the ceiling of the same run.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from ssmdecode import selective_state_update
from ssmdecode.bench.calls import timing_inputs
from ssmdecode.bench.ceiling import measure_ceiling
from ssmdecode.bench.inputs import SLOT_MODES, DecodeInputs, slot_sets_by_mode
from ssmdecode.bench.report import environment, gpu_clocks
from ssmdecode.bench.timer import interleaved, round_spread, time_cold
from ssmdecode.cli_args import (
    add_batch_argument,
    add_common_arguments,
    add_shape_arguments,
    batches_from_args,
    device_from_args,
    shapes_from_args,
)
from ssmdecode.config import LaunchConfig


# fmt: off
@triton.jit
def _tile_stream(p_state, p_slots, stride_s,
                 H: tl.constexpr, P: tl.constexpr, N: tl.constexpr, BM: tl.constexpr):
    n_m: tl.constexpr = P // BM
    i_h = tl.program_id(0) // n_m
    i_m = tl.program_id(0) % n_m
    slot = tl.load(p_slots + tl.program_id(1), eviction_policy="evict_last").to(tl.int64)
    o = (i_h * P * N + (i_m * BM + tl.arange(0, BM))[:, None] * N + tl.arange(0, N)[None, :])
    p = p_state + slot * stride_s + o
    s = tl.load(p, eviction_policy="evict_first")
    tl.store(p, s + 1.0, eviction_policy="evict_first")
# fmt: on


@triton.jit
def _flat_stream(p_state, p_slots, stride_s, E: tl.constexpr):
    slot = tl.load(p_slots + tl.program_id(1), eviction_policy="evict_last").to(tl.int64)
    p = p_state + slot * stride_s + tl.program_id(0) * E + tl.arange(0, E)
    s = tl.load(p, eviction_policy="evict_first")
    tl.store(p, s + 1.0, eviction_policy="evict_first")


# fmt: off
@triton.jit
def _loop_stream(p_state, p_slots, stride_s,
                 H: tl.constexpr, P: tl.constexpr, N: tl.constexpr, HPP: tl.constexpr,
                 BM: tl.constexpr):
    # The program's HPP heads are one contiguous block of HPP * P * N elements: tile t of it
    # starts at t * BM * N.
    T: tl.constexpr = HPP * P // BM
    slot = tl.load(p_slots + tl.program_id(1), eviction_policy="evict_last").to(tl.int64)
    base = p_state + slot * stride_s + tl.program_id(0) * (HPP * P * N)
    o = tl.arange(0, BM)[:, None] * N + tl.arange(0, N)[None, :]
    s = tl.load(base + o, eviction_policy="evict_first")
    for t in range(1, T):
        s_next = tl.load(base + t * BM * N + o, eviction_policy="evict_first")
        tl.store(base + (t - 1) * BM * N + o, s + 1.0, eviction_policy="evict_first")
        s = s_next
    tl.store(base + (T - 1) * BM * N + o, s + 1.0, eviction_policy="evict_first")
# fmt: on


def _call(layout: str, inputs: DecodeInputs) -> Callable[[int], object]:
    """Call i of a layout on slot set i of inputs (its state pool, its slot sets)."""
    kind, _, rest = layout.partition(":")
    if kind == "kernel":
        config = LaunchConfig.parse(rest)
        return lambda i: selective_state_update(**inputs.kwargs(i), config=config)
    state, sets = inputs.state, inputs.slot_sets
    _, H, P, N = state.shape
    stride = state.stride(0)
    nums = [int(v) for v in rest.split(":")]
    if kind == "tile" and len(nums) == 2:
        bm, w = nums
        return lambda i: _tile_stream[(H * P // bm, sets.shape[1])](
            state, sets[i], stride, H, P, N, bm, num_warps=w
        )
    if kind == "flat" and len(nums) == 2:
        e, w = nums
        return lambda i: _flat_stream[(H * P * N // e, sets.shape[1])](state, sets[i], stride, e, num_warps=w)
    if kind == "loop" and len(nums) == 3:
        hpp, bm, w = nums
        return lambda i: _loop_stream[(H // hpp, sets.shape[1])](
            state, sets[i], stride, H, P, N, hpp, bm, num_warps=w
        )
    raise ValueError(f"layout must be tile:BM:W, flat:E:W, loop:HPP:BM:W or kernel:CONFIG, got {layout!r}")


def _time_case(
    inputs: DecodeInputs,
    sets: dict[str, torch.Tensor],
    calls: dict[str, Callable[[int], object]],
    device: torch.device,
    case: tuple[str, str],
) -> float:
    """One (layout, slot mode): its calls on those slot sets, by the bench's timer."""
    layout, mode = case
    inputs.slot_sets.copy_(sets[mode])
    return time_cold(calls[layout], device, rotation=inputs.rotation).us


PAGE_BYTES = 2 * 2**20  # the GPU's large page, as the driver maps allocations this size
PAGE_MODES = ("pages", "pages-random")


def _page_sets(
    pool: int, rotation: int, batch: int, slot_bytes: int, g: torch.Generator
) -> dict[str, torch.Tensor]:
    """Slot sets that are sparse in the pool but dense in pages: each set is whole 2 MiB pages
    (all the slots of a page, the pages drawn at random), slots ascending ("pages") or in a
    random order ("pages-random"). Empty when a page holds less than two slots or the sets
    are not whole pages."""
    per_page = PAGE_BYTES // slot_bytes
    if per_page < 2 or batch % per_page or pool % per_page:
        return {}
    pages = torch.randperm(pool // per_page, generator=g).view(rotation, batch // per_page)
    slots = (
        (pages.sort(dim=1).values[:, :, None] * per_page + torch.arange(per_page))
        .view(rotation, batch)
        .to(torch.int32)
    )
    shuffled = torch.stack([row[torch.randperm(batch, generator=g)] for row in slots])
    return dict(zip(PAGE_MODES, (slots, shuffled), strict=True))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_arguments(p)
    add_batch_argument(p, (128, 256, 512))
    p.add_argument(
        "--layout",
        nargs="+",
        default=[
            "tile:4:1",
            "tile:16:1",
            "tile:16:4",
            "flat:1024:4",
            "flat:4096:4",
            "loop:1:16:4",
            "loop:4:16:4",
            "loop:16:16:4",
            "loop:16:32:8",
            "loop:4:8:2",
        ],
        help="stream layouts (see above), and kernel:CONFIG for ssmdecode's kernel itself "
        "with a launch config, on the same slots",
    )
    p.add_argument(
        "--slots",
        nargs="+",
        default=["all"],
        choices=(*SLOT_MODES, *PAGE_MODES, "all"),
        help="each call's slots: random in the pool (the bench's), random but "
        "ascending, consecutive, whole 2 MiB pages drawn at random (ascending, or "
        "in a random order); all of them, interleaved",
    )
    p.add_argument("--rounds", type=int, default=2)
    add_common_arguments(p, "folder for explore_stream.json", out_required=True)
    args = p.parse_args()
    device = device_from_args(args)
    (shape,) = shapes_from_args(args, device)
    if shape.state_dtype != torch.float32:
        raise SystemExit("explore_stream: the streams take an fp32 state")
    slot_modes = [*SLOT_MODES, *PAGE_MODES] if "all" in args.slots else args.slots
    rows = []
    for batch in batches_from_args(args, device):
        inputs = timing_inputs(shape, batch, device, args.seed)
        rotation, pool = inputs.rotation, inputs.state.shape[0]
        g = torch.Generator().manual_seed(args.seed)
        sets = {
            **slot_sets_by_mode(inputs.slot_sets),
            **_page_sets(pool, rotation, batch, inputs.state[0].nbytes, g),
        }
        ceiling = measure_ceiling(shape.state_bytes(batch), device)
        calls = {layout: _call(layout, inputs) for layout in args.layout}
        cases = [(layout, mode) for mode in slot_modes if mode in sets for layout in calls]

        times = interleaved(cases, functools.partial(_time_case, inputs, sets, calls, device), args.rounds)
        clocks = gpu_clocks(device) if device.type == "cuda" else None
        for (layout, mode), us in times.items():
            rows.append(
                {
                    "batch": batch,
                    "layout": layout,
                    "slots": mode,
                    "rotation": rotation,
                    "pool_offset_in_page": inputs.state.data_ptr() % PAGE_BYTES,
                    "us": min(us),
                    "rounds_us": us,
                    "ceiling_us": ceiling.us,
                    "fraction_of_ceiling": ceiling.us / min(us),
                    "clocks_after": clocks,
                }
            )
        del inputs
    args.out.mkdir(parents=True, exist_ok=True)
    data = {
        "environment": environment(device),
        "shape": shape.to_dict(),
        "args": vars(args) | {"out": str(args.out)},
        "rows": rows,
    }
    (args.out / "explore_stream.json").write_text(json.dumps(data, indent=1) + "\n")
    print(f"shape {shape.label}; min over {args.rounds} interleaved rounds of the bench timer")
    print(f"{'batch':>5} {'K':>2} {'layout':<34} {'slots':<12} {'us':>8} {'of ceiling':>10} {'ceiling':>8}")
    for r in rows:
        print(
            f"{r['batch']:>5} {r['rotation']:>2} {r['layout']:<34} {r['slots']:<12} "
            f"{r['us']:8.2f} {r['fraction_of_ceiling']:10.1%} {r['ceiling_us']:8.2f}"
        )
    print(round_spread(r["rounds_us"] for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
