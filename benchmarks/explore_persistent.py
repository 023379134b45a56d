"""Exploration for the headline's last 4-5%: a persistent grid whose state loads go through
Triton's software pipeliner, against the shipped table and the same-bytes ceiling.

The shipped kernel issues one tile's state load per program, and the bytes an SM keeps in
flight are bounded by registers (the (16,1) tile holds 64 fp32 a thread: 126 registers, 16
warps an SM). Here each program loops over tiles (slot-major order: a request's state in memory
order) with `tl.range(..., num_stages=S)`: the pipeliner turns the index and state loads of the
next S-1 tiles into cp.async copies into shared memory while the current tile is computed, so
bytes in flight cost shared memory instead of registers. Compiled offline for sm_90 with the
specialization of a real call (strides of 1 are constants), S = 3 with BLOCK_M 4 takes 71
registers and 5.7 KiB of shared memory a program, 28 programs an SM, 35 cp.async in the PTX;
BLOCK_M 16: 136 registers, 19.7 KiB. (Without those constants the same source compiled to a
whole-tile transpose and 250 registers: layouts follow the specialization.)

The per-tile arithmetic is the kernel's ordered path (grouped tile, the state update's fma and
the row sum written out), so its bits must equal upstream_config's; this script checks that
first and marks any difference. It covers the bench's inputs: tied dt / A / D / dt_bias,
dt_softplus, slot indices without padding, no z.

    python benchmarks/explore_persistent.py --preset nemotron3-super --tp 8 \
        --batch 8 128 512 --variant 4,3 16,2 --per-sm 0 --out DIR

A variant is BLOCK_M,STAGES (one warp); --per-sm 0 sizes the grid from the compiled kernel's
registers and shared memory (every program resident, one wave), N > 0 forces N programs an SM.
Not part of the library until it is measured: docs/performance.md says what it gave.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import triton
import triton.language as tl

from ssmdecode import selective_state_update
from ssmdecode.bench.ceiling import measure_ceiling
from ssmdecode.bench.inputs import DecodeInputs
from ssmdecode.bench.timer import time_cold
from ssmdecode.config import LaunchConfig, lookup_config, upstream_config
from ssmdecode.ops.selective_state_update import _rowsum_upstream_order
from ssmdecode.tools import add_shape_arguments, device_from_args, shapes_from_args
from ssmdecode.tools.bench import timing_inputs
from ssmdecode.tools.report import environment
from ssmdecode.tools.verify import compare_results, fresh_inputs, run_config


@triton.jit
def _persistent_kernel(
    p_state, p_x, p_dt, p_dt_bias, p_A, p_B, p_C, p_D, p_out, p_idx, n_tiles,
    stride_state_s, stride_state_h, stride_state_p, stride_x_b, stride_x_h, stride_dt_b,
    stride_dt_h, stride_dt_bias_h, stride_A_h, stride_B_b, stride_B_g, stride_C_b, stride_C_g,
    stride_D_h, stride_out_b, stride_out_h, heads_per_group, pad_slot_id,
    H: tl.constexpr, P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
    STAGES: tl.constexpr, TILES: tl.constexpr,
):
    # The body is the library kernel's (ops/selective_state_update.py) for these inputs: tied
    # dt / A / D / dt_bias, slot indices, even tiles, the ordered row sum, its grouped tile;
    # written the same way, because Triton's layout choice follows the code: a rewrite of it
    # (constant strides, a scalar D) compiled to a whole-tile transpose and 248 registers.
    # TILES (tiles a program) is a constant rather than a runtime bound: Triton 3.6's
    # interpreter cannot loop to a runtime bound, and the CPU test runs this kernel there.
    n_mblocks: tl.constexpr = P // BLOCK_M
    for k in tl.range(0, TILES, num_stages=STAGES):
        t = tl.program_id(0) + k * tl.num_programs(0)
        valid = t < n_tiles
        t = tl.minimum(t, n_tiles - 1)  # the last program's spare turns redo a tile, unstored
        i_m = t % n_mblocks
        i_h = (t // n_mblocks) % H
        i_b = t // (n_mblocks * H)
        i_g = i_h // heads_per_group
        i_src = tl.load(p_idx + i_b, eviction_policy="evict_last").to(tl.int64)
        o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
        o_n = (tl.arange(0, BLOCK_N // 4)[:, None] * 4 + tl.arange(0, 4)[None, :])[:, None, :]
        m_m = o_m < P
        m_read = i_src != pad_slot_id
        m_write = m_read & valid
        o_tile = i_h * stride_state_h + o_m[None, :, None] * stride_state_p + o_n
        p_src = p_state + i_src * stride_state_s + o_tile
        b_state = tl.load(p_src, mask=m_read, other=0.0, eviction_policy="evict_first").to(tl.float32)
        b_x = tl.load(p_x + i_b * stride_x_b + i_h * stride_x_h + o_m, mask=m_m, other=0.0).to(tl.float32)
        b_dt = tl.load(p_dt + i_b * stride_dt_b + i_h * stride_dt_h).to(tl.float32)
        b_dt += tl.load(p_dt_bias + i_h * stride_dt_bias_h).to(tl.float32)
        b_dt = tl.where(b_dt <= 20.0, tl.log(tl.exp(b_dt) + 1), b_dt)
        b_A = tl.load(p_A + i_h * stride_A_h).to(tl.float32)
        b_dA = tl.exp(b_A * b_dt)
        b_B = tl.load(p_B + i_b * stride_B_b + i_g * stride_B_g + o_n).to(tl.float32)
        b_C = tl.load(p_C + i_b * stride_C_b + i_g * stride_C_g + o_n).to(tl.float32)
        b_D = tl.load(p_D + i_h * stride_D_h + o_m * 0, mask=m_m, other=0.0).to(tl.float32)
        b_dB = b_B * b_dt
        b_state = tl.fma(b_state, b_dA, b_dB * b_x[None, :, None])
        tl.store(p_src, b_state.to(p_state.dtype.element_ty), mask=m_write,
                 eviction_policy="evict_first")
        b_out = _rowsum_upstream_order(tl.permute(b_state, (1, 0, 2)), b_C, BLOCK_M, BLOCK_N)
        b_out += b_x * b_D
        b_out = tl.where(i_src != pad_slot_id, b_out, 0.0)
        tl.store(p_out + i_b * stride_out_b + i_h * stride_out_h + o_m, b_out, mask=m_m & valid)


class Persistent:
    """selective_state_update's keyword arguments (the bench's form) -> the persistent kernel."""

    def __init__(self, block_m: int, stages: int, per_sm: int) -> None:
        self.block_m, self.stages, self.per_sm = block_m, stages, per_sm
        self.programs: dict[tuple, int] = {}
        self.label = f"persistent BM{block_m} S{stages}" + (f" x{per_sm}/SM" if per_sm else "")

    def __call__(self, *, state, x, dt, A, B, C, D, dt_bias, out, state_batch_indices,
                 z=None, dt_softplus=True, config=None) -> torch.Tensor:
        del config
        tied = all(t.stride(-1) == 0 for t in (dt, dt_bias, D)) and A.stride(-1) == A.stride(-2) == 0
        contiguous = state.stride(3) == 1 and state.stride(2) == state.shape[3] and (
            state.stride(1) == state.shape[2] * state.shape[3])
        if z is not None or not dt_softplus or not tied or not contiguous:
            raise ValueError("the exploration kernel covers the bench's inputs only")
        batch, nheads, headdim = x.shape
        dstate = state.shape[-1]
        n_tiles = batch * nheads * (headdim // self.block_m)
        args = (state, x, dt, dt_bias, A, B, C, D, out, state_batch_indices, n_tiles,
                state.stride(0), state.stride(1), state.stride(2), x.stride(0), x.stride(1),
                dt.stride(0), dt.stride(1), dt_bias.stride(0), A.stride(0), B.stride(0),
                B.stride(1), C.stride(0), C.stride(1), D.stride(0), out.stride(0), out.stride(1),
                nheads // B.shape[1], -1)
        meta = dict(H=nheads, P=headdim, BLOCK_N=dstate, BLOCK_M=self.block_m,
                    STAGES=self.stages, num_warps=1)
        programs = min(n_tiles, self._programs(state.device, args, meta))
        _persistent_kernel[(programs,)](*args, **meta, TILES=triton.cdiv(n_tiles, programs))
        return out

    def _programs(self, device: torch.device, args: tuple, meta: dict) -> int:
        """Programs for one resident wave: SMs x programs an SM by registers, shared memory
        and the 32-CTA limit (or --per-sm)."""
        if device.type != "cuda":
            return 4
        key = (device.index, args[0].dtype, tuple(sorted(meta.items())))
        if key not in self.programs:
            props = torch.cuda.get_device_properties(device)
            per_sm = self.per_sm
            if not per_sm:
                compiled = _persistent_kernel.warmup(*args, grid=(1,), **meta, TILES=1)
                compiled._init_handles()
                regs = -(-compiled.n_regs * 32 // 256) * 256
                smem = max(compiled.metadata.shared, 1)
                per_sm = max(1, min(32, 65536 // regs, props.shared_memory_per_multiprocessor // smem))
            self.programs[key] = props.multi_processor_count * per_sm
        return self.programs[key]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_arguments(p)
    p.add_argument("--batch", type=int, nargs="+", default=[8, 128, 512])
    p.add_argument("--variant", nargs="+", default=["4,3", "8,3", "16,2"],
                   help="BLOCK_M,STAGES of the persistent kernel (one warp)")
    p.add_argument("--per-sm", type=int, nargs="+", default=[0],
                   help="programs an SM; 0 = from the compiled kernel's resources")
    p.add_argument("--device", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    device = device_from_args(args)
    (shape,) = shapes_from_args(args, device)
    variants = [Persistent(int(v.split(",")[0]), int(v.split(",")[1]), n)
                for v in args.variant for n in args.per_sm]
    rows = []
    for batch in args.batch:
        reference = upstream_config(shape.dstate)
        table = lookup_config(shape.headdim, shape.dstate, shape.state_dtype, batch, device)
        fresh: DecodeInputs = fresh_inputs(shape, batch, device, args.seed)
        want = run_config(fresh, reference, out_dtype=torch.float32)
        inputs = timing_inputs(shape, batch, device, args.seed)
        ceiling = measure_ceiling(shape.state_bytes(batch), device)
        runs: list[tuple[str, object, LaunchConfig | None]] = [
            (f"table {table.label}", selective_state_update, table),
            (f"upstream {reference.label}", selective_state_update, reference),
            *[(v.label, v, None) for v in variants]]
        for label, fn, config in runs:
            got = run_config(fresh, config or reference, out_dtype=torch.float32, fn=fn)
            identical = compare_results(want, got).identical
            timing = time_cold(
                lambda i, fn=fn, config=config, inputs=inputs: fn(**inputs.kwargs(i), config=config),
                device, rotation=inputs.rotation)
            rows.append({"batch": batch, "kernel": label, "identical": identical,
                         "us": timing.us, "ceiling_us": ceiling.us,
                         "fraction_of_ceiling": ceiling.us / timing.us})
            print(f"{batch:>5} {label:<36} {'=' if identical else '≠'} {timing.us:9.2f} us "
                  f"{ceiling.us / timing.us:7.1%} of ceiling {ceiling.us:.2f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "explore_persistent.json").write_text(json.dumps(
        {"environment": environment(device), "shape": shape.to_dict(), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
