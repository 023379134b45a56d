"""Fast-route sweep on the GPU (scratch): configs x dual flush x gram PDL, T = 1, 2, 4, 8, steady
cursors, window 16, with the exact route beside and accuracy at two batches."""
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
    1: ([8, 64, 128, 512, 1024], ["16,1", "8,1", "4,1", "16,2", "16,4", "16,1 nopdl", "16,2 nodual", "32,4"]),
    4: ([8, 64, 128, 512], ["16,1", "16,2", "16,4", "32,4", "64,4", "64,8", "16,1 vec", "16,1 nodual", "16,1 nopdl"]),
    2: ([8, 64, 512], ["16,1", "16,2", "32,4", "64,4", "16,1 vec", "8,1 vec"]),
    8: ([8, 64, 512], ["16,1", "16,2", "32,4", "64,4", "16,1 vec", "8,1 vec"]),
}
tokens_list = [int(t) for t in sys.argv[1].split(",")]
t_start = time.time()
for T in tokens_list:
    batches, variants = PLAN[T]
    for batch in batches:
        case = br.make_case(shape, T, batch, 16, "steady", dev, 0)
        for name in ["exact"] + variants:
            cfg, *opts = name.split()
            rf.DUAL_FLUSH = "nodual" not in opts
            rf.GRAM_PDL = "nopdl" not in opts
            rf.VERIFY_TILES = "vec" not in opts
            exact = name == "exact"
            config = None if exact else LaunchConfig.parse(cfg + ",slot,evict")
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
            rf.DUAL_FLUSH = True; rf.GRAM_PDL = True; rf.VERIFY_TILES = True
            print(T, batch, name, round(r.get("us", -1), 2), r.get("floored") and round(r["floored"], 3),
                  r.get("state_rel") and f'{r["state_rel"]:.1e}', r.get("error", ""), f"{time.time()-t_start:.0f}s", flush=True)
            rows.append(r)
            json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "sweep4.json"), "w"), indent=1)
