"""The dual form's weights computed once a (request, head) by the Grams' kernel, which also appends
the drafts' dt' and B (replay_fast.WEIGHTS), against each main program computing them (off), with
the main kernel's config (the shipped one, else the named: the leaner kernel may favour others),
decode (T = 1) and the draft-by-draft verify step (T = 2, 4), steady cursors (and the laws named),
the anchors in the same process where they load.
Usage: python sweep33.py TOKENS BATCHES [LAWS [CONFIGS]]"""
import json, os, sys
import torch
from ssmdecode.bench import replay as br
from ssmdecode.config import LaunchConfig
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import replay as rp
from ssmdecode.ops.selective_state_update import replay_fast as rf

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
tokens = [int(t) for t in sys.argv[1].split(",")]
batches = [int(b) for b in sys.argv[2].split(",")]
laws = sys.argv[3].split(",") if len(sys.argv) > 3 else ["steady"]
configs = sys.argv[4].split("/") if len(sys.argv) > 4 else []
original = rp._replay_config


def use(text):
    if text is None:
        rp._replay_config = original
        return
    cfg = LaunchConfig.parse(text + ",slot,evict")
    rp._replay_config = lambda config, state, batch, t, exact, st: (
        cfg if not exact and config is None else original(config, state, batch, t, exact, st))


rows = []
for law in laws:
    for T in tokens:
        for batch in batches:
            case = br.make_case(shape, T, batch, 16, law, dev, 0)
            routes = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}
            fast = routes["ssmdecode replay fast"]
            plan = [("weights off", fast, False, None), ("weights on", fast, True, None),
                    ("weights off again", fast, False, None), ("weights on again", fast, True, None)]
            plan += [(f"weights on {c}", fast, True, c) for c in configs]
            plan += [(n, r, False, None) for n, r in routes.items() if r.call is not None and r is not fast
                     and ("vLLM" in n or "flashinfer" in n)]
            for name, route, weights, cfg in plan:
                rf.WEIGHTS = weights
                use(cfg)
                try:
                    us = br.time_route(case, route, dev).us
                    acc = br.accuracy_of(case, route) if (batch <= 128 and route is fast) else {}
                    r = dict(law=law, tokens=T, batch=batch, variant=name, rep=0, us=us,
                             floored=acc.get("out_max_floored"), state_rel=acc.get("state_max_rel"))
                except Exception as e:
                    r = dict(law=law, tokens=T, batch=batch, variant=name, rep=0, error=repr(e)[:400])
                print(law, T, batch, name, round(r.get("us", -1), 2), r.get("floored") and round(r["floored"], 3),
                      r.get("state_rel"), r.get("error", ""), flush=True)
                rows.append(r)
            rf.WEIGHTS = False
            use(None)
out = os.environ.get("OUT", ".")
json.dump(rows, open(os.path.join(out, f"sweep33_T{'_'.join(map(str, tokens))}_{'_'.join(laws)}.json"), "w"), indent=1)
