"""The main kernel's wait for the Grams' kernel just before it reads the Grams (LATE_WAIT) against
right after its state loads (before), T = 1 and T >= 2, steady cursors, the anchors in the same
process. Usage: python sweep32.py TOKENS BATCHES"""
import json, os, sys
import torch
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import replay_fast as rf

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
tokens = [int(t) for t in sys.argv[1].split(",")]
batches = [int(b) for b in sys.argv[2].split(",")]
rows = []
for T in tokens:
    for batch in batches:
        case = br.make_case(shape, T, batch, 16, "steady", dev, 0)
        routes = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}
        fast = routes["ssmdecode replay fast"]
        plan = [("late wait", fast, True), ("early wait", fast, False), ("late wait again", fast, True)]
        plan += [(n, r, True) for n, r in routes.items() if r.call is not None and r is not fast
                 and ("vLLM" in n or "flashinfer" in n)]
        for name, route, late in plan:
            rf.LATE_WAIT = late
            try:
                us = br.time_route(case, route, dev).us
                acc = br.accuracy_of(case, route) if (batch <= 128 and route is fast) else {}
                r = dict(law="steady", tokens=T, batch=batch, variant=name, rep=0, us=us,
                         floored=acc.get("out_max_floored"), state_rel=acc.get("state_max_rel"))
            except Exception as e:
                r = dict(law="steady", tokens=T, batch=batch, variant=name, rep=0, error=repr(e)[:400])
            print(T, batch, name, round(r.get("us", -1), 2), r.get("floored") and round(r["floored"], 3),
                  r.get("state_rel"), r.get("error", ""), flush=True)
            rows.append(r)
        rf.LATE_WAIT = True
out = os.environ.get("OUT", ".")
json.dump(rows, open(os.path.join(out, f"sweep32_T{'_'.join(map(str, tokens))}.json"), "w"), indent=1)
