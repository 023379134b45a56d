"""T = 1 physical-order ring probe (scratch): the fast route as shipped ("default") against the
variant whose ring loads do not depend on the cursors (.scratch/rf_phys.py, "phys"), vLLM's
output-only kernel and compat.vllm beside, steady and noflush cursors; accuracy at bs 64/512."""
import importlib.util, json, os, sys, time
import torch
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
import ssmdecode.ops.selective_state_update.replay as rp
import ssmdecode.ops.selective_state_update.replay_fast as rf

spec = importlib.util.spec_from_file_location("rf_phys", os.path.join(os.path.dirname(__file__), "rf_phys.py"))
rf_phys = importlib.util.module_from_spec(spec); sys.modules["rf_phys"] = rf_phys; spec.loader.exec_module(rf_phys)
FAST0 = rp.fast_launch
shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
batches = [int(b) for b in sys.argv[1].split(",")]
laws = sys.argv[2].split(",") if len(sys.argv) > 2 else ["steady"]
rows = []
for law in laws:
    for batch in batches:
        case = br.make_case(shape, 1, batch, 16, law, dev, 0)
        anchors = br.load_anchors(case)
        routes = {r.name: r for r in br.routes_for(case, anchors)}
        plan = [("default", routes["ssmdecode replay fast"], FAST0), ("phys", br._replay_route(case, exact=False), rf_phys.fast_launch),
                ("default dual64", br._replay_route(case, exact=False), FAST0), ("phys dual64", br._replay_route(case, exact=False), rf_phys.fast_launch)]
        for n, r in routes.items():
            if r.call is not None and ("vLLM" in n or "compat" in n):
                plan.append((n, r, FAST0))
        for rep in range(2):
            for name, route, fl in (plan if rep == 0 else plan[:4]):
                rp.fast_launch = fl
                rf.DUAL_MAX_ELEMENTS = rf_phys.DUAL_MAX_ELEMENTS = 64 if "dual64" in name else 32
                try:
                    us = br.time_route(case, route, dev).us
                    acc = br.accuracy_of(case, route) if (batch in (64, 512) and rep == 0 and "vLLM" not in name) else {}
                    r = dict(law=law, batch=batch, variant=name, rep=rep, us=us, floored=acc.get("out_max_floored"),
                             out_mean=acc.get("out_mean_ulps"), bf16_mean=acc.get("bf16_of_float64_mean_ulps"),
                             state_rel=acc.get("state_max_rel"))
                except Exception as e:
                    r = dict(law=law, batch=batch, variant=name, rep=rep, error=repr(e)[:400])
                rp.fast_launch = FAST0
                rf.DUAL_MAX_ELEMENTS = rf_phys.DUAL_MAX_ELEMENTS = 32
                print(law, batch, name, rep, round(r.get("us", -1), 2), r.get("floored") and round(r["floored"], 3),
                      r.get("state_rel"), r.get("error", ""), flush=True)
                rows.append(r)
out = os.environ.get("OUT", ".")
json.dump(rows, open(os.path.join(out, "sweep7.json"), "w"), indent=1)
