"""The verify step's flushing requests taken whole by flush programs (ROLE 7: the flush first, on
the state tile, as one matmul, _absorb_mma; out from the new checkpoint) beside the main kernel
(ROLE 5, the other requests; replay_fast.VERIFY_FLUSH_BESIDE), against the split (a flush kernel
after the main kernel) and the one-kernel flush first ('first', with the matmul 'fm'), the
anchors in the same process.
sweep36: sweep35 with b<R>x<W>[r<regs>][h<N>] and h<N>: N heads a flush program (BESIDE_HEADS).
Usage: python sweep36.py TOKENS BATCHES LAWS VARIANTS
  variants: shipped (the tree's defaults) | split | first | fm | b<R>x<W>[r<regs>] (the flush
  programs' config: R rows, W warps, a register cap), each optionally @R:W:flags, the main
  kernel's config. Runs 173-180 ran an earlier form of this script on the probes' tree
  (probes-runs173-180.diff): 'shipped' was then the split, 'a<R>x<W>' the flush programs after
  the main kernel, '+early', '+skip', '+share<N>' and '+prio0' probes of the README."""
import json, os, re, sys
import torch
from ssmdecode.bench import replay as br
from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update import replay as rp
from ssmdecode.ops.selective_state_update import replay_fast as rf
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
tokens = [int(t) for t in sys.argv[1].split(",")]
batches = [int(b) for b in sys.argv[2].split(",")]
laws = sys.argv[3].split(",")
names = sys.argv[4].split(",")
original = rp._replay_config
DEFAULT_BESIDE = rf.VERIFY_FLUSH_BESIDE
from ssmdecode.ops.selective_state_update import launch as _la
PRIO0 = _la.SIDE_PRIORITY


def use(text):
    if text is None:
        rp._replay_config = original
        return
    cfg = LaunchConfig.parse(text.replace(":", ","))
    rp._replay_config = lambda config, state, batch, t, exact, st: (
        cfg if not exact and config is None else original(config, state, batch, t, exact, st))


def reset():
    rf.VERIFY_FLUSH_BESIDE, rf.BESIDE_CONFIG, rf.BESIDE_HEADS = DEFAULT_BESIDE, None, 1
    from ssmdecode.ops.selective_state_update import launch as la
    la.SIDE_PRIORITY = PRIO0
    rf.VERIFY_FLUSH_FIRST = rf.FLUSH_FIRST_MMA = False
    rf.SPLIT_FROM_TOKENS = 4
    for a, v in SAVED.items():
        setattr(rf, a, v)
    use(None)


SAVED = {}


def setup(name):
    base, _, cfg = name.partition("@")
    base, *knobs = base.split("+")  # +KNOB=VALUE: a replay_fast knob for this variant
    for k in knobs:
        a, v = k.split("=")
        SAVED.setdefault(a, getattr(rf, a))
        setattr(rf, a, int(v))
    use(cfg or None)
    rf.SPLIT_FROM_TOKENS = 2
    if base == "fm":
        rf.VERIFY_FLUSH_FIRST = rf.FLUSH_FIRST_MMA = True
    elif base == "first":
        rf.VERIFY_FLUSH_FIRST = True
    elif base == "split":  # the split flush kernel after the main kernel (before run 181's tree, the default)
        rf.VERIFY_FLUSH_BESIDE = False
        rf.SPLIT_FROM_TOKENS = 4
    elif base[0] == "b" and "x" in base:  # the flush programs beside, at the config b<R>x<W>[r<regs>]
        m = re.fullmatch(r"b(\d+)x(\d+)(?:r(\d+))?(?:h(\d+))?", base)
        rf.VERIFY_FLUSH_BESIDE = True
        rf.BESIDE_HEADS = int(m[4] or 1)
        rf.BESIDE_CONFIG = LaunchConfig.parse(f"{m[1]},{m[2]},slot,evict" + (f",regs{m[3]}" if m[3] else ""))
    elif base[0] == "h":  # the shipped flush programs' configs, h<N> heads a program
        rf.BESIDE_HEADS = int(base[1:])
        rf.SPLIT_FROM_TOKENS = 4
    else:
        assert base == "shipped", base
        rf.SPLIT_FROM_TOKENS = 4  # the tree's defaults


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
                    setup(name)
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
                reset()
out = os.environ.get("OUT", ".")
json.dump(rows, open(os.path.join(out, f"sweep36_T{'_'.join(map(str, tokens))}_{'_'.join(laws)}_{len(names)}.json"), "w"),
          indent=1)
