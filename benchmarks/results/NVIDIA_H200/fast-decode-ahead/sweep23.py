"""sweep22.py with the flush programs' requests pipelined (SIDE_AHEAD, PROGRAMS_AHEAD: _decode_flushes_ahead), and flush programs after the main kernel alone (SIDE_PROGRAMS 0). The T = 1 step with its flushing requests' whole steps in a kernel of flush programs on a
stream beside the Grams and the main kernel (ROLE 6 beside ROLE 5, replay_fast._side_flush) at
several configs and shares, against the split (flush kernel after the main kernel) and the flush
programs in the main grid; vLLM's kernel in the same process. Usage: python sweep22.py BATCHES LAWS"""
import json, os, sys
import torch
from ssmdecode import LaunchConfig
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import replay_fast as rf
from ssmdecode.ops.selective_state_update import launch as lm

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
batches = [int(b) for b in sys.argv[1].split(",")]
laws = sys.argv[2].split(",") if len(sys.argv) > 2 else ["steady"]
BASE = dict(SIDE_DECODE=True, SIDE_DECODE_MIN_REQUESTS=64, SIDE_PROGRAMS=0, SIDE_CAP_SHARE=8, SIDE_AFTER_PROGRAMS=8, SIDE_CONFIG=None, SIDE_PRIORITY=-1, SIDE_AHEAD=False, PROGRAMS_AHEAD=False)
VARIANTS = {
    "shipped (programs < 512 <= split)": dict(SIDE_DECODE=False),
    "programs ahead (< 512)": dict(SIDE_DECODE=False, PROGRAMS_AHEAD=True),
    "after J=8": dict(),
    "after J=8 ahead": dict(SIDE_AHEAD=True),
    "after J=4 ahead": dict(SIDE_AHEAD=True, SIDE_AFTER_PROGRAMS=4),
    "after J=16 ahead": dict(SIDE_AHEAD=True, SIDE_AFTER_PROGRAMS=16),
    "beside J=4 cap B/8, after J=8 ahead": dict(SIDE_AHEAD=True, SIDE_PROGRAMS=4),
}


def setv(settings, batch=1):
    for k, v in {**BASE, **(settings or {})}.items():
        if v == "B/4":
            v = batch // 4
        if k.endswith("_CONFIG") and v:
            v = LaunchConfig.parse(v)
        setattr(lm if k == "SIDE_PRIORITY" else rf, k, v)


rows = []
for law in laws:
    for batch in batches:
        case = br.make_case(shape, 1, batch, 16, law, dev, 0)
        routes = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}
        fast = routes["ssmdecode replay fast"]
        plan = [(n, fast, s) for n, s in VARIANTS.items()]
        for n, r in routes.items():
            if r.call is not None and "compat" in n:
                plan += [(n + " shipped", r, VARIANTS["shipped (programs < 512 <= split)"]), (n + " after J=8 ahead", r, VARIANTS["after J=8 ahead"])]
            if r.call is not None and "vLLM" in n:
                plan.append((n, r, None))
        for rep in range(1):
            for name, route, settings in plan:
                setv(settings, batch)
                try:
                    us = br.time_route(case, route, dev).us
                    acc = br.accuracy_of(case, route) if (rep == 0 and batch == 512 and "vLLM" not in name) else {}
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
json.dump(rows, open(os.path.join(out, f"sweep23_{'_'.join(laws)}.json"), "w"), indent=1)
