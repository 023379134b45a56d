"""The fast route's verify step at T tokens, bs B under Nsight Compute: the bench's own case
(headline, window 16) with LAW cursors; warm-up calls, then the profiled ones (each on the
same slot set: a non-flush step writes no state, so every call is the same step).
Usage: ncu --kernel-name regex:_selective_state_replay_fast_kernel --launch-skip 3 --launch-count 1 \
           --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats \
           python ncu_t4b8.py T B LAW"""
import sys
import torch
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank

T, B, law = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dev = torch.device("cuda")
shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
case = br.make_case(shape, T, B, 16, law, dev, 0)
none = br.Anchor("", None, "not profiled")
fast = {r.name: r for r in br.routes_for(case, {"vllm_spec": none, "vllm_output_only": none, "flashinfer": none})}["ssmdecode replay fast"]
for _ in range(4):
    fast.call(0, fast.writes)
torch.cuda.synchronize()
print("done", T, B, law)
