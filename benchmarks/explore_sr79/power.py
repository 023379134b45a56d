"""run 79: one kernel (fp16 state, table config) called back to back for SECONDS, its mean time a
call; the shell samples clock and power meanwhile."""
import sys, time, dataclasses
import torch
from ssmdecode.shapes import PRESETS, per_rank
from ssmdecode.bench.calls import timing_inputs
from ssmdecode.ops.selective_state_update import selective_state_update

rounding, dtype, batch, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
shape = dataclasses.replace(per_rank(PRESETS["nemotron3-super"], 8), state_dtype=getattr(torch, dtype))
dev = torch.device("cuda")
inp = timing_inputs(shape, batch, dev, 0)
seed = torch.tensor([12345], dtype=torch.int64, device=dev)
extra = {"rand_seed": seed} if rounding == "stochastic" else {}
for i in range(20):
    selective_state_update(**inp.kwargs(i), **extra)
torch.cuda.synchronize()
n, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < seconds:
    for i in range(50):
        selective_state_update(**inp.kwargs(n + i), **extra)
    n += 50
    torch.cuda.synchronize()
dt = time.perf_counter() - t0
print(f"{rounding} {dtype} bs{batch}: {n} calls, {dt / n * 1e6:.2f} us a call (eager, launch included)")
