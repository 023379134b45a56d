"""The T = 1 split step's flush kernel (after the main kernel, as shipped from 512 requests) at
shares J = B / FLUSH_SHARE of 16, 32 (the default) and 64, and the one kernel; vLLM's kernel in
the same process. Usage: python sweep16.py BATCHES LAWS  (comma lists)"""
import json, os, sys
import torch
from ssmdecode import LaunchConfig
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import replay_fast as rf

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
batches = [int(b) for b in sys.argv[1].split(",")]
laws = sys.argv[2].split(",") if len(sys.argv) > 2 else ["steady"]
BASE = dict(FLUSH_SHARE=32, SPLIT_DECODE=True)
VARIANTS = {
    "one kernel": dict(SPLIT_DECODE=False),
    "split J=B/16": dict(FLUSH_SHARE=16),
    "split J=B/32": {},
    "split J=B/64": dict(FLUSH_SHARE=64),
}
ONCE = ("J=B/64",)


def setv(settings):
    for k, v in {**BASE, **(settings or {})}.items():
        if k == "FLUSH_CONFIG" and v:
            v = LaunchConfig.parse(v)
        setattr(rf, k, v)


rows = []
for law in laws:
    for batch in batches:
        case = br.make_case(shape, 1, batch, 16, law, dev, 0)
        routes = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}
        fast = routes["ssmdecode replay fast"]
        plan = [(n, fast, s) for n, s in VARIANTS.items()]
        for n, r in routes.items():
            if r.call is not None and "compat" in n:
                plan += [(n + " split J=B/16", r, VARIANTS["split J=B/16"]), (n + " split J=B/32", r, {})]
            if r.call is not None and "vLLM" in n:
                plan.append((n, r, None))
        for rep in range(2):
            for name, route, settings in plan:
                if rep == 1 and any(o in name for o in ONCE):
                    continue
                setv(settings)
                try:
                    us = br.time_route(case, route, dev).us
                    acc = br.accuracy_of(case, route) if (batch in (64, 512) and rep == 0 and "vLLM" not in name) else {}
                    r = dict(law=law, batch=batch, variant=name, rep=rep, us=us, floored=acc.get("out_max_floored"),
                             out_mean=acc.get("out_mean_ulps"), bf16_mean=acc.get("bf16_of_float64_mean_ulps"),
                             state_rel=acc.get("state_max_rel"))
                except Exception as e:
                    r = dict(law=law, batch=batch, variant=name, rep=rep, error=repr(e)[:400])
                setv(None)
                print(law, batch, name, rep, round(r.get("us", -1), 2), r.get("floored") and round(r["floored"], 3),
                      r.get("state_rel"), r.get("error", ""), flush=True)
                rows.append(r)
out = os.environ.get("OUT", ".")
json.dump(rows, open(os.path.join(out, f"sweep16_{'_'.join(laws)}.json"), "w"), indent=1)
