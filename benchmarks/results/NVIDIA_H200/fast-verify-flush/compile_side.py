import os, sys
os.environ.pop("TRITON_INTERPRET", None)
import torch
from triton.backends.compiler import GPUTarget
from ssmdecode.bench.compile import compile_config
from ssmdecode.bench.spec import make_spec_inputs
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import replay_fast as rf
from ssmdecode.config import LaunchConfig
import re, subprocess, tempfile, triton
from pathlib import Path
def regs(cubin):
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin); f.flush()
        t = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True, text=True).stdout
    return re.search(r"REG:(\d+)", t).group(1), re.search(r"STACK:(\d+)", t).group(1)
T = int(sys.argv[1]); batch = int(sys.argv[2])
shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
spec = make_spec_inputs(shape, batch, T, "replay", torch.device("cpu"), 0, rotation=1)
kw = {**spec.kwargs(0), "exact": False}
rf.SIDE_VERIFY = True; rf.SIDE_VERIFY_MIN_REQUESTS = 1
for sc in (None, "16,2,slot,evict"):
    rf.SIDE_CONFIG = LaunchConfig.parse(sc) if sc else None
    for part in ("main", "beside", "after"):
        k = compile_config(kw, LaunchConfig.parse("16,1,slot,evict"), GPUTarget("cuda", 90, 32), replay=True, part=part)
        print(T, sc, part, "regs/stack", regs(k.asm["cubin"]), "sass-ish lines", k.asm["ptx"].count("\n"))
rf.SIDE_VERIFY = False
k = compile_config(kw, LaunchConfig.parse("16,1,slot,evict"), GPUTarget("cuda", 90, 32), replay=True, part="main")
print(T, "split main regs/stack", regs(k.asm["cubin"]), k.asm["ptx"].count("\n"))
