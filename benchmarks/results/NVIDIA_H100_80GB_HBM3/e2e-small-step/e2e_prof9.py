"""The 4-layer Nemotron-3-Super TP8 decode step (ssmdecode e2e's StepBench) at the batches of
argv[1]: graph step time of the table path and of replay decode by the fast route with knobs of
ssmdecode.models.mamba2 or replay_fast set (argv[2]: variants separated by ';', each
'table' or 'fast[+KNOB=int...]'), each timed twice, then each variant's SSU and cursor kernels
under torch.profiler over eager steps."""
import json, os, sys, collections, statistics
import torch
import ssmdecode.models.mamba2 as m2
from ssmdecode.ops.selective_state_update import replay_fast as rf
from ssmdecode.bench.step import StepBench, model_dims, kernel_spans
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
dims = model_dims(shape, None, dev)
STEPS = 48
out = {}
batches = [int(b) for b in sys.argv[1].split(",")]
variants = sys.argv[2].split(";")

def knobs_of(v):
    parts = v.split("+")
    ks = {}
    for kv in parts[1:]:
        k, val = kv.split("=")
        mod = m2 if hasattr(m2, k) else rf
        assert hasattr(mod, k), k
        ks[(mod, k)] = int(val)
    return ("table" if parts[0] == "table" else "replay-fast"), ks

for bs in batches:
    for v in variants:
        path, ks = knobs_of(v)
        saved = {mk: getattr(*mk) for mk in ks}
        for (mod, k), val in ks.items():
            setattr(mod, k, type(saved[(mod, k)])(val) if not isinstance(saved[(mod, k)], bool) else bool(val))
        bench = StepBench.build(dims, 4, bs, dev, 0, path=path, window=16)
        step_us = [bench.time(None).us for _ in range(2)]
        for i in range(4):
            bench.stack.step(bench.hidden, bench.slot_sets[i % bench.slot_sets.shape[0]], None)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for i in range(STEPS):
                bench.stack.step(bench.hidden, bench.slot_sets[i % bench.slot_sets.shape[0]], None)
            torch.cuda.synchronize()
        agg = collections.defaultdict(list)
        for n, s, e in kernel_spans(prof.events()):
            agg[n].append(e - s)
        total = sum(sum(x) for x in agg.values()) / STEPS
        print(f"== bs {bs} {v}: graph step {step_us[0]:.2f} {step_us[1]:.2f} us, kernels' sum {total:.1f} us a step", flush=True)
        for n, ds in sorted(agg.items(), key=lambda kv: -sum(kv[1])):
            if "select" in n or "replay" in n or "advance" in n:
                q = sorted(ds)
                print(f"  {sum(ds)/STEPS:8.2f} us x{len(ds)/STEPS:4.1f} min {q[0]:.2f} med {statistics.median(q):.2f} max {q[-1]:.2f}  {n[:70]}")
        out[f"{bs} {v}"] = dict(step_us=step_us, kernel_sum_us=total,
                                ssu={n: sorted(ds) for n, ds in agg.items() if "select" in n or "replay" in n or "advance" in n})
        for (mod, k), val in saved.items():
            setattr(mod, k, val)
        del bench
        torch.cuda.empty_cache()
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "e2e_prof9_" + sys.argv[1].replace(",", "_") + ".json"), "w"))
