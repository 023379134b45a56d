"""The draft-by-draft verify step's flush in the main kernel, the checkpoint re-read after out in
chunks of 16 or 32 columns (replay_fast.VERIFY_FLUSH_CHUNK), against the shipped split (a flush
kernel after the main kernel at T >= 4, token by token from the live tile at T = 2), with and
without the precomputed weights (replay_fast.WEIGHTS, never timed on the H200), the anchors in
the same process where they load.
Usage: python sweep34.py TOKENS BATCHES LAWS VARIANTS (shipped, weights, first, c<chunk>[i]s<stages>[k<keep>][+w],
each optionally @R:W:flags, the fast route's config)"""
import json, os, sys
import torch
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import replay_fast as rf

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
tokens = [int(t) for t in sys.argv[1].split(",")]
batches = [int(b) for b in sys.argv[2].split(",")]
laws = sys.argv[3].split(",")
import re


from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update import replay as rp

original = rp._replay_config


def use(text):
    """The fast route's config: the shipped choice (None), else the one named."""
    if text is None:
        rp._replay_config = original
        return
    cfg = LaunchConfig.parse(text.replace(":", ","))
    rp._replay_config = lambda config, state, batch, t, exact, st: (
        cfg if not exact and config is None else original(config, state, batch, t, exact, st))


def variant(name):
    """(chunk, inplace, stages, weights, keep): shipped, weights, or c<chunk>[i]s<stages>[k<keep>][+w]."""
    if name in ("shipped", "weights", "first"):
        return 0, False, 1, name == "weights", 0
    m = re.fullmatch(r"c(\d+)(i?)s(\d+)(?:k(\d))?(\+w)?", name)
    return int(m[1]), bool(m[2]), int(m[3]), bool(m[5]), int(m[4] or 0)
names = sys.argv[4].split(",")
rows = []
for law in laws:
    for T in tokens:
        for batch in batches:
            case = br.make_case(shape, T, batch, 16, law, dev, 0)
            routes = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}
            fast = routes["ssmdecode replay fast"]
            plan = [(n, fast) for n in names]
            plan += [(n, r) for n, r in routes.items() if r.call is not None and r is not fast
                     and ("vLLM" in n or "flashinfer" in n or "intermediate" in n)]
            for name, route in plan:
                if route is fast:
                    base, _, cfg = name.partition("@")
                    base, _, ahead = base.partition("~")
                    assert not ahead, "the prefetch is gone (run 7 of this session)"
                    base = base or "shipped"
                    use(cfg or None)
                    chunk, inplace, stages, weights, keep = variant(base)
                    rf.VERIFY_FLUSH_CHUNK, rf.FLUSH_INPLACE, rf.FLUSH_STAGES, rf.WEIGHTS = chunk, inplace, stages, weights
                    rf.FLUSH_KEEP = keep
                    rf.VERIFY_FLUSH_FIRST = base == "first"
                try:
                    us = br.time_route(case, route, dev).us
                    acc = br.accuracy_of(case, route) if (batch <= 128 and route is fast) else {}
                    r = dict(law=law, tokens=T, batch=batch, variant=name, us=us,
                             floored=acc.get("out_max_floored"), state_rel=acc.get("state_max_rel"))
                except Exception as e:
                    r = dict(law=law, tokens=T, batch=batch, variant=name, error=repr(e)[:400])
                print(law, T, batch, name, round(r.get("us", -1), 2), r.get("floored") and round(r["floored"], 3),
                      r.get("state_rel"), r.get("error", ""), flush=True)
                rows.append(r)
            rf.VERIFY_FLUSH_CHUNK, rf.FLUSH_INPLACE, rf.FLUSH_STAGES, rf.WEIGHTS = 0, False, 1, False
            rf.VERIFY_FLUSH_FIRST = False

            use(None)
out = os.environ.get("OUT", ".")
json.dump(rows, open(os.path.join(out, f"sweep34_T{'_'.join(map(str, tokens))}_{'_'.join(laws)}_{len(names)}.json"), "w"),
          indent=1)
