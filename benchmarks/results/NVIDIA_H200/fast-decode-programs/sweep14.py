"""T = 1 flush placement (replay_fast.DECODE_FLUSHES): "programs", the flush programs first in the
main kernel's grid (ROLE 4: each takes all of a flushing request's step, the main programs the
requests that do not flush), with the dual-form flush or token by token (PROGRAMS_DUAL), at
several shares J = B / FLUSH_SHARE; against the flush kernel after the main kernel (session 14's)
and the one kernel; compat.vllm's adapter and vLLM's output-only kernel beside.
Usage: python sweep14.py BATCHES LAWS  (comma lists)"""
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
BASE = dict(SPLIT_DECODE=True, SPLIT_DECODE_MIN_REQUESTS=1, SPLIT_DECODE_PDL=True, DECODE_FLUSHES="programs",
            PROGRAMS_DUAL=True, PROGRAMS_MAX_REGISTERS=None, FLUSH_CONFIG=None, FLUSH_SHARE=16)
VARIANTS = {
    "one kernel": dict(SPLIT_DECODE=False),
    "after J=B/16": dict(DECODE_FLUSHES="after"),
    "programs J=B/16": {},
    "programs J=B/16 r168": dict(PROGRAMS_MAX_REGISTERS=168),
    "programs J=B/16 token r168": dict(PROGRAMS_DUAL=False, PROGRAMS_MAX_REGISTERS=168),
    "programs J=B/8 token r168": dict(FLUSH_SHARE=8, PROGRAMS_DUAL=False, PROGRAMS_MAX_REGISTERS=168),
    "programs J=B/32 token r168": dict(FLUSH_SHARE=32, PROGRAMS_DUAL=False, PROGRAMS_MAX_REGISTERS=168),
    "programs J=B/16 token r128": dict(PROGRAMS_DUAL=False, PROGRAMS_MAX_REGISTERS=128),
}
ONCE = ("J=B/8", "J=B/32", "r128")


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
                plan += [(n + " one kernel", r, VARIANTS["one kernel"]), (n + " programs", r, {}), (n + " programs token r168", r, VARIANTS["programs J=B/16 token r168"]),
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
json.dump(rows, open(os.path.join(out, f"sweep14_{'_'.join(laws)}.json"), "w"), indent=1)
