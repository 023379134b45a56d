"""Fast-route decode sweep on the GPU (scratch, not committed): persistent kernel configs
against the tile kernel, same cases, with accuracy."""
import json, os, sys, time
import torch
from ssmdecode import LaunchConfig
from ssmdecode.bench import replay as br
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank
import ssmdecode.ops.selective_state_update.replay_fast as rf

shape = per_rank(PRESETS[HEADLINE[0]], HEADLINE[1])
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
out_rows = []
variants = [
    ("tile (64,8,regs128)", False, "64,8,slot,evict,regs128", 16),
    ("persist (64,8,regs128) 16w", True, "64,8,slot,evict,regs128", 16),
    ("persist (64,8,regs128) 32w", True, "64,8,slot,evict,regs128", 32),
    ("persist (32,4,regs128) 16w", True, "32,4,slot,evict,regs128", 16),
    ("persist (64,4) 8w", True, "64,4,slot,evict", 8),
    ("persist (64,4) 16w", True, "64,4,slot,evict", 16),
]
for batch in [int(b) for b in sys.argv[1].split(",")]:
    case = br.make_case(shape, 1, batch, 16, "steady", dev, 0)
    for name, persist, cfg, wps in variants:
        rf.PERSISTENT_DECODE, rf.DECODE_WARPS_PER_SM = persist, wps
        config = LaunchConfig.parse(cfg)
        rings = br.ssmdecode_rings(case)
        out = torch.empty(case.batch, 1, shape.nheads, shape.headdim, dtype=shape.dtype, device=dev)
        writes = {"state": case.state, **{k: rings[k] for k in ("x_cache", "B_cache", "dt_cache")}, "out": out}
        def call(i, t, config=config, rings=rings):
            from ssmdecode.ops.selective_state_update import selective_state_replay
            selective_state_replay(t["state"], t["x_cache"], t["B_cache"], t["dt_cache"],
                rings["ring_start"], rings["num_cached"], case.x, case.dt, case.A, case.B, case.C,
                D=case.D, dt_bias=case.dt_bias, dt_softplus=True,
                state_batch_indices=case.slot_sets[i % case.rotation], out=t["out"], exact=False, config=config)
        route = br.Route(name, "ssmdecode", call=call, writes=writes, out=lambda t: t["out"])
        try:
            t = br.time_route(case, route, dev)
            us = t.us
            acc = br.accuracy_of(case, route) if batch <= 64 or (batch == 512 and 'tile' in name or '16w' in name and batch == 512) else {}
            r = dict(batch=batch, variant=name, us=us, out_max_ulps=acc.get("out_max_ulps"),
                     out_mean_ulps=acc.get("out_mean_ulps"), bf16_mean=acc.get("bf16_of_float64_mean_ulps"),
                     state_rel=acc.get("state_max_rel"), untouched=acc.get("unflushed_untouched"))
        except Exception as e:
            r = dict(batch=batch, variant=name, error=repr(e)[:300])
        print(json.dumps(r), flush=True)
        out_rows.append(r)
json.dump(out_rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "sweep.json"), "w"), indent=1)
