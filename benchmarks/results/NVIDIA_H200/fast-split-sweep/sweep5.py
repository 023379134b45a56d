"""Fast-route sweep on the GPU (scratch): the split flush (replay_fast.SPLIT_FLUSH, its flush
kernel's config FLUSH_CONFIG) and tiles against row sums (replay_fast._tiles forced), T = 1, 2,
4, 8, steady cursors, window 16, the shipped default and the exact route beside; accuracy at bs 64
and 512. Variant words: a config "m,w" (slot-major grid, cache hints), "split", "fc=m,w" (the
flush kernel's config), "tiles" / "vec" (the verify step's out forced)."""
import json, os, sys, time
import torch
from ssmdecode import LaunchConfig
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
from ssmdecode.ops.selective_state_update import selective_state_replay
import ssmdecode.ops.selective_state_update.replay_fast as rf

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda")
rows = []
PLAN = {
    1: ([8, 64, 128, 512, 1024], ["16,1 split", "16,1 split fc=32,4", "16,1 split fc=16,2",
                                   "32,1 split", "32,2 split", "8,1 split"]),
    4: ([8, 64, 128, 512], ["16,1 vec split", "16,1 vec split fc=32,4", "32,2 vec split",
                             "64,4 tiles split", "32,4 tiles split", "64,4 tiles", "16,1 tiles split"]),
    2: ([8, 64, 512], ["16,1 vec split", "32,2 vec split", "64,4 tiles split"]),
    8: ([8, 64, 512], ["64,4 tiles split", "32,4 tiles split", "16,1 vec split", "64,8 tiles split"]),
}
tokens_list = [int(t) for t in sys.argv[1].split(",")]
budget = float(sys.argv[2]) if len(sys.argv) > 2 else 1e9
orig_tiles = rf._tiles
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
            if words[0] not in ("exact", "default"):
                config = LaunchConfig.parse(words[0] + ",slot,evict")
            rf.SPLIT_FLUSH = "split" in words
            fc = [w[3:] for w in words if w.startswith("fc=")]
            rf.FLUSH_CONFIG = LaunchConfig.parse(fc[0] + ",slot,evict") if fc else None
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
            rf.SPLIT_FLUSH = False; rf.FLUSH_CONFIG = None; rf._tiles = orig_tiles
            print(T, batch, name, round(r.get("us", -1), 2), r.get("floored") and round(r["floored"], 3),
                  r.get("state_rel") and f'{r["state_rel"]:.1e}', r.get("error", ""), f"{time.time()-t_start:.0f}s", flush=True)
            rows.append(r)
            json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "sweep5.json"), "w"), indent=1)
