"""T = 1 flush placement probe (scratch, .scratch/rf_probe.py): the fast route as shipped
("default") against its flushes in a kernel of their own after the main one (ROLE 1 main at
(16,1), ROLE 2 flush kernel at FLUSH_CONFIG), with and without programmatic dependent launch of
the flush kernel ("pdl"/"nopdl"), and the main kernel alone with no flush at all ("role1-only":
wrong states, a bound); compat.vllm and vLLM's output-only kernel beside."""
import importlib.util, json, os, sys
import torch
from ssmdecode import LaunchConfig
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
import ssmdecode.ops.selective_state_update.replay as rp

spec = importlib.util.spec_from_file_location("rf_probe", os.path.join(os.path.dirname(__file__), "rf_probe.py"))
m = importlib.util.module_from_spec(spec); sys.modules["rf_probe"] = m; spec.loader.exec_module(m)
FAST0 = rp.fast_launch
shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
batches = [int(b) for b in sys.argv[1].split(",")]
laws = sys.argv[2].split(",") if len(sys.argv) > 2 else ["steady"]
VARIANTS = {
    "default": None,
    "role1-only": dict(FORCE_ROLE1=1, FLUSH_CHUNK_COLS=0),
    "split fc=32,4 pdl": dict(SPLIT_T1=1, FLUSH_PDL=1, FLUSH_CHUNK_COLS=0, FLUSH_CONFIG="32,4"),
    "split fc=32,4 nopdl": dict(SPLIT_T1=1, FLUSH_PDL=0, FLUSH_CHUNK_COLS=0, FLUSH_CONFIG="32,4"),
    "split fc=64,8 nopdl": dict(SPLIT_T1=1, FLUSH_PDL=0, FLUSH_CHUNK_COLS=0, FLUSH_CONFIG="64,8"),
    "split fc=16,2 nopdl": dict(SPLIT_T1=1, FLUSH_PDL=0, FLUSH_CHUNK_COLS=0, FLUSH_CONFIG="16,2"),
}
BASE = dict(FORCE_ROLE1=0, SPLIT_T1=0, FLUSH_PDL=1, FLUSH_CHUNK_COLS=0, FLUSH_CONFIG=None)


def setv(settings):
    rp.fast_launch = FAST0 if settings is None else m.fast_launch
    for k, v in {**BASE, **(settings or {})}.items():
        if k == "FLUSH_CONFIG":
            v = LaunchConfig.parse(v + ",slot,evict") if v else None
        setattr(m, k, v)


rows = []
for law in laws:
    for batch in batches:
        case = br.make_case(shape, 1, batch, 16, law, dev, 0)
        routes = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}
        fast = routes["ssmdecode replay fast"]
        plan = [(n, fast, s) for n, s in VARIANTS.items()]
        for n, r in routes.items():
            if r.call is not None and "compat" in n:
                plan += [(n, r, None), (n + " split fc=32,4 nopdl", r, VARIANTS["split fc=32,4 nopdl"])]
            if r.call is not None and "vLLM" in n:
                plan.append((n, r, None))
        for rep in range(2):
            for name, route, settings in (plan if rep == 0 else plan[:len(VARIANTS)]):
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
json.dump(rows, open(os.path.join(out, f"sweep9_{'_'.join(laws)}.json"), "w"), indent=1)
