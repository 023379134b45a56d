"""The shipped fast route's T = 4 step taken apart: the whole call, the Grams' kernel alone, the
main kernel alone (the Grams already written), the flush programs beside alone, each by the
cold-L2 CUDA-graph timer on the bench's slot sets.
Usage: python parts_probe.py BATCHES LAWS [T]"""
import sys
import torch
from ssmdecode.bench import replay as br
from ssmdecode.bench.timer import time_cold
from ssmdecode.ops.selective_state_update import launch as la
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank


def main():
    shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
    dev = torch.device("cuda")
    T = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    for law in sys.argv[2].split(","):
        for batch in map(int, sys.argv[1].split(",")):
            case = br.make_case(shape, T, batch, 16, law, dev, 0)
            fast = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}["ssmdecode replay fast"]
            seen = []
            orig = la.Launch.run

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
            top = [s for s in seen if s.before is not None or s.beside is not None] or seen
            K = len(top)
            rows = [("whole call", time_cold(lambda i: fast.call(i, fast.writes), dev, rotation=case.rotation).us)]
            rows.append(("whole launch (replayed)", time_cold(lambda i: top[i % K].run(), dev, rotation=K).us))
            if top[0].before is not None:
                rows.append(("Grams' kernel alone", time_cold(
                    lambda i: top[i % K].before.kernel[top[i % K].before.grid](*top[i % K].before.args, **top[i % K].before.kwargs),
                    dev, rotation=K).us))
            rows.append(("main kernel alone", time_cold(
                lambda i: top[i % K].kernel[top[i % K].grid](*top[i % K].args, **top[i % K].kwargs), dev, rotation=K).us))
            if top[0].before is not None:
                rows.append(("Grams then main", time_cold(
                    lambda i: top[i % K]._run_chain(), dev, rotation=K).us))
            if top[0].beside is not None:
                rows.append(("flush programs beside alone", time_cold(lambda i: top[i % K].beside.run(), dev, rotation=K).us))
            if top[0].after is not None:
                rows.append(("kernel after alone", time_cold(lambda i: top[i % K].after.run(), dev, rotation=K).us))
            print(f"T = {T} {law} bs {batch}: {K} launches, main grid {top[0].grid}, ROLE {top[0].kwargs.get('ROLE')}, "
                  f"flush fraction {case.flush_fraction():.2f}")
            for name, us in rows:
                print(f"  {name:30s} {us:8.2f}", flush=True)


if __name__ == "__main__":
    main()
