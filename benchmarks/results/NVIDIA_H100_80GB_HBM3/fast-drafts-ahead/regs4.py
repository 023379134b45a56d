"""Registers of the T >= 2 fast route's main kernel at the headline shape, sm_90, offline, under knob settings.
Usage: python regs4.py T BATCH CONFIG [KNOB=VALUE ...]"""
import os, sys
sys.path.insert(0, "benchmarks")
os.environ.pop("TRITON_INTERPRET", None)
import torch
from triton.backends.compiler import GPUTarget
from ssmdecode.bench.compile import compile_config
from ssmdecode.bench.spec import make_spec_inputs
from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update import replay_fast as rf
from ssmdecode.shapes import Shape
import compile_info as ci
T, batch, cfg = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for k in sys.argv[4:]:
    a, v = k.split("=")
    val = {"True": True, "False": False}.get(v, int(v) if v.lstrip("-").isdigit() else v)
    if a.endswith("_CONFIG") and isinstance(val, str):
        val = LaunchConfig.parse(val)
    setattr(rf, a, val)
shape = Shape(16, 64, 128, 1, torch.float32, torch.bfloat16)
spec = make_spec_inputs(shape, batch, T, "replay", torch.device("cpu"), 0, rotation=1)
kw = {**spec.kwargs(0), "exact": False}
for part in ("before", "main", "after", "beside"):
    try:
        c = compile_config(kw, LaunchConfig.parse(cfg), GPUTarget("cuda", 90, 32), replay=True, part=part)
    except Exception as e:
        print(part, "-", repr(e)[-1500:]); continue
    print(part, cfg, "regs/stack", ci._resource_usage(c.asm["cubin"]), "smem", c.metadata.shared, "sass", len(ci._sass(c.asm["cubin"])))
if os.environ.get("SASS"):
    c = compile_config(kw, LaunchConfig.parse(cfg), GPUTarget("cuda", 90, 32), replay=True, part="main")
    lines = ci._sass(c.asm["cubin"])
    open(os.environ["SASS"], "w").write("\n".join(lines))
