"""Exploration for docs/performance.md: what a kernel that only streams the gathered state (no
math; read, add one, write back) reaches against the same-bytes ceiling, by how the work is
laid out over programs and by how the slots lie in the pool. The question it answers: is the
gap left at batch 128 and 256 (random slots that are a third or a half of the pool) a property
of where the slots are, which no layout of the work removes, or of how the programs walk them?

Layouts (the state pool is [S, H, P, N] fp32, contiguous):
    tile:BM:W     one program per (slot, head, BM rows): the shipped kernel's slot-major tiles
    flat:E:W      one program per E contiguous elements of one slot's [H, P, N] (1-D tiles)
    loop:HPP:BM:W one program per (slot, HPP heads), looping over its HPP x P/BM tiles, the
                  next tile's load issued before the current tile's store (two in flight)

    python benchmarks/explore_stream.py --batch 128 256 512 --slots all --out DIR

Not a results tool; timings use the bench's cold-L2 timer and the ceiling of the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
import triton
import triton.language as tl

from ssmdecode.bench.ceiling import measure_ceiling
from ssmdecode.bench.timer import cold_rotation, time_cold
from ssmdecode.tools.report import environment, gpu_clocks


@triton.jit
def _tile_stream(p_state, p_slots, stride_s, H: tl.constexpr, P: tl.constexpr,
                 N: tl.constexpr, BM: tl.constexpr):
    n_m: tl.constexpr = P // BM
    i_h = tl.program_id(0) // n_m
    i_m = tl.program_id(0) % n_m
    slot = tl.load(p_slots + tl.program_id(1), eviction_policy="evict_last").to(tl.int64)
    o = (i_h * P * N + (i_m * BM + tl.arange(0, BM))[:, None] * N + tl.arange(0, N)[None, :])
    p = p_state + slot * stride_s + o
    s = tl.load(p, eviction_policy="evict_first")
    tl.store(p, s + 1.0, eviction_policy="evict_first")


@triton.jit
def _flat_stream(p_state, p_slots, stride_s, E: tl.constexpr):
    slot = tl.load(p_slots + tl.program_id(1), eviction_policy="evict_last").to(tl.int64)
    p = p_state + slot * stride_s + tl.program_id(0) * E + tl.arange(0, E)
    s = tl.load(p, eviction_policy="evict_first")
    tl.store(p, s + 1.0, eviction_policy="evict_first")


@triton.jit
def _loop_stream(p_state, p_slots, stride_s, H: tl.constexpr, P: tl.constexpr,
                 N: tl.constexpr, HPP: tl.constexpr, BM: tl.constexpr):
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


def _launcher(layout: str, state: torch.Tensor):
    kind, *nums = layout.split(":")
    _, H, P, N = state.shape
    stride = state.stride(0)
    if kind == "tile":
        bm, w = map(int, nums)
        return lambda slots: _tile_stream[(H * P // bm, slots.numel())](
            state, slots, stride, H, P, N, bm, num_warps=w)
    if kind == "flat":
        e, w = map(int, nums)
        return lambda slots: _flat_stream[(H * P * N // e, slots.numel())](
            state, slots, stride, e, num_warps=w)
    if kind == "loop":
        hpp, bm, w = map(int, nums)
        return lambda slots: _loop_stream[(H // hpp, slots.numel())](
            state, slots, stride, H, P, N, hpp, bm, num_warps=w)
    raise ValueError(f"layout must be tile:BM:W, flat:E:W or loop:HPP:BM:W, got {layout!r}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, nargs="+", default=[128, 256, 512])
    p.add_argument("--layout", nargs="+", default=[
        "tile:4:1", "tile:16:1", "tile:16:4", "flat:1024:4", "flat:4096:4",
        "loop:1:16:4", "loop:4:16:4", "loop:16:16:4", "loop:16:32:8", "loop:4:8:2"])
    p.add_argument("--slots", choices=("random", "sorted", "contiguous", "all"), default="all")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--headdim", type=int, default=64)
    p.add_argument("--dstate", type=int, default=128)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda", help="cpu: a smoke test under the interpreter")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    device = torch.device(args.device)
    slot_modes = ["random", "sorted", "contiguous"] if args.slots == "all" else [args.slots]
    rows = []
    for batch in args.batch:
        nbytes = batch * args.heads * args.headdim * args.dstate * 4
        rotation = cold_rotation(nbytes, device)
        pool = rotation * batch
        state = torch.zeros(pool, args.heads, args.headdim, args.dstate, device=device)
        g = torch.Generator().manual_seed(args.seed)
        perm = torch.randperm(pool, generator=g).to(torch.int32).view(rotation, batch)
        sets = {"random": perm, "sorted": perm.sort(dim=1).values,
                "contiguous": torch.arange(pool, dtype=torch.int32).view(rotation, batch)}
        sets = {k: v.to(device) for k, v in sets.items() if k in slot_modes}
        ceiling = measure_ceiling(nbytes, device)
        launchers = {layout: _launcher(layout, state) for layout in args.layout}
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for mode, slot_sets in sets.items():
                for layout, launch in launchers.items():
                    t = time_cold(lambda i, s=slot_sets, f=launch: f(s[i]), device,
                                  rotation=rotation)
                    times.setdefault((layout, mode), []).append(t.us)
        clocks = gpu_clocks(device) if device.type == "cuda" else None
        for (layout, mode), us in times.items():
            rows.append({"batch": batch, "layout": layout, "slots": mode, "rotation": rotation,
                         "us": min(us), "rounds_us": us, "ceiling_us": ceiling.us,
                         "fraction_of_ceiling": ceiling.us / min(us), "clocks_after": clocks})
        del state
    args.out.mkdir(parents=True, exist_ok=True)
    data = {"environment": environment(device), "args": vars(args) | {"out": str(args.out)},
            "rows": rows}
    (args.out / "explore_stream.json").write_text(json.dumps(data, indent=1) + "\n")
    print(f"state stream only, [{args.heads}, {args.headdim}, {args.dstate}] fp32 per slot; "
          f"min over {args.rounds} interleaved rounds")
    print(f"{'batch':>5} {'K':>2} {'layout':<14} {'slots':<10} {'us':>8} {'of ceiling':>10} "
          f"{'ceiling':>8}")
    for r in rows:
        print(f"{r['batch']:>5} {r['rotation']:>2} {r['layout']:<14} {r['slots']:<10} "
              f"{r['us']:8.2f} {r['fraction_of_ceiling']:10.1%} {r['ceiling_us']:8.2f}")
    spreads = [max(r["rounds_us"]) / min(r["rounds_us"]) - 1 for r in rows]
    print(f"round-to-round spread: median {statistics.median(spreads):.1%}, max {max(spreads):.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
