"""The verify step's flushing requests' whole steps by flush programs beside the main kernel (SIDE_VERIFY:
ROLE 6 beside ROLE 5, _verify_flush) at several program counts and shares, against the split (flush kernel
after the main kernel, its programs a (request, rows, head) or from the flush list); the exact route and
the anchors (where they load) in the same process. Usage: python sweep27.py T BATCHES LAWS [all|top]"""
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
which = sys.argv[4] if len(sys.argv) > 4 else "all"
BASE = dict(SPLIT_FLUSH=True, VERIFY_FLUSH_LIST=False, FLUSH_SHARE=32, SIDE_VERIFY=False, SIDE_VERIFY_MIN_REQUESTS=16,
            SIDE_VERIFY_PROGRAMS=4, SIDE_VERIFY_CAP_SHARE=4, SIDE_VERIFY_AFTER_PROGRAMS=0, SIDE_CONFIG=None,
            SIDE_VERIFY_MAX_REGISTERS=None)
S = dict(SIDE_VERIFY=True)
VARIANTS = {
    "split (grid flush)": {},
    "split list share8": dict(VERIFY_FLUSH_LIST=True, FLUSH_SHARE=8),
    "side J=16 all": dict(S, SIDE_VERIFY_PROGRAMS=16, SIDE_VERIFY_CAP_SHARE=1),
    "side J=32 all": dict(S, SIDE_VERIFY_PROGRAMS=32, SIDE_VERIFY_CAP_SHARE=1),
    "side J=8 cap B/4, after B/8": dict(S, SIDE_VERIFY_PROGRAMS=8, SIDE_VERIFY_CAP_SHARE=4, FLUSH_SHARE=8),
    "side J=16 cap B/4, after B/8": dict(S, SIDE_VERIFY_PROGRAMS=16, SIDE_VERIFY_CAP_SHARE=4, FLUSH_SHARE=8),
    "side J=0, after B/8": dict(S, SIDE_VERIFY_PROGRAMS=0, FLUSH_SHARE=8),
    "side J=0, after B/4": dict(S, SIDE_VERIFY_PROGRAMS=0, FLUSH_SHARE=4),
    "side J=16 all (16,2)": dict(S, SIDE_VERIFY_PROGRAMS=16, SIDE_VERIFY_CAP_SHARE=1, SIDE_CONFIG="16,2,slot,evict"),
    "side J=32 all (16,2)": dict(S, SIDE_VERIFY_PROGRAMS=32, SIDE_VERIFY_CAP_SHARE=1, SIDE_CONFIG="16,2,slot,evict"),
    "side J=16 all regs128": dict(S, SIDE_VERIFY_PROGRAMS=16, SIDE_VERIFY_CAP_SHARE=1, SIDE_VERIFY_MAX_REGISTERS=128),
    "side J=32 all regs128": dict(S, SIDE_VERIFY_PROGRAMS=32, SIDE_VERIFY_CAP_SHARE=1, SIDE_VERIFY_MAX_REGISTERS=128),
    "side J=0, after B/8 regs128": dict(S, SIDE_VERIFY_PROGRAMS=0, FLUSH_SHARE=8, SIDE_VERIFY_MAX_REGISTERS=128),
}
TOP = {"split (grid flush)", "split list share8", "side J=16 all", "side J=32 all", "side J=0, after B/8", "side J=32 all (16,2)",
       "side J=32 all regs128", "side J=0, after B/8 regs128"}


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
        plan = [(n, fast, s) for n, s in VARIANTS.items() if which == "all" or n in TOP]
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
json.dump(rows, open(os.path.join(out, f"sweep27_T{T}_{'_'.join(laws)}.json"), "w"), indent=1)
