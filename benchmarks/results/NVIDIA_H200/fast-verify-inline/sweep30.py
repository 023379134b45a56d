"""The verify step's flush kernel from the flush list, each program's requests pipelined
(VERIFY_FLUSH_AHEAD: _decode_flushes_ahead without the token) at shares 4-32 against the grid
flush kernel (shipped) and the unpipelined list; at T = 8 the split forced onto the tiles
(SPLIT_TILES). Laws noflush / steady / allflush; the exact route, the intermediate-state path and
the anchors (steady) in the same process. Usage: python sweep30.py T BATCHES LAWS"""
import json, os, sys
import torch
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import replay_fast as rf

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
T = int(sys.argv[1])
batches = [int(b) for b in sys.argv[2].split(",")]
laws = sys.argv[3].split(",") if len(sys.argv) > 3 else ["steady"]
BASE = dict(VERIFY_FLUSH_LIST=True, VERIFY_FLUSH_AHEAD=True, VERIFY_FLUSH_SHARE=8, SPLIT_TILES=T >= 8)
VARIANTS = {
    "shipped": dict(VERIFY_FLUSH_LIST=False, VERIFY_FLUSH_AHEAD=False, SPLIT_TILES=False),
    "list share8": dict(VERIFY_FLUSH_AHEAD=False),
    "ahead share4": dict(VERIFY_FLUSH_SHARE=4),
    "ahead share8": dict(VERIFY_FLUSH_SHARE=8),
    "ahead share16": dict(VERIFY_FLUSH_SHARE=16),
    "ahead share32": dict(VERIFY_FLUSH_SHARE=32),
}
if T >= 8:
    VARIANTS["split tiles grid"] = dict(VERIFY_FLUSH_LIST=False, VERIFY_FLUSH_AHEAD=False)


def setv(settings):
    for k, v in {**BASE, **(settings or {})}.items():
        setattr(rf, k, v)


rows = []
for law in laws:
    for batch in batches:
        case = br.make_case(shape, T, batch, 16, law, dev, 0)
        routes = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}
        fast = routes["ssmdecode replay fast"]
        plan = [(n, fast, s) for n, s in VARIANTS.items()]
        if law == "steady":
            plan += [(n, r, VARIANTS["shipped"]) for n, r in routes.items() if r.call is not None and r is not fast]
        for name, route, settings in plan:
            setv(settings)
            try:
                us = br.time_route(case, route, dev).us
                acc = br.accuracy_of(case, route) if (batch <= 128 and route is fast and law != "noflush") else {}
                r = dict(law=law, tokens=T, batch=batch, variant=name, rep=0, us=us,
                         floored=acc.get("out_max_floored"), state_rel=acc.get("state_max_rel"))
            except Exception as e:
                r = dict(law=law, tokens=T, batch=batch, variant=name, rep=0, error=repr(e)[:400])
            print(law, T, batch, name, round(r.get("us", -1), 2), r.get("floored") and round(r["floored"], 3),
                  r.get("state_rel"), r.get("error", ""), flush=True)
            rows.append(r)
        setv(VARIANTS["shipped"])
out = os.environ.get("OUT", ".")
json.dump(rows, open(os.path.join(out, f"sweep30_T{T}_{'_'.join(laws)}.json"), "w"), indent=1)
