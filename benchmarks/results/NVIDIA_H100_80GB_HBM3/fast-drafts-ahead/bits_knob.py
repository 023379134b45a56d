"""The fast route's writes (out, states, rings) with a replay_fast knob at 0 and at 1, bit for bit.
Usage: python bits_knob.py TOKENS BATCHES LAWS KNOB [VALUES, default 0,1]: every value's writes against the first's"""
import sys
import torch
from ssmdecode.bench import replay as br
from ssmdecode.ops.selective_state_update import replay_fast as rf
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
knob = sys.argv[4]
values = [int(v) for v in (sys.argv[5] if len(sys.argv) > 5 else "0,1").split(",")]
saved = getattr(rf, knob)
for law in sys.argv[3].split(","):
    for T in map(int, sys.argv[1].split(",")):
        for batch in map(int, sys.argv[2].split(",")):
            case = br.make_case(shape, T, batch, 16, law, dev, 0)
            fast = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}["ssmdecode replay fast"]
            got = []
            for v in values + values:
                setattr(rf, knob, v)
                fresh = {k: t.clone() for k, t in fast.writes.items()}
                if "out" in fresh:
                    fresh["out"].fill_(float("nan"))
                for i in range(3):
                    fast.call(i, fresh)
                torch.cuda.synchronize()
                got.append(fresh)
            setattr(rf, knob, saved)
            raw = lambda t: t.contiguous().view(torch.uint8) if t.is_floating_point() else t
            same = {k: all(torch.equal(raw(g[k]), raw(got[0][k])) for g in got) for k in got[0]}
            print("bits", knob, law, T, batch, "identical" if all(same.values()) else f"DIFFER {same}", flush=True)
