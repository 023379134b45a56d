"""T = 1 chunked dual flush probe (scratch): the fast route as shipped ("default", the flush token
by token at (16,1)) against .scratch/rf_chunk.py, whose flush takes the dual form a chunk of
FLUSH_CHUNK_COLS columns at a time ("chunk=N"); compat.vllm (default and chunk=32) and vLLM's
output-only kernel beside; accuracy at bs 64/512."""
import importlib.util, json, os, sys
import torch
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
import ssmdecode.ops.selective_state_update.replay as rp

spec = importlib.util.spec_from_file_location("rf_chunk", os.path.join(os.path.dirname(__file__), "rf_chunk.py"))
rc = importlib.util.module_from_spec(spec); sys.modules["rf_chunk"] = rc; spec.loader.exec_module(rc)
FAST0 = rp.fast_launch
shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
batches = [int(b) for b in sys.argv[1].split(",")]
laws = sys.argv[2].split(",") if len(sys.argv) > 2 else ["steady"]
rows = []
for law in laws:
    for batch in batches:
        case = br.make_case(shape, 1, batch, 16, law, dev, 0)
        routes = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}
        fast = routes["ssmdecode replay fast"]
        plan = [("default", fast, FAST0, 0), ("chunk=32", fast, rc.fast_launch, 32),
                ("chunk=16", fast, rc.fast_launch, 16), ("chunk=64", fast, rc.fast_launch, 64)]
        for n, r in routes.items():
            if r.call is not None and "compat" in n:
                plan += [(n, r, FAST0, 0), (n + " chunk=32", r, rc.fast_launch, 32)]
            if r.call is not None and "vLLM" in n:
                plan.append((n, r, FAST0, 0))
        for rep in range(2):
            for name, route, fl, cols in (plan if rep == 0 else plan[:4]):
                rp.fast_launch = fl
                rc.FLUSH_CHUNK_COLS = cols
                try:
                    us = br.time_route(case, route, dev).us
                    acc = br.accuracy_of(case, route) if (batch in (64, 512) and rep == 0 and "vLLM" not in name) else {}
                    r = dict(law=law, batch=batch, variant=name, rep=rep, us=us, floored=acc.get("out_max_floored"),
                             out_mean=acc.get("out_mean_ulps"), bf16_mean=acc.get("bf16_of_float64_mean_ulps"),
                             state_rel=acc.get("state_max_rel"))
                except Exception as e:
                    r = dict(law=law, batch=batch, variant=name, rep=rep, error=repr(e)[:400])
                rp.fast_launch = FAST0
                print(law, batch, name, rep, round(r.get("us", -1), 2), r.get("floored") and round(r["floored"], 3),
                      r.get("state_rel"), r.get("error", ""), flush=True)
                rows.append(r)
out = os.environ.get("OUT", ".")
json.dump(rows, open(os.path.join(out, f"sweep8_{'_'.join(laws)}.json"), "w"), indent=1)
