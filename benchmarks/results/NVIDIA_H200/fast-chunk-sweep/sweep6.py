"""Fast-route sweep on the GPU (scratch): the chunked tile layout (replay_fast.CHUNK, word "c=N"), the ring's
x stride at run time (replay_fast._RUNTIME_STRIDES; word "spec": every stride specialized, as
before; "base": the tree before both, CHUNK 0 and specialized), register caps ("16,1/regs96"), the split flush (replay_fast.SPLIT_FLUSH, its flush
kernel's config FLUSH_CONFIG) and tiles against row sums (replay_fast._tiles forced), T = 1, 2,
4, 8, steady cursors, window 16, the shipped default and the exact route beside; accuracy at bs 64
and 512. Variant words: a config "m,w" (slot-major grid, cache hints), "split", "fc=m,w" (the
flush kernel's config), "tiles" / "vec" (the verify step's out forced)."""
import json, os, sys, time
import torch
import triton
from ssmdecode import LaunchConfig
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import selective_state_replay
import ssmdecode.ops.selective_state_update.replay_fast as rf

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
rows = []
PLAN = {
    1: ([8, 128, 512, 1024], ["base", "16,1 c=32", "16,1 c=32 spec", "16,1 c=0", "32,2 c=32", "64,4 c=32",
                              "8,1 c=32", "16,4 c=32", "16,1/regs128 c=32", "16,1/regs96 c=32"]),
    4: ([8, 64, 128, 512], ["base", "16,1 vec c=32", "16,1 vec c=32 spec", "16,1 vec c=0", "16,1 vec c=16",
                            "32,2 vec c=32", "64,4 vec c=32", "64,2 vec c=32", "16,1 vec split fc=32,4 c=32",
                            "64,4 vec split fc=32,4 c=32", "16,1/regs128 vec c=32", "64,4 tiles c=32",
                            "32,4 tiles c=32"]),
    2: ([8, 64, 512], ["base", "16,1 vec c=32", "16,1 vec c=32 spec", "64,4 vec c=32", "32,2 vec c=32",
                       "32,4 tiles c=32"]),
    8: ([8, 64, 512], ["base", "64,4 tiles c=32", "64,4 tiles c=32 spec", "16,1 vec c=32", "64,4 vec c=32",
                       "32,4 tiles c=32", "32,2 vec c=32"]),
}
tokens_list = [int(t) for t in sys.argv[1].split(",")]
budget = float(sys.argv[2]) if len(sys.argv) > 2 else 1e9
orig_tiles = rf._tiles
CHUNK0 = rf.CHUNK
KERNEL0 = rf._selective_state_replay_fast_kernel
SPEC_KERNEL = triton.heuristics(rf._HEURISTICS)(triton.jit(KERNEL0.fn.fn))
t_start = time.time()
for T in tokens_list:
    batches, variants = PLAN[T]
    for batch in batches:
        case = br.make_case(shape, T, batch, 16, "steady", dev, 0)
        for name in ["exact", "default"] + variants:
            if time.time() - t_start > budget:
                break
            words = name.split()
            exact = name == "exact"
            config = None
            if words[0] not in ("exact", "default", "base"):
                base, _, regs = words[0].partition("/")  # "16,1/regs96": a register cap
                config = LaunchConfig.parse(base + ",slot,evict" + ("," + regs if regs else ""))
            rf.SPLIT_FLUSH = "split" in words
            fc = [w[3:] for w in words if w.startswith("fc=")]
            rf.FLUSH_CONFIG = LaunchConfig.parse(fc[0] + ",slot,evict") if fc else None
            ch = [w[2:] for w in words if w.startswith("c=")]
            rf.CHUNK = int(ch[0]) if ch else (0 if "base" in words else CHUNK0)
            if "spec" in words or "base" in words:  # every stride specialized, as before _RUNTIME_STRIDES
                rf._selective_state_replay_fast_kernel = SPEC_KERNEL
            if "tiles" in words or "vec" in words:
                force = "tiles" in words
                rf._tiles = lambda call, force=force: force and call.tokens > 1 and call.config.block_m >= 16
            rings = br.ssmdecode_rings(case)
            out = torch.empty(case.x.shape, dtype=shape.dtype, device=dev)
            writes = {"state": case.state, **{k: rings[k] for k in ("x_cache", "B_cache", "dt_cache")}, "out": out}
            def call(i, t, config=config, rings=rings, exact=exact):
                selective_state_replay(t["state"], t["x_cache"], t["B_cache"], t["dt_cache"],
                    rings["ring_start"], rings["num_cached"], case.x, case.dt, case.A, case.B, case.C,
                    D=case.D, dt_bias=case.dt_bias, dt_softplus=True,
                    state_batch_indices=case.slot_sets[i % case.rotation], out=t["out"], exact=exact, config=config)
            route = br.Route(name, "ssmdecode", call=call, writes=writes, out=lambda t: t["out"])
            try:
                us = br.time_route(case, route, dev).us
                acc = br.accuracy_of(case, route) if batch in (64, 512) and not exact else {}
                r = dict(T=T, batch=batch, variant=name, us=us, floored=acc.get("out_max_floored"),
                         out_mean=acc.get("out_mean_ulps"), bf16_mean=acc.get("bf16_of_float64_mean_ulps"),
                         state_rel=acc.get("state_max_rel"))
            except Exception as e:
                r = dict(T=T, batch=batch, variant=name, error=repr(e)[:400])
            rf.SPLIT_FLUSH = False; rf.FLUSH_CONFIG = None; rf._tiles = orig_tiles; rf.CHUNK = CHUNK0; rf._selective_state_replay_fast_kernel = KERNEL0
            print(T, batch, name, round(r.get("us", -1), 2), r.get("floored") and round(r["floored"], 3),
                  r.get("state_rel") and f'{r["state_rel"]:.1e}', r.get("error", ""), f"{time.time()-t_start:.0f}s", flush=True)
            rows.append(r)
            json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "sweep6.json"), "w"), indent=1)
