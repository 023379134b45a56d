"""The 4-layer Nemotron-3-Super TP8 decode step of `ssmdecode e2e` (StepBench, window 16) at
small batches, kernel by kernel: graph step time (twice) and, over 48 eager steps under
torch.profiler, each SSU and cursor kernel's launches (min, median, max).

Usage: PYTHONPATH=src python e2e_step_prof.py BATCHES VARIANTS
  BATCHES: comma-separated; VARIANTS: ';'-separated, each `table`, or `fast` (replay decode by the
  fast route) with `@R,W` (its T = 1 config, patched into config.replay_fast_config) and/or
  `+KNOB=int` (a knob of ssmdecode.models.mamba2 or replay_fast), e.g. `fast@16,1` or
  `fast+PREFETCH_RING=1`. Writes $OUT/e2e_step_prof_<BATCHES>.json.
Runs 293 and 294 ran the two forms this script merges (e2e_prof8.py: configs; e2e_prof9.py:
knobs; both in commit 37d35f0)."""

import json
import os
import statistics
import sys

import torch

import ssmdecode.config as cfgmod
import ssmdecode.models.mamba2 as m2
from ssmdecode.bench.step import StepBench, kernel_times, model_dims
from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update import replay_fast as rf
from ssmdecode.shapes import HEADLINE, PRESETS, per_rank

STEPS = 48
dims = model_dims(per_rank(PRESETS[HEADLINE[0]], HEADLINE[1]), None, torch.device("cuda"))
original = cfgmod.replay_fast_config


def parse(variant):
    """(path, T = 1 config or None, {(module, knob): value})"""
    head, *knobs = variant.split("+")
    path, _, config = head.partition("@")
    settings = {}
    for kv in knobs:
        knob, value = kv.split("=")
        module = m2 if hasattr(m2, knob) else rf
        assert hasattr(module, knob), knob
        settings[(module, knob)] = type(getattr(module, knob))(int(value))
    return ("table" if path == "table" else "replay-fast"), config or None, settings


out = {}
for batch in (int(b) for b in sys.argv[1].split(",")):
    for variant in sys.argv[2].split(";"):
        path, config, settings = parse(variant)
        saved = {key: getattr(*key) for key in settings}
        for (module, knob), value in settings.items():
            setattr(module, knob, value)
        if config:
            m, w = (int(v) for v in config.split(","))
            cfgmod.replay_fast_config = lambda h, d, b=None, t=None, m=m, w=w: LaunchConfig(m, w, True, True)
        cfgmod.clear_config_cache()
        bench = StepBench.build(dims, 4, batch, torch.device("cuda"), 0, path=path, window=16)
        step_us = [bench.time(None).us for _ in range(2)]
        kernel_times(bench, 4)  # warm-up
        times = kernel_times(bench, STEPS)
        total = sum(sum(t) for t in times.values()) / STEPS
        print(
            f"== bs {batch} {variant}: graph step {step_us[0]:.2f} {step_us[1]:.2f} us, "
            f"kernels' sum {total:.1f} us a step",
            flush=True,
        )
        ssu = {n: sorted(t) for n, t in times.items() if any(k in n for k in ("select", "replay", "advance"))}
        for name, t in sorted(ssu.items(), key=lambda kv: -sum(kv[1])):
            print(
                f"  {sum(t) / STEPS:8.2f} us x{len(t) / STEPS:4.1f} min {t[0]:.2f} "
                f"med {statistics.median(t):.2f} max {t[-1]:.2f}  {name[:70]}"
            )
        out[f"{batch} {variant}"] = dict(step_us=step_us, kernel_sum_us=total, ssu=ssu)
        for (module, knob), value in saved.items():
            setattr(module, knob, value)
        cfgmod.replay_fast_config = original
        del bench
        torch.cuda.empty_cache()
name = "e2e_step_prof_" + sys.argv[1].replace(",", "_") + ".json"
with open(os.path.join(os.environ.get("OUT", "."), name), "w") as f:
    json.dump(out, f)
