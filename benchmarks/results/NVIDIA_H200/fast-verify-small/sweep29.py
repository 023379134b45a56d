"""The verify step's fast route at small batches (T = 2 and 4, bs 1 and 8): its main config and
path (tiles or draft by draft, TILES_MAX_REQUESTS) against the shipped choice, the exact route
and the intermediate-state path in the same process. Usage: python sweep29.py TOKENS BATCHES"""
import json, os, sys
import torch
from ssmdecode import LaunchConfig
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import replay_fast as rf
from ssmdecode.ops.selective_state_update import replay as rp

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
tokens = [int(t) for t in sys.argv[1].split(",")]
batches = [int(b) for b in sys.argv[2].split(",")]
VARIANTS = {
    "shipped": (None, None),
    "tiles 32,4": ("32,4,slot,evict", 8),
    "tiles 32,2": ("32,2,slot,evict", 8),
    "tiles 16,4": ("16,4,slot,evict", 8),
    "tiles 16,2": ("16,2,slot,evict", 8),
    "rows 16,1": ("16,1,slot,evict", 0),
    "rows 16,2": ("16,2,slot,evict", 0),
    "rows 8,1": ("8,1,slot,evict", 0),
    "rows 8,2": ("8,2,slot,evict", 0),
    "rows 32,2": ("32,2,slot,evict", 0),
}
original = rp._replay_config


def setv(v):
    text, tiles = v
    rf.TILES_MAX_REQUESTS = 8 if tiles is None else tiles
    if text is None:
        rp._replay_config = original
    else:
        cfg = LaunchConfig.parse(text)
        rp._replay_config = lambda config, state, batch, t, exact, st: (
            cfg if not exact and config is None else original(config, state, batch, t, exact, st))


rows = []
for T in tokens:
    for batch in batches:
        case = br.make_case(shape, T, batch, 16, "steady", dev, 0)
        routes = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}
        fast = routes["ssmdecode replay fast"]
        plan = [(n, fast, v) for n, v in VARIANTS.items()]
        plan += [(n, r, (None, None)) for n, r in routes.items() if r.call is not None and n != fast.name]
        for name, route, v in plan:
            setv(v)
            try:
                us = br.time_route(case, route, dev).us
                acc = br.accuracy_of(case, route) if route is fast else {}
                r = dict(law="steady", tokens=T, batch=batch, variant=name, rep=0, us=us,
                         floored=acc.get("out_max_floored"), state_rel=acc.get("state_max_rel"))
            except Exception as e:
                r = dict(law="steady", tokens=T, batch=batch, variant=name, rep=0, error=repr(e)[:400])
            setv((None, None))
            print(T, batch, name, round(r.get("us", -1), 2), r.get("floored") and round(r["floored"], 3),
                  r.get("state_rel"), r.get("error", ""), flush=True)
            rows.append(r)
out = os.environ.get("OUT", ".")
json.dump(rows, open(os.path.join(out, "sweep29_small_batch.json"), "w"), indent=1)
