"""A fast-route replay call at T tokens and bs B compiled offline (sm_90, headline): registers,
SASS count, and each load with the first instruction that uses what it loaded (a stall there).
Usage: [REUSE=1] [PHYS=1] [GROUPED=1] python sass_loads.py T B [CONFIG]; REUSE sets
replay_fast.DRAFTS_FLUSH_B_REUSE, PHYS replay_fast.RING_PHYS (T = 1), GROUPED
replay_fast.TILES_GROUPED (session 35)."""
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
rf.DRAFTS_FLUSH_B_REUSE = bool(int(os.environ.get("REUSE", "0")))
rf.RING_PHYS = bool(int(os.environ.get("PHYS", "0")))
rf.TILES_GROUPED = bool(int(os.environ.get("GROUPED", "0")))
T, batch = int(sys.argv[1]), int(sys.argv[2])
cfg = LaunchConfig.parse(sys.argv[3]) if len(sys.argv) > 3 else replay_fast_config(64, 128, batch, T)
shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
spec = make_spec_inputs(shape, batch, T, "replay", torch.device("cpu"), 0, rotation=1, window=16)
kw = {**spec.kwargs(0), "exact": False}
k = compile_config(kw, cfg, GPUTarget("cuda", 90, 32), replay=True)
tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
    f.write(k.asm["cubin"]); f.flush()
    sass = subprocess.run([str(tool), "-sass", f.name], capture_output=True, text=True).stdout
    res = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True, text=True).stdout
lines = [l.split("*/", 1)[1].split(";")[0].strip() for l in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", l)]
Path(f"/tmp/sass_T{T}_b{batch}.txt").write_text("\n".join(lines))
print(cfg.label, re.search(r"REG:[0-9]+", res).group(0), len(lines), "SASS")
pending = {}
for i, ins in enumerate(lines, 1):
    m = re.match(r"(@!?U?P\w+\s+)?(\S+)\s*(.*)", ins)
    op, args = m.group(2), m.group(3)
    ops = [a.strip() for a in args.split(",")]
    srcs = ops if op.startswith(("ST", "BAR", "LDG", "ISETP", "FSETP", "R2UR")) else ops[1:]
    if op.startswith("LDG"):
        srcs = ops[1:]
    used = {int(r) for s in srcs for r in re.findall(r"(?<![U\w])R(\d+)", s)}
    for r in sorted(used & set(pending)):
        print(f"{i:5d} first use of R{r} (LDG at {pending[r][0]}: {pending[r][1][:50]}) by {ins[:50]}")
        pending.pop(r)
    if op.startswith("LDG"):
        base = int(re.match(r"R(\d+)", ops[0]).group(1))
        n = {"128": 4, "64": 2}.get(op.split(".")[-1], 1)
        for q in range(n):
            pending[base + q] = (i, ins)
    elif ops and re.match(r"R\d+$", ops[0]) and not op.startswith(("ST", "ISETP", "FSETP")):
        pending.pop(int(ops[0][1:]), None)
    if i > 1200:
        break
