"""Per-kernel device time of the 4-layer Nemotron-3-Super TP8 decode step at bs 512: the table
path and replay decode by the fast route (shipped, and with the split of SPLIT_DECODE), eager
steps under torch.profiler after a warm-up; each kernel name's us a step and launches a step."""
import json, os, collections
import torch
from ssmdecode.bench.step import StepBench, model_dims, kernel_spans
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import replay_fast as rf

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
dims = model_dims(shape, None, dev)
STEPS = 10
out = {}
for name, path, knobs in [("table", "table", {}), ("fast shipped", "replay-fast", {}),
                          ("fast split", "replay-fast", dict(SIDE_DECODE=False))]:
    saved = {k: getattr(rf, k) for k in knobs}
    for k, v in knobs.items():
        setattr(rf, k, v)
    bench = StepBench.build(dims, 4, 512, dev, 0, path=path, window=16)
    step_us = bench.time(None).us
    for i in range(3):
        bench.stack.step(bench.hidden, bench.slot_sets[i % bench.slot_sets.shape[0]], None)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(STEPS):
            bench.stack.step(bench.hidden, bench.slot_sets[i % bench.slot_sets.shape[0]], None)
        torch.cuda.synchronize()
    spans = kernel_spans(prof.events())
    agg = collections.defaultdict(lambda: [0.0, 0])
    for n, s, e in spans:
        agg[n][0] += (e - s) / STEPS
        agg[n][1] += 1 / STEPS
    total = sum(v[0] for v in agg.values())
    print(f"== {name}: graph step {step_us:.1f} us, kernels' sum {total:.1f} us a step", flush=True)
    for n, (us, c) in sorted(agg.items(), key=lambda kv: -kv[1][0]):
        print(f"  {us:8.2f} us  x{c:4.1f}  {n[:110]}")
    out[name] = dict(step_us=step_us, kernels={n: v for n, v in agg.items()})
    for k, v in saved.items():
        setattr(rf, k, v)
    del bench
    torch.cuda.empty_cache()
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "e2e_prof.json"), "w"), indent=1)
