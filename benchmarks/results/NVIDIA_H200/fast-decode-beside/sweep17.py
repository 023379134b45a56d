"""The T = 1 split step (flush kernel after the main kernel, from 512 requests) at other main
kernel configs (config.replay_fast_config's choice replaced), steady cursors; vLLM's kernel in
the same process. Usage: python sweep17.py BATCHES"""
import json, os, sys
import torch
from ssmdecode import LaunchConfig
from ssmdecode import config as cfgmod
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
real = cfgmod.replay_fast_config
CONFIGS = [None, "16,2,slot,evict", "32,2,slot,evict", "32,4,slot,evict", "64,4,slot,evict", "16,1,slot,evict,regs64", "16,1,slot,evict,regs72", "32,1,slot,evict", "8,1,slot,evict"]
rows = []
for batch in [int(b) for b in sys.argv[1].split(",")]:
    case = br.make_case(shape, 1, batch, 16, "steady", dev, 0)
    routes = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}
    plan = [(c or "default (16,1)", routes["ssmdecode replay fast"], c) for c in CONFIGS]
    plan += [(n, r, None) for n, r in routes.items() if r.call is not None and "vLLM" in n]
    for rep in range(2):
        for name, route, c in plan:
            cfgmod.replay_fast_config = (lambda *a, c=c: LaunchConfig.parse(c)) if c else real
            cfgmod.clear_config_cache()
            try:
                us = br.time_route(case, route, dev).us
                acc = br.accuracy_of(case, route) if rep == 0 and batch == 512 and "vLLM" not in name else {}
                r = dict(law="steady", batch=batch, variant=name, rep=rep, us=us, floored=acc.get("out_max_floored"),
                         state_rel=acc.get("state_max_rel"))
            except Exception as e:
                r = dict(law="steady", batch=batch, variant=name, rep=rep, error=repr(e)[:300])
            cfgmod.replay_fast_config = real
            cfgmod.clear_config_cache()
            print(batch, name, rep, round(r.get("us", -1), 2), r.get("floored"), r.get("error", ""), flush=True)
            rows.append(r)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "sweep17_steady.json"), "w"), indent=1)
