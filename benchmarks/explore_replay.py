"""Exploration of the replay kernel's load schedule, for docs/performance.md: each config with
the drafts' loads in their loop or hoisted before the replay (`h0`/`h1`), and the cached
tokens one branch each or REPLAY_CHUNK to a branch (`c1`, `c4`, `c8`), at the headline shape.
Every variant's out, state and rings are first compared bit for bit with the shipped schedule's
(h0c1) on the same call; then each is timed in interleaved rounds by the bench's cold-L2
CUDA-graph timer, the kernel alone and with the step's replay_advance, beside the same run's
read-only and read + write streams and the bookkeeping kernel alone.

    python benchmarks/explore_replay.py --tokens 2 4 8 --batch 8 64 512 \
        --config 4,1,slot,evict,ordered 8,1,slot,evict,ordered --variant h0c1 h1c1 h1c8 --out DIR

Not a results tool: it asks one question of the kernel and writes down the answer.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch

from ssmdecode.bench.report import environment, environment_markdown
from ssmdecode.bench.spec import flush_fraction, make_spec_inputs, measure_spec_ceiling
from ssmdecode.bench.timer import interleaved, round_spread, time_cold
from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update import replay
from ssmdecode.shapes import PRESETS, per_rank

_VARIANT = re.compile(r"h([01])c(\d+)$")


def _parse_variant(text: str) -> tuple[bool, int]:
    m = _VARIANT.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"a variant is h<0|1>c<chunk>, e.g. h1c8; got {text!r}")
    return bool(int(m.group(1))), int(m.group(2))


def _written(spec, config: LaunchConfig, hoist: bool, chunk: int) -> dict[str, torch.Tensor]:
    """What call 0 writes from fresh copies: out (NaN-poisoned first), state and rings."""
    kw = spec.kwargs(0)
    copies = {"state": spec.base.state.clone()}
    for name in ("x_cache", "B_cache", "dt_cache"):
        copies[name] = spec.rings[name].clone()
    out = torch.full_like(kw["out"], float("nan"))
    kw.update(copies, out=out)
    replay.selective_state_replay(**kw, config=config, _hoist_drafts=hoist, _replay_chunk=chunk)
    return {"out": out, **copies}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    """The names whose bits differ."""
    return [k for k in a if not torch.equal(a[k].view(torch.uint8), b[k].view(torch.uint8))]


def _time_point(shape, tokens, batch, configs, variants, rounds, seed, device):
    """Rows of every (config, variant) at one (T, bs), and the variants whose bits differ."""
    spec = make_spec_inputs(shape, batch, tokens, "replay", device, seed)
    streams = measure_spec_ceiling(spec, device)
    flush = flush_fraction(spec)

    def advance_call(i: int) -> None:
        replay.replay_advance(
            spec.rings["ring_start"],
            spec.rings["num_cached"],
            spec.accepted[i % spec.rotation],
            spec.tokens,
            spec.ring,
            spec.src[i % spec.rotation],
        )

    advance = time_cold(advance_call, device, rotation=spec.rotation)
    spec = make_spec_inputs(shape, batch, tokens, "replay", device, seed)  # the bookkeeping moved
    items = [(c, v) for c in configs for v in variants]
    reference = {c: _written(spec, c, False, 1) for c in configs}
    failures = []
    for c, (hoist, chunk) in items:
        diff = _same(reference[c], _written(spec, c, hoist, chunk))
        if diff:
            failures.append(f"T={tokens} bs={batch} {c.label} h{int(hoist)}c{chunk}: {diff}")

    def kernel_only(item) -> float:
        c, (hoist, chunk) = item
        return time_cold(
            lambda i: replay.selective_state_replay(
                **spec.kwargs(i), config=c, _hoist_drafts=hoist, _replay_chunk=chunk
            ),
            device,
            rotation=spec.rotation,
        ).us

    timed = interleaved(items, kernel_only, rounds)
    print(f"T={tokens} bs={batch}: {round_spread(timed.values())}", flush=True)
    rows = []
    for (c, (hoist, chunk)), us in timed.items():
        rows.append(
            dict(
                tokens=tokens,
                batch=batch,
                config=c.label,
                variant=f"h{int(hoist)}c{chunk}",
                us=min(us),
                rounds_us=us,
                advance_us=advance.us,
                read_us=streams["read"].us,
                read_write_us=streams["read_write"].us,
                flush=flush,
            )
        )
        print(
            f"  {c.label:28s} h{int(hoist)}c{chunk}: {min(us):8.2f} us (read {streams['read'].us:.2f}, "
            f"r+w {streams['read_write'].us:.2f}, advance {advance.us:.2f}, flush {flush:.2f})",
            flush=True,
        )
    return rows, failures


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--batch", type=int, nargs="+", default=[8, 64, 512])
    p.add_argument("--config", nargs="+", default=["4,1,slot,evict,ordered", "8,1,slot,evict,ordered"])
    p.add_argument("--variant", type=_parse_variant, nargs="+", default=[(False, 1), (True, 1), (True, 8)])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape = per_rank(PRESETS["nemotron3-super"], 8)
    configs = [LaunchConfig.parse(c) for c in args.config]
    rows, failures = [], []
    for tokens in args.tokens:
        for batch in args.batch:
            r, f = _time_point(shape, tokens, batch, configs, args.variant, args.rounds, args.seed, device)
            rows += r
            failures += f
    args.out.mkdir(parents=True, exist_ok=True)
    env = environment(device)
    (args.out / "explore-replay.json").write_text(
        json.dumps({"environment": env, "rows": rows, "bit_failures": failures}, indent=1)
    )
    lines = ["# explore-replay", "", environment_markdown(env), ""]
    lines += [
        f"Bits against h0c1 of the same config: {failures or 'all identical'}",
        "",
        "| T | bs | config | variant | kernel us | + advance us | read us | read+write us | flush |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['tokens']} | {r['batch']} | {r['config']} | {r['variant']} | {r['us']:.2f} | "
            f"{r['us'] + r['advance_us']:.2f} | {r['read_us']:.2f} | {r['read_write_us']:.2f} | "
            f"{r['flush']:.2f} |"
        )
    (args.out / "explore-replay.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-len(rows) - 2 :]))
    if failures:
        print("BIT FAILURES:", *failures, sep="\n")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
