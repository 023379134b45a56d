"""Does PROBE=1 (the verify flush's store masked off) leave the pool untouched on the GPU? T = 4 bs 8 allflush."""
import torch
from ssmdecode.bench import replay as br
from ssmdecode.ops.selective_state_update import replay_fast as rf
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
case = br.make_case(shape, 4, 8, 16, "allflush", torch.device("cuda"), 0)
none = br.Anchor("", None, "x")
for probe in (0, 1, 2):
    rf.PROBE = probe
    fast = {r.name: r for r in br.routes_for(case, {"vllm_spec": none, "vllm_output_only": none, "flashinfer": none})}["ssmdecode replay fast"]
    before = case.state.clone()
    fresh = {k: v.clone() for k, v in fast.writes.items()}
    fast.call(0, fresh)
    torch.cuda.synchronize()
    s = case.slot_sets[0].long()
    print("PROBE", probe, "slots changed:", int((fresh["state"][s] != before[s]).flatten(1).any(1).sum()), "of", len(s),
          "acc", {k: v for k, v in br.accuracy_of(case, fast).items() if k in ("state_max_rel", "out_max_floored")}, flush=True)
