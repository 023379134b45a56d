"""Per-kernel device time of the 4-layer Nemotron-3-Super TP8 decode step at small batch: the
table path against replay decode by the fast route at several T = 1 configs (patched into
config.replay_fast_config), graph step time and eager steps under torch.profiler."""
import json, os, sys, collections, statistics
import torch
import ssmdecode.config as cfgmod
from ssmdecode.config import LaunchConfig
from ssmdecode.bench.step import StepBench, model_dims, kernel_spans
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
dims = model_dims(shape, None, dev)
STEPS = 48
orig = cfgmod.replay_fast_config
out = {}
batches = [int(b) for b in sys.argv[1].split(",")]
variants = [("table", "table", None)] + [(f"fast {c}", "replay-fast", c) for c in sys.argv[2].split(";")]
for bs in batches:
    for name, path, c in variants:
        if c and c != "default":
            m, w = (int(v) for v in c.split(","))
            cfgmod.replay_fast_config = lambda h, d, b=None, t=None, m=m, w=w: LaunchConfig(m, w, True, True)
        else:
            cfgmod.replay_fast_config = orig
        cfgmod.clear_config_cache()
        bench = StepBench.build(dims, 4, bs, dev, 0, path=path, window=16)
        step_us = [bench.time(None).us for _ in range(2)]
        for i in range(4):
            bench.stack.step(bench.hidden, bench.slot_sets[i % bench.slot_sets.shape[0]], None)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for i in range(STEPS):
                bench.stack.step(bench.hidden, bench.slot_sets[i % bench.slot_sets.shape[0]], None)
            torch.cuda.synchronize()
        spans = kernel_spans(prof.events())
        agg = collections.defaultdict(list)
        for n, s, e in spans:
            agg[n].append(e - s)
        total = sum(sum(v) for v in agg.values()) / STEPS
        print(f"== bs {bs} {name}: graph step {step_us[0]:.2f} {step_us[1]:.2f} us, kernels' sum {total:.1f} us a step", flush=True)
        for n, ds in sorted(agg.items(), key=lambda kv: -sum(kv[1])):
            if sum(ds) / STEPS < 0.5 and "select" not in n and "replay" not in n:
                continue
            q = sorted(ds)
            print(f"  {sum(ds)/STEPS:8.2f} us x{len(ds)/STEPS:4.1f} min {q[0]:.2f} med {statistics.median(q):.2f} max {q[-1]:.2f}  {n[:90]}")
        out[f"{bs} {name}"] = dict(step_us=step_us, kernels={n: v for n, v in agg.items()})
        del bench
        torch.cuda.empty_cache()
cfgmod.replay_fast_config = orig
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "e2e_prof8.json"), "w"))
