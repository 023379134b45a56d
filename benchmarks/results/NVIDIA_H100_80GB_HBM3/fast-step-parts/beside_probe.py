"""The T >= 2 flush programs beside the main kernel (ROLE 7) timed alone with parts of their step
left out (replay_fast.BESIDE_PROBE, a probe knob): 0 the whole step, 1 the flushing tiles read and
stored back (nothing else), 2 read, absorbed and stored, 3 + out, 4 everything but the store,
5 the grid's programs leave at once. Cold-L2 CUDA graphs on the bench's cases.
Usage: python beside_probe.py BATCHES LAWS [T] [PROBES]"""
import sys
import torch
from ssmdecode.bench import replay as br
from ssmdecode.bench.timer import time_cold
from ssmdecode.ops.selective_state_update import launch as la
from ssmdecode.ops.selective_state_update import replay_fast as rf
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank


def launches(fast, case):
    seen, orig = [], la.Launch.run

    def grab(self):
        seen.append(self)
        return orig(self)

    la.Launch.run = grab
    try:
        for i in range(case.rotation):
            fast.call(i, fast.writes)
    finally:
        la.Launch.run = orig
    torch.cuda.synchronize()
    return [s for s in seen if s.beside is not None]


def main():
    shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
    dev = torch.device("cuda")
    T = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    probes = [int(p) for p in (sys.argv[4] if len(sys.argv) > 4 else "0,1,2,3,4,5,0").split(",")]
    for law in sys.argv[2].split(","):
        for batch in map(int, sys.argv[1].split(",")):
            case = br.make_case(shape, T, batch, 16, law, dev, 0)
            fast = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}["ssmdecode replay fast"]
            print(f"T = {T} {law} bs {batch}: flush fraction {case.flush_fraction():.2f}", flush=True)
            for p in probes:
                rf.BESIDE_PROBE = p
                top = launches(fast, case)
                K = len(top)
                us = time_cold(lambda i: top[i % K].beside.run(), dev, rotation=K).us
                whole = time_cold(lambda i: top[i % K].run(), dev, rotation=K).us
                b = top[0].beside
                print(f"  probe {p}: beside alone {us:8.2f}  whole launch {whole:8.2f}  "
                      f"(grid {b.grid}, BLOCK_M {b.kwargs.get('BLOCK_M')}, warps {b.kwargs.get('num_warps')})", flush=True)
            rf.BESIDE_PROBE = 0


if __name__ == "__main__":
    main()
