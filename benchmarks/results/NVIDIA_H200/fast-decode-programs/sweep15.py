"""The T = 1 split step's flush kernel after the main kernel (replay_fast.DECODE_FLUSHES = "after",
from SPLIT_DECODE_MIN_REQUESTS on) at other shares J = B / FLUSH_SHARE and flush configs, with
register caps (FLUSH_CONFIG's regs<N>), so that its programs fit on the GPU at once; the flush
programs in the main kernel's grid (FLUSH_PROGRAMS) and the one kernel beside; vLLM's kernel
in the same process. Usage: python sweep15.py BATCHES LAWS  (comma lists)"""
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
BASE = dict(SPLIT_DECODE=True, SPLIT_DECODE_MIN_REQUESTS=1, SPLIT_DECODE_PDL=True, DECODE_FLUSHES="after",
            FLUSH_PROGRAMS=False, FLUSH_PROGRAMS_MIN_REQUESTS=64, FLUSH_CONFIG=None, FLUSH_SHARE=16)
VARIANTS = {
    "one kernel": dict(SPLIT_DECODE=False),
    "programs r168": dict(SPLIT_DECODE=False, FLUSH_PROGRAMS=True, FLUSH_PROGRAMS_MIN_REQUESTS=1),
    "after J=B/16": {},
    "after J=B/32": dict(FLUSH_SHARE=32),
    "after J=B/64": dict(FLUSH_SHARE=64),
    "after J=B/16 fc=32,4,r128": dict(FLUSH_CONFIG="32,4,slot,evict,regs128"),
    "after J=B/32 fc=32,4,r128": dict(FLUSH_SHARE=32, FLUSH_CONFIG="32,4,slot,evict,regs128"),
    "after J=B/16 fc=32,4,r96": dict(FLUSH_CONFIG="32,4,slot,evict,regs96"),
    "after J=B/32 fc=16,1": dict(FLUSH_SHARE=32, FLUSH_CONFIG="16,1,slot,evict"),
    "after J=B/32 fc=32,2": dict(FLUSH_SHARE=32, FLUSH_CONFIG="32,2,slot,evict"),
    "first J=B/32 fc=32,4,r128": dict(DECODE_FLUSHES="first", FLUSH_SHARE=32, FLUSH_CONFIG="32,4,slot,evict,regs128"),
}
ONCE = ("fc=16,1", "fc=32,2", "r96", "first", "J=B/64")


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
                plan += [(n + " after", r, {}), (n + " after J=B/32 fc=32,4,r128", r, VARIANTS["after J=B/32 fc=32,4,r128"])]
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
json.dump(rows, open(os.path.join(out, f"sweep15_{'_'.join(laws)}.json"), "w"), indent=1)
