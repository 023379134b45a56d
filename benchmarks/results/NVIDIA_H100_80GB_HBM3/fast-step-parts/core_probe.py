"""What the T = 4 main kernel's core costs alone: a program reads its state tile and takes the
row sums h0 . C_t of T drafts (the dual form's one O(P N) term), stores them, and nothing else
(no cursors past the slot, no ring, no Grams, no append), on the bench's noflush case's slot sets,
beside the read-only stream and the shipped fast route in the same process.
Usage: python core_probe.py BATCHES [T]"""
import sys
import torch
import triton
import triton.language as tl
from ssmdecode.bench import replay as br
from ssmdecode.bench.ceiling import measure_read_ceiling
from ssmdecode.bench.timer import time_cold
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank


@triton.jit
def _core(p_state, p_slots, p_C, p_out, ss, sh, sp, H: tl.constexpr, P: tl.constexpr, N: tl.constexpr,
          T: tl.constexpr, BM: tl.constexpr, CHUNK: tl.constexpr, C_FIRST: tl.constexpr):
    i_m = tl.program_id(0)
    i_h = tl.program_id(1)
    i_b = tl.program_id(2)
    i_slot = tl.load(p_slots + i_b, eviction_policy="evict_last").to(tl.int64)
    o_m = i_m * BM + tl.arange(0, BM)
    o_n3 = (tl.arange(0, N // CHUNK)[:, None] * CHUNK + tl.arange(0, CHUNK)[None, :])[None, :, :]
    o_n = tl.arange(0, N)
    cs = ()
    if C_FIRST:
        for t in tl.static_range(T):
            cs = cs + (tl.load(p_C + (i_b * T + t) * N + o_n), )
    h0 = tl.load(p_state + i_slot * ss + i_h * sh + o_m[:, None, None] * sp + o_n3, eviction_policy="evict_first")
    h0 = tl.reshape(h0, [BM, N])
    if not C_FIRST:
        for t in tl.static_range(T):
            cs = cs + (tl.load(p_C + (i_b * T + t) * N + o_n), )
    for t in tl.static_range(T):
        y = tl.sum(h0 * cs[t].to(tl.float32)[None, :], axis=1)
        tl.store(p_out + ((i_b * T + t) * H + i_h) * P + o_m, y)


@triton.jit
def _core_loop(p_state, p_slots, p_C, p_out, ss, sh, sp, H: tl.constexpr, P: tl.constexpr, N: tl.constexpr,
               T: tl.constexpr, BM: tl.constexpr, CHUNK: tl.constexpr, STAGES: tl.constexpr):
    i_h = tl.program_id(1)
    i_b = tl.program_id(2)
    i_slot = tl.load(p_slots + i_b, eviction_policy="evict_last").to(tl.int64)
    o_n3 = (tl.arange(0, N // CHUNK)[:, None] * CHUNK + tl.arange(0, CHUNK)[None, :])[None, :, :]
    o_n = tl.arange(0, N)
    cs = ()
    for t in tl.static_range(T):
        cs = cs + (tl.load(p_C + (i_b * T + t) * N + o_n), )
    for k in tl.range(0, P // BM, num_stages=STAGES):
        o_m = k * BM + tl.arange(0, BM)
        h0 = tl.load(p_state + i_slot * ss + i_h * sh + o_m[:, None, None] * sp + o_n3, eviction_policy="evict_first")
        h0 = tl.reshape(h0, [BM, N])
        for t in tl.static_range(T):
            y = tl.sum(h0 * cs[t].to(tl.float32)[None, :], axis=1)
            tl.store(p_out + ((i_b * T + t) * H + i_h) * P + o_m, y)


def main():
    shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
    dev = torch.device("cuda")
    T = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    for batch in map(int, sys.argv[1].split(",")):
        case = br.make_case(shape, T, batch, 16, "noflush", dev, 0)
        S, H, P, N = case.state.shape
        st = case.state
        C = torch.randn(batch, T, N, device=dev).to(torch.bfloat16)
        out = torch.empty(batch, T, H, P, device=dev)
        sets = [s.contiguous() for s in case.slot_sets]
        rows = []
        rows.append(("read-only stream", measure_read_ceiling(st, case.slot_sets).us))
        fast = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}["ssmdecode replay fast"]
        rows.append(("shipped fast route, noflush", br.time_route(case, fast, dev).us))

        def core(bm, warps, c_first=False):
            return lambda i: _core[(P // bm, H, batch)](st, sets[i % len(sets)], C, out, st.stride(0), st.stride(1),
                                                       st.stride(2), H, P, N, T, bm, 32, c_first, num_warps=warps)

        def loop(bm, warps, stages):
            return lambda i: _core_loop[(1, H, batch)](st, sets[i % len(sets)], C, out, st.stride(0), st.stride(1),
                                                      st.stride(2), H, P, N, T, bm, 32, stages, num_warps=warps)

        for name, fn in [("core (16,1)", core(16, 1)), ("core (16,1) C first", core(16, 1, True)),
                         ("core (8,1)", core(8, 1)), ("core (32,2)", core(32, 2)), ("core (64,4)", core(64, 4)),
                         ("core loop (16,1) stages 1", loop(16, 1, 1)), ("core loop (16,1) stages 2", loop(16, 1, 2)),
                         ("core loop (16,1) stages 3", loop(16, 1, 3)), ("core loop (8,1) stages 3", loop(8, 1, 3)),
                         ("core loop (16,2) stages 3", loop(16, 2, 3)), ("core (16,1) again", core(16, 1))]:
            try:
                us = time_cold(fn, dev, rotation=case.rotation).us
                # check: out against torch for the last slot set timed
                rows.append((name, us))
            except Exception as e:
                rows.append((name, repr(e)[:200]))
        # correctness of the core kernel once
        core(16, 1)(0)
        torch.cuda.synchronize()
        want = torch.einsum("bhpn,btn->bthp", st[sets[0].long()], C.float())
        err = (out - want).abs().max().item() / want.abs().max().item()
        print(f"T = {T} bs {batch} (core's out against torch: max rel err {err:.2e})")
        for name, us in rows:
            print(f"  {name:34s} {us if isinstance(us, str) else f'{us:8.2f}'}", flush=True)


if __name__ == "__main__":
    main()
