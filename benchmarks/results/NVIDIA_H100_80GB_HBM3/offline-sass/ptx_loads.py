"""A fast-route replay call at T tokens and bs B compiled offline (sm_90, headline): the PTX's
global loads (numbered, with the source line each comes from) and its barriers, in PTX order,
up to the first tensor-core instruction.
Usage: python ptx_loads.py T B [CONFIG]"""
import os, sys
os.environ.pop("TRITON_INTERPRET", None)
import torch
from triton.backends.compiler import GPUTarget
from ssmdecode.bench.compile import compile_config
from ssmdecode.bench.spec import make_spec_inputs
from ssmdecode.config import LaunchConfig, replay_fast_config
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank

T, batch = int(sys.argv[1]), int(sys.argv[2])
cfg = LaunchConfig.parse(sys.argv[3]) if len(sys.argv) > 3 else replay_fast_config(64, 128, batch, T)
shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
spec = make_spec_inputs(shape, batch, T, "replay", torch.device("cpu"), 0, rotation=1, window=16)
k = compile_config({**spec.kwargs(0), "exact": False}, cfg, GPUTarget("cuda", 90, 32), replay=True)
print(cfg.label)
loc, n = "", 0
for i, line in enumerate(k.asm["ptx"].splitlines(), 1):
    t = line.strip()
    if t.startswith(".loc") and "//" in t:
        loc = t.split("//", 1)[1].split("@")[0].strip()
    if "ld.global" in t:
        n += 1
        print(f"{i:5d} load {n:2d}  {loc}")
    elif t.startswith("bar.sync"):
        print(f"{i:5d} bar.sync")
    elif t.startswith(("mma", "wgmma")):
        print(f"{i:5d} {t.split()[0]}")
        break
