"""sweep26.py narrowed: the verify step's split flush kernel from the flush list (VERIFY_FLUSH_LIST) at shares 2, 4, 8 against
the grid flush kernel; T = 4 and T = 2 (the split forced there),
laws noflush / steady / allflush; the exact route and the anchors (where they load) in the same process.
Usage: python sweep28.py T BATCHES LAWS"""
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
BASE = dict(SPLIT_FLUSH=True, SPLIT_FROM_TOKENS=4, VERIFY_FLUSH_LIST=True, FLUSH_SHARE=32)
VARIANTS = {
    "grid flush (shipped)": dict(VERIFY_FLUSH_LIST=False),
    "list share8": dict(FLUSH_SHARE=8),
    "list share4": dict(FLUSH_SHARE=4),
    "list share2": dict(FLUSH_SHARE=2),
}
if T == 2:
    VARIANTS = {"shipped (one kernel)": dict(VERIFY_FLUSH_LIST=False)} | {
        "split " + k: dict(v, SPLIT_FROM_TOKENS=2) for k, v in VARIANTS.items()}


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
        for n, r in routes.items():
            if r.call is not None and n != "ssmdecode replay fast":
                plan.append((n, r, None))
        for name, route, settings in plan:
            setv(settings)
            try:
                us = br.time_route(case, route, dev).us
                acc = br.accuracy_of(case, route) if (batch in (64, 512) and route is fast and law != "noflush") else {}
                r = dict(law=law, batch=batch, variant=name, rep=0, us=us, floored=acc.get("out_max_floored"),
                         state_rel=acc.get("state_max_rel"))
            except Exception as e:
                r = dict(law=law, batch=batch, variant=name, rep=0, error=repr(e)[:400])
            setv(None)
            print(law, batch, name, round(r.get("us", -1), 2), r.get("floored") and round(r["floored"], 3),
                  r.get("state_rel"), r.get("error", ""), flush=True)
            rows.append(r)
out = os.environ.get("OUT", ".")
json.dump(rows, open(os.path.join(out, f"sweep28_T{T}_{'_'.join(laws)}.json"), "w"), indent=1)
