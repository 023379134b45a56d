"""sweep36.py's bench timing (argv as sweep36's), then every compiled fast-route kernel's registers and spills, by its
ROLE and TAKE."""
import runpy, sys
sys.argv = ["sweep36.py", *sys.argv[1:]]
runpy.run_path("sweep36.py", run_name="__main__")
from ssmdecode.ops.selective_state_update import replay_fast as rf
fn = rf._selective_state_replay_fast_kernel
while not hasattr(fn, "device_caches"):
    fn = fn.fn
for dev, caches in fn.device_caches.items():
    for key, ck in caches[0].items():
        ck._init_handles()
        k = str(key)
        tags = [t for t in ("ROLE", "TAKE") if t in k]
        print("kernel regs", ck.n_regs, "spills", ck.n_spills, "warps", ck.metadata.num_warps, "cubin", len(ck.asm["cubin"]),
              {t: k[k.find(t):k.find(t) + 12] for t in tags})
