"""The replay decode step (T = 1, fast route) in the 4-layer Nemotron-3-Super TP8 stack at bs
128 and 512: where the flushes go (SIDE_DECODE's programs beside on a stream of their own and
after; without the programs beside; the split of SPLIT_DECODE; the flush programs in the main
grid) against the single-token table path, step time by e2e's timer."""
import json, os
import torch
from ssmdecode.bench.step import StepBench, model_dims
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import replay_fast as rf

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
dims = model_dims(shape, None, dev)
VARIANTS = {
    "shipped": {},
    "side, none beside": dict(SIDE_PROGRAMS=0),
    "split (no side)": dict(SIDE_DECODE=False, SPLIT_DECODE_MIN_REQUESTS=128),
    "programs in the main grid": dict(SIDE_DECODE=False, SPLIT_DECODE_MIN_REQUESTS=10**9),
}
saved = {k: getattr(rf, k) for v in VARIANTS.values() for k in v}
rows = []
for batch in (128, 512):
    table = StepBench.build(dims, 4, batch, dev, 0)
    us = table.time(None).us
    rows.append(dict(batch=batch, variant="table", us=us))
    print(batch, "table", round(us, 2), flush=True)
    del table
    torch.cuda.empty_cache()
    bench = StepBench.build(dims, 4, batch, dev, 0, path="replay-fast", window=16)
    for name, knobs in VARIANTS.items():
        for k, v in {**saved, **knobs}.items():
            setattr(rf, k, v)
        us = bench.time(None).us
        rows.append(dict(batch=batch, variant=name, us=us))
        print(batch, name, round(us, 2), flush=True)
    for k, v in saved.items():
        setattr(rf, k, v)
    del bench
    torch.cuda.empty_cache()
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "e2e_side.json"), "w"), indent=1)
