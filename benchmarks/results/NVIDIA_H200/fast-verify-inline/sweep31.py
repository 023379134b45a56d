"""The verify step's flushes inline in the main kernel (one kernel, SPLIT_FLUSH off) in the dual
form (DUAL_MAX_ELEMENTS raised so that (16,1) takes it), its matmul on the tensor cores (split
bf16) or as float32 FMAs (X16_MMA off), at (16,1), (16,2), (32,2), (32,4), against the shipped
split (grid flush kernel) and the one kernel token by token. T = 4 rows path; T = 8 tiles.
Usage: python sweep31.py T BATCHES LAWS"""
import json, os, sys
import torch
from ssmdecode import LaunchConfig
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import replay_fast as rf
from ssmdecode.ops.selective_state_update import replay as rp

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
T = int(sys.argv[1])
batches = [int(b) for b in sys.argv[2].split(",")]
laws = sys.argv[3].split(",") if len(sys.argv) > 3 else ["steady"]
BASE = dict(SPLIT_FLUSH=False, DUAL_MAX_ELEMENTS=64, X16_MMA=True, SPLIT_TILES=False)
main = "16,1" if T < 8 else "64,4"
VARIANTS = {
    "shipped": (None, dict(SPLIT_FLUSH=True, DUAL_MAX_ELEMENTS=32)),
    "split tiles grid": (None, dict(SPLIT_FLUSH=True, DUAL_MAX_ELEMENTS=32, SPLIT_TILES=True)),
    f"one {main} exact flush": (main, dict(DUAL_MAX_ELEMENTS=32)),
    f"one {main} dual mma": (main, {}),
    f"one {main} dual fma": (main, dict(X16_MMA=False)),
}
if T < 8:
    del VARIANTS["split tiles grid"]
    for c in ("16,2", "32,2", "32,4"):
        VARIANTS[f"one {c} dual mma"] = (c, {})
    VARIANTS["one 16,2 dual fma"] = ("16,2", dict(X16_MMA=False))
else:
    VARIANTS["one 32,4 dual mma"] = ("32,4", {})
    VARIANTS["one 64,8 dual mma"] = ("64,8", {})
original = rp._replay_config


def setv(v):
    text, settings = v
    for k, val in {**BASE, **settings}.items():
        setattr(rf, k, val)
    if text is None:
        rp._replay_config = original
    else:
        cfg = LaunchConfig.parse(text + ",slot,evict")
        rp._replay_config = lambda config, state, batch, t, exact, st: (
            cfg if not exact and config is None else original(config, state, batch, t, exact, st))


rows = []
for law in laws:
    for batch in batches:
        case = br.make_case(shape, T, batch, 16, law, dev, 0)
        routes = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}
        fast = routes["ssmdecode replay fast"]
        plan = [(n, fast, v) for n, v in VARIANTS.items()]
        if law == "steady":
            plan += [(n, r, VARIANTS["shipped"]) for n, r in routes.items() if r.call is not None and r is not fast]
        for name, route, v in plan:
            setv(v)
            try:
                us = br.time_route(case, route, dev).us
                acc = br.accuracy_of(case, route) if (batch <= 128 and route is fast and law != "noflush") else {}
                r = dict(law=law, tokens=T, batch=batch, variant=name, rep=0, us=us,
                         floored=acc.get("out_max_floored"), state_rel=acc.get("state_max_rel"))
            except Exception as e:
                r = dict(law=law, tokens=T, batch=batch, variant=name, rep=0, error=repr(e)[:400])
            print(law, T, batch, name, round(r.get("us", -1), 2), r.get("floored") and round(r["floored"], 3),
                  r.get("state_rel"), r.get("error", ""), flush=True)
            rows.append(r)
        setv(VARIANTS["shipped"])
out = os.environ.get("OUT", ".")
json.dump(rows, open(os.path.join(out, f"sweep31_T{T}_{'_'.join(laws)}.json"), "w"), indent=1)
