"""Where the T = 1 split step's time goes: each part of the call timed alone (not a correct step:
a measurement), the flush kernel before (first) or after the main kernel.
Usage: python sweep13.py BATCHES LAWS"""
import json, os, sys
import torch
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import replay_fast as rf, replay as rp

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
batches = [int(b) for b in sys.argv[1].split(",")]
laws = sys.argv[2].split(",") if len(sys.argv) > 2 else ["steady"]
real = rf.fast_launch


def parts(keep):
    def fl(*a, **k):
        m = real(*a, **k)
        first = m.before is not None and m.before.before is not None
        gram = m.before.before if first else m.before
        flush = m.before._replace(before=None) if first else m.after
        main = m._replace(before=None, after=None)
        if keep == "main":
            return main._replace(before=gram)
        if keep == "flush":
            return flush._replace(before=gram, after=None)
        if keep == "gram":
            return gram
        return m
    return fl


VARIANTS = {
    "one kernel": (dict(SPLIT_DECODE=False), "all"),
    "one kernel gram only": (dict(SPLIT_DECODE=False), "gram"),
    "first": (dict(SPLIT_DECODE_FIRST=True), "all"),
    "first main only": (dict(SPLIT_DECODE_FIRST=True), "main"),
    "first gram+flush only": (dict(SPLIT_DECODE_FIRST=True), "flush"),
    "after": (dict(SPLIT_DECODE_FIRST=False), "all"),
    "after main only": (dict(SPLIT_DECODE_FIRST=False), "main"),
    "after gram+flush only": (dict(SPLIT_DECODE_FIRST=False), "flush"),
    "first J=B/32": (dict(SPLIT_DECODE_FIRST=True, FLUSH_SHARE=32), "all"),
    "first J=B/32 gram+flush only": (dict(SPLIT_DECODE_FIRST=True, FLUSH_SHARE=32), "flush"),
}
rows = []
for law in laws:
    for batch in batches:
        case = br.make_case(shape, 1, batch, 16, law, dev, 0)
        routes = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}
        fast = routes["ssmdecode replay fast"]
        for rep in range(2):
            for name, (settings, keep) in VARIANTS.items():
                rf.SPLIT_DECODE, rf.SPLIT_DECODE_MIN_REQUESTS, rf.FLUSH_SHARE = True, 1, 16
                for k, v in settings.items():
                    setattr(rf, k, v)
                rp.fast_launch = parts(keep)
                try:
                    r = dict(law=law, batch=batch, variant=name, rep=rep, us=br.time_route(case, fast, dev).us)
                except Exception as e:
                    r = dict(law=law, batch=batch, variant=name, rep=rep, error=repr(e)[:300])
                rp.fast_launch = real
                print(law, batch, name, rep, round(r.get("us", -1), 2), r.get("error", ""), flush=True)
                rows.append(r)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), f"sweep13_{'_'.join(laws)}.json"), "w"), indent=1)
