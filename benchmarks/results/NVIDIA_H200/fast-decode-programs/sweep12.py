"""T = 1 flush placement, flush-first (replay_fast.SPLIT_DECODE_FIRST): the flush kernel launched
after the Grams and before the main kernel (ROLE 3: a flushing request's out from the flushed
checkpoint) against the flush kernel after the main kernel (session 14's) and the one kernel,
at several shares J = B / FLUSH_SHARE and flush configs; compat.vllm's adapter and vLLM's
output-only kernel beside. Usage: python sweep12.py BATCHES LAWS  (comma lists)"""
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
BASE = dict(SPLIT_DECODE=True, SPLIT_DECODE_MIN_REQUESTS=1, SPLIT_DECODE_PDL=True, SPLIT_DECODE_FIRST=True,
            FLUSH_CONFIG=None, FLUSH_SHARE=16)
VARIANTS = {
    "one kernel": dict(SPLIT_DECODE=False),
    "after J=B/16": dict(SPLIT_DECODE_FIRST=False),
    "first J=B/16": {},
    "first J=B/8": dict(FLUSH_SHARE=8),
    "first J=B/32": dict(FLUSH_SHARE=32),
    "first J=B/64": dict(FLUSH_SHARE=64),
    "first fc=64,8": dict(FLUSH_CONFIG="64,8"),
    "first fc=16,2": dict(FLUSH_CONFIG="16,2"),
}
ONCE = ("J=B/8", "fc=")


def setv(settings):
    for k, v in {**BASE, **(settings or {})}.items():
        if k == "FLUSH_CONFIG" and v:
            v = LaunchConfig.parse(v + ",slot,evict")
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
                plan += [(n + " one kernel", r, VARIANTS["one kernel"]), (n + " first", r, {}),
                         (n + " after", r, VARIANTS["after J=B/16"])]
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
json.dump(rows, open(os.path.join(out, f"sweep12_{'_'.join(laws)}.json"), "w"), indent=1)
