"""T >= 2 verify step of the fast route: where its time goes. Laws noflush / steady / allflush, the shipped
route against variants (one kernel, flush-kernel configs, no Grams), the exact route and the anchors in the
same process. Usage: python sweep25.py T BATCHES LAWS"""
import json, os, sys
import torch
from ssmdecode import LaunchConfig
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import replay_fast as rf

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
T = int(sys.argv[1])
batches = [int(b) for b in sys.argv[2].split(",")]
laws = sys.argv[3].split(",") if len(sys.argv) > 3 else ["steady"]
BASE = dict(SPLIT_FLUSH=True, FLUSH_CONFIG=None, GRAM_VERIFY=True, CHUNK=32)
VARIANTS = {
    "shipped": {},
    "one kernel": dict(SPLIT_FLUSH=False),
    "split fc=16,1": dict(FLUSH_CONFIG="16,1,slot,evict"),
    "split fc=64,8": dict(FLUSH_CONFIG="64,8,slot,evict"),
    "split fc=32,2": dict(FLUSH_CONFIG="32,2,slot,evict"),
    "no grams": dict(GRAM_VERIFY=False),
}
ONLY_STEADY = {"split fc=16,1", "split fc=64,8", "split fc=32,2", "no grams"}


def setv(settings):
    for k, v in {**BASE, **(settings or {})}.items():
        if k.endswith("_CONFIG") and v:
            v = LaunchConfig.parse(v)
        setattr(rf, k, v)


rows = []
for law in laws:
    for batch in batches:
        case = br.make_case(shape, T, batch, 16, law, dev, 0)
        routes = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}
        fast = routes["ssmdecode replay fast"]
        plan = [(n, fast, s) for n, s in VARIANTS.items() if law == "steady" or n not in ONLY_STEADY]
        for n, r in routes.items():
            if r.call is not None and n != "ssmdecode replay fast":
                plan.append((n, r, None))
            elif r.call is None:
                print("unavailable:", n, r.why_not if hasattr(r, "why_not") else "")
        for name, route, settings in plan:
            setv(settings)
            try:
                us = br.time_route(case, route, dev).us
                acc = br.accuracy_of(case, route) if (batch == 512 and route is fast) else {}
                r = dict(law=law, batch=batch, variant=name, rep=0, us=us, floored=acc.get("out_max_floored"),
                         state_rel=acc.get("state_max_rel"))
            except Exception as e:
                r = dict(law=law, batch=batch, variant=name, rep=0, error=repr(e)[:400])
            setv(None)
            print(law, batch, name, round(r.get("us", -1), 2), r.get("floored") and round(r["floored"], 3),
                  r.get("state_rel"), r.get("error", ""), flush=True)
            rows.append(r)
out = os.environ.get("OUT", ".")
json.dump(rows, open(os.path.join(out, f"sweep25_T{T}_{'_'.join(laws)}.json"), "w"), indent=1)
