"""A fast-route replay call at T tokens and bs B compiled offline (sm_90, headline): each global
load with its source line (nvdisasm -g), each first use of what it loaded ("WAIT": a warp
stalls there until the load is back) and each barrier, up to instruction UPTO (1300).
Usage: [STATE_FIRST=1] [RING_GROUPED=1] [TILES_GROUPED=1] [RING_PHYS=1] [DRAFTS_FLUSH_B_REUSE=1]
python sass_src.py T B [CONFIG]; each sets that replay_fast knob (session 35)."""
import os, sys, re, subprocess, tempfile
os.environ.pop("TRITON_INTERPRET", None)
from pathlib import Path
import torch, triton
from triton.backends.compiler import GPUTarget
from ssmdecode.bench.compile import compile_config
from ssmdecode.bench.spec import make_spec_inputs
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.config import LaunchConfig, replay_fast_config
from ssmdecode.ops.selective_state_update import replay_fast as rf
for k in ("STATE_FIRST", "TILES_GROUPED", "RING_PHYS", "DRAFTS_FLUSH_B_REUSE", "RING_GROUPED"):
    if k in os.environ:
        setattr(rf, k, bool(int(os.environ[k])))
T, batch = int(sys.argv[1]), int(sys.argv[2])
cfg = LaunchConfig.parse(sys.argv[3]) if len(sys.argv) > 3 else replay_fast_config(64, 128, batch, T)
shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
spec = make_spec_inputs(shape, batch, T, "replay", torch.device("cpu"), 0, rotation=1, window=16)
k = compile_config({**spec.kwargs(0), "exact": False}, cfg, GPUTarget("cuda", 90, 32), replay=True)
tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
    f.write(k.asm["cubin"]); f.flush()
    out = subprocess.run([str(tool), "-g", "-c", f.name], capture_output=True, text=True).stdout
src, ins = "", []
for l in out.splitlines():
    m = re.search(r'//## File "([^"]+)", line (\d+)', l)
    if m:
        src = f"{Path(m.group(1)).name}:{m.group(2)}"; continue
    m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(.*?);", l)
    if m:
        ins.append((m.group(1).strip(), src))
print(cfg.label, len(ins), "SASS")
pending = {}
for i, (x, s) in enumerate(ins, 1):
    m = re.match(r"(@!?U?P\w+\s+)?(\S+)\s*(.*)", x)
    op, args = m.group(2), m.group(3)
    ops = [a.strip() for a in args.split(",")]
    srcs = ops if op.startswith(("ST", "BAR", "LDG", "ISETP", "FSETP", "R2UR")) else ops[1:]
    if op.startswith("LDG"):
        srcs = ops[1:]
    used = {int(r) for q in srcs for r in re.findall(r"(?<![U\w])R(\d+)", q)}
    hit = sorted(used & set(pending))
    if hit:
        firsts = {pending[r][0] for r in hit}
        print(f"{i:5d} WAIT on LDG {sorted(firsts)} ({', '.join(sorted({pending[r][1] for r in hit}))}) by {x[:40]}  [{s}]")
        for r in hit:
            pending.pop(r)
    if op.startswith("BAR"):
        print(f"{i:5d} {x[:40]}  [{s}]")
    if op.startswith("LDG"):
        base = int(re.match(r"R(\d+)", ops[0]).group(1))
        n = {"128": 4, "64": 2}.get(op.split(".")[-1], 1)
        for q in range(n):
            pending[base + q] = (i, s)
        print(f"{i:5d}   LDG {x[:44]}  [{s}]")
    elif ops and re.match(r"R\d+$", ops[0]) and not op.startswith(("ST", "ISETP", "FSETP")):
        pending.pop(int(ops[0][1:]), None)
    if i > int(os.environ.get("UPTO", "1300")):
        break
