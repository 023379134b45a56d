"""The decode step at bs 8 compiled offline (sm_90) with and without RING_PHYS: registers, SASS
count, and where the ring's loads sit against the cursors' loads."""
import os, sys
os.environ.pop("TRITON_INTERPRET", None)
import re, subprocess, tempfile
from pathlib import Path
import torch, triton
from triton.backends.compiler import GPUTarget
from ssmdecode.bench.compile import compile_config
from ssmdecode.bench.spec import make_spec_inputs
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import replay_fast as rf
from ssmdecode.config import LaunchConfig, replay_fast_config
batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8
shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
spec = make_spec_inputs(shape, batch, 1, "replay", torch.device("cpu"), 0, rotation=1, window=16)
kw = {**spec.kwargs(0), "exact": False}
tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
for phys in (False, True):
    rf.RING_PHYS = phys
    cfg = replay_fast_config(64, 128, batch, 1)
    k = compile_config(kw, cfg, GPUTarget("cuda", 90, 32), replay=True)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"]); f.flush()
        sass = subprocess.run([str(tool), "-sass", f.name], capture_output=True, text=True).stdout
        res = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True, text=True).stdout
    lines = [l.split("*/", 1)[1].strip() for l in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", l)]
    Path(f"/tmp/sass_T1_b{batch}_phys{int(phys)}.txt").write_text("\n".join(lines))
    ldg = [i for i, l in enumerate(lines) if "LDG" in l]
    reg = re.search(r"REG:[0-9]+", res).group(0)
    print(f"RING_PHYS={phys} config {cfg.label}: {reg}, {len(lines)} SASS, LDG at {ldg[:40]}")
