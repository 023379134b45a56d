"""Speculative decoding: verify calls (`bench --tokens --mode`) and verify steps of the layer
stack (`e2e --spec`, with its greedy comparison)."""

from __future__ import annotations

from pathlib import Path

from ssmdecode.tools.e2e import greedy_verdict

from .common import is_spec, load, provenance, run_note, table, table_rows_note

SPEC_MODES = {
    "buffer": "sglang's way: every draft's state into the intermediate-state buffer, with "
    "disable_state_update; ceiling: the 1 → T stream over the call's slots and buffer rows",
    "dst": "vLLM's way: every draft's state to its own slot, the initial state read at the slot "
    "of the last accepted token (num_accepted_tokens, cu_seqlens); ceiling: the 1 → T stream "
    "over the call's slots",
    "replay": "selective_state_replay in steady state (accepted counts uniform in 1..T, "
    "replay_advance a step); ceiling: replay's floor, the read-only stream plus the flushing "
    "fraction of the read-write stream's write part plus the rings' bytes",
}


def spec_bench_section(folder: Path, data: dict, name: str) -> str:
    """Verify calls (bench --tokens --mode) of the results folder `name`: per mode, T and
    batch, the call's ceiling, the upstream config, the fastest upstream-grid config and the
    table's, all of one run."""
    shape = data["shape"]
    window = data["method"].get("window")
    parts = []
    for mode in [m for m in SPEC_MODES if any(r["mode"] == m for r in data["rows"])]:
        cells: dict[tuple[int, int], dict[str, dict]] = {}
        for r in data["rows"]:
            if r["mode"] == mode:
                cells.setdefault((r["tokens"], r["batch"]), {})[r["config"]] = r
        rows = []
        for (tokens, batch), by_config in sorted(cells.items()):
            up, tab = by_config["upstream"], by_config["table"]
            best = min((r for r in by_config.values() if r["upstream_grid"]), key=lambda r: r["us"])
            flush = tab.get("flush_fraction")
            rows.append(
                [
                    tokens,
                    batch,
                    tab["ceiling_us"],
                    up["us"],
                    f"{best['launch']} {best['us']:.2f}",
                    f"{tab['launch']} {tab['us']:.2f}",
                    f"{100 * tab['fraction_of_ceiling']:.1f}%",
                    f"{up['us'] / tab['us']:.2f}x",
                    f"{best['us'] / tab['us']:.2f}x",
                    "-" if flush is None else f"{100 * flush:.0f}%",
                    "-" if tab.get("advance_us") is None else f"{tab['advance_us']:.2f}",
                ]
            )
        what = SPEC_MODES[mode] + (f"; window {window}" if mode == "replay" and window else "")
        parts += [
            f"#### Verify calls, mode {mode}: H{shape['nheads']} P{shape['headdim']} "
            f"N{shape['dstate']} G{shape['ngroups']}, {shape['state_dtype']} state, "
            f"{shape['dtype']} inputs ({name}/)",
            "",
            f"T draft tokens a request; {what}.",
            "",
            table(
                [
                    "T",
                    "batch",
                    "ceiling us",
                    "upstream (4,4) us",
                    "best upstream-grid config, us",
                    "table config, us",
                    "table % of ceiling",
                    "vs upstream",
                    "vs best upstream-grid",
                    "flushing",
                    "of which bookkeeping, us",
                ],
                rows,
            ),
            "",
        ]
    parts += [table_rows_note(folder, data), "", provenance(data)]
    return "\n".join(parts)


def spec_e2e_section(folder: Path) -> str:
    """Verify steps of the layer stack (e2e --spec): each way's step time, tokens/s and the SSM
    kernels' share, against way (a) of the same run."""
    parts = []
    for path in sorted(folder.glob("e2e-*/e2e.json")):
        data = load(path)
        if not is_spec(data):
            continue
        tokens = data["rows"][0]["tokens"]
        rows = [
            [
                r["batch"],
                r["way"],
                r["launch"],
                r["step_us"],
                f"{r['mean_accepted']:.2f}",
                f"{r['tokens_per_s']:,.0f}",
                f"{r['vs_a']:.2f}x",
                r["ssm_us_per_step"],
                f"{100 * r['ssm_us_per_step'] / r['step_us']:.0f}%",
            ]
            for r in data["rows"]
        ]
        shape = data["shape"]
        window = data["method"].get("window")
        parts += [
            f"#### Verify steps, T = {tokens}: {shape['name']}, {data['layers']} Mamba2 layers, "
            f"d_model {data['d_model']}"
            + (f", replay window {window}" if window else "")
            + f" (`{path.parent.name}/`)",
            "",
            f"One verify step of {tokens} tokens a request and its acceptance, timed as a CUDA "
            f"graph; accepted counts uniform in 1..{tokens}; tokens/s = batch x mean accepted / "
            "step time. (a) the intermediate-state path at upstream's (4,4): every draft's state "
            "into a buffer, then the engine's copy of the accepted state into the pool; (b) the "
            "same at the table's configs; (c) replay at the table's configs; (d), where the run has "
            "it, replay by its fast route (float32-accurate, not the bits). Each way draws its "
            "own accepted counts, so tokens/s vs (a) carries that draw too (the summary compares "
            "step times).",
            "",
            table(
                [
                    "batch",
                    "way",
                    "config",
                    "step us",
                    "mean accepted",
                    "tokens/s",
                    "tokens/s vs (a)",
                    "SSM kernels us per step (profiled)",
                    "SSM share of the step",
                ],
                rows,
            ),
            "",
            table_rows_note(folder, data),
            "",
            run_note(path, data),
            "",
            provenance(data),
            "",
        ]
    for path in sorted(folder.glob("e2e-*/e2e-greedy.json")):
        data = load(path)
        if "results" not in data:  # plain greedy decoding: e2e_section
            continue
        rows = [
            [
                way,
                r["launch"],
                greedy_verdict(r),
                "-" if "share_ids_identical" not in r else f"{100 * r['share_ids_identical']:.2f}%",
                r["token_id_mismatches"],
                r["logprob_mismatches"],
                r["steps"],
                f"{r['mean_accepted']:.2f}",
            ]
            for way, r in data["results"].items()
        ]
        parts += [
            f"#### Greedy speculative decoding: {data['prompts']} prompts x {data['new_tokens']} tokens "
            f"(`{path.parent.name}/`)",
            "",
            f"{data['method']['decoding']}; {data['method']['compared']}.",
            "",
            table(
                [
                    "way",
                    "config",
                    "verdict",
                    "ids identical to (a)",
                    "id mismatches",
                    "log-prob mismatches",
                    "steps",
                    "mean accepted",
                ],
                rows,
            ),
            "",
            provenance(data),
            "",
        ]
    return "\n".join(parts)
