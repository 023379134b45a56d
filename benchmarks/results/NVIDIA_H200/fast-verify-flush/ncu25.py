"""The T >= 2 fast route's kernels one by one under ncu: python ncu25.py T BATCH LAW [variant key=value ...]"""
import sys
import torch
from ssmdecode import LaunchConfig
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import replay_fast as rf

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
T, batch, law = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for kv in sys.argv[4:]:
    k, v = kv.split("=")
    setattr(rf, k, LaunchConfig.parse(v) if k.endswith("_CONFIG") else eval(v))
case = br.make_case(shape, T, batch, 16, law, dev, 0)
routes = {r.name: r for r in br.routes_for(case, br.load_anchors(case))}
fast = routes["ssmdecode replay fast"]
for i in range(3):
    fast.call(i, fast.writes)
torch.cuda.synchronize()
