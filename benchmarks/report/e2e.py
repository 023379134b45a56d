"""Decode steps of the layer stack (`ssmdecode e2e`) and greedy decoding compared."""

from __future__ import annotations

from pathlib import Path

from .common import is_spec, load, provenance, table, table_rows_note


def overlap_note(data: dict) -> list[str]:
    """Runs from before kernel_share counted overlapping kernels once summed each kernel's
    duration: where a replay row's fast route ran a kernel beside another (its beside flush
    kernel), their SSU column counts the overlap twice. Their step times are unaffected."""
    counted_once = "count once" in data["method"].get("ssu_share", "")
    fast = any(r["config"] == "replay fast" for r in data["rows"])
    if counted_once or not fast:
        return []
    return [
        "This run summed each kernel's duration: where a replay fast row ran its flush kernel "
        "beside the main one (from 128 requests), its SSU column counts the time they overlap "
        "twice. The step times are unaffected.",
        "",
    ]


def e2e_section(folder: Path) -> str:
    parts = []
    for path in sorted(folder.glob("e2e-*/e2e.json")):
        data = load(path)
        if is_spec(data):  # verify steps: spec_e2e_section
            continue
        # The SSU share is its profiled kernel time per step over the graphed step time. (Runs
        # before the fix in e2e.kernel_times also counted the profiler's step annotations as
        # kernel time, so their own ssu_share column is not used.)
        rows = [
            [
                r["batch"],
                f"{r['config']} {r['launch']}",
                r["step_us"],
                f"{r['tokens_per_s']:,.0f}",
                f"{r['vs_first']:.3f}x",
                r["ssu_us_per_step"],
                f"{100 * r['ssu_us_per_step'] / r['step_us']:.0f}%",
            ]
            for r in data["rows"]
        ]
        shape = data["shape"]
        variants = sorted({r["variant"] for r in data["rows"] if r.get("variant")})
        what = {
            "pdl": "+pdl rows: the SSU called with pdl=True",
            "order": "+order rows: slot_order(slots) once per step, passed to every layer's "
            "SSU as batch_order (the sort is part of the step)",
            "replay": "+replay rows: every layer's SSM step by selective_state_replay, T = 1, "
            "exact (the recurrence's bits), each slot's ring cursors drawn from the steady state",
            "replay-fast": "+replay-fast rows: the same by its fast route (exact=False)",
        }
        title = f"#### e2e: {shape['name']}, {data['layers']} Mamba2 layers, d_model {data['d_model']}"
        if variants:
            title += ", " + " and ".join(f"+{v}" for v in variants)
        title += f" (`{path.parent.name}/`)"
        parts += [
            title,
            "",
            "The config column names the launch config each row ran (the table "
            "of the day of the run, which may differ from the one shipped now)."
            + "".join(f" {what[v]}." for v in variants),
            "",
            table(
                [
                    "batch",
                    "config",
                    "step us",
                    "tokens/s",
                    "vs the batch's first row",
                    "SSU us per step (profiled)",
                    "SSU share of the step",
                ],
                rows,
            ),
            "",
            table_rows_note(folder, data),
            "",
            *overlap_note(data),
            provenance(data),
            "",
        ]
    for path in sorted(folder.glob("e2e-*/e2e-greedy.json")):
        data = load(path)
        if "configs" not in data:  # e2e --spec --greedy: spec_e2e_section
            continue
        a, b = data["configs"]["a"], data["configs"]["b"]
        verdict = "identical" if data["identical"] else "DIFFERENT"
        parts += [
            f"#### Greedy decoding: {a['spec']} {a['launch']} vs {b['spec']} {b['launch']}",
            "",
            f"{data['tokens_compared']} token ids and log-probs compared: **{verdict}** "
            f"({data['result']['token_id_mismatches']} id and "
            f"{data['result']['logprob_mismatches']} log-prob mismatches; control run "
            f"{'identical' if data['control']['identical'] else 'DIFFERENT'}).",
            "",
            provenance(data),
            "",
        ]
    for path in sorted(folder.glob("e2e-*/e2e-replay-greedy.json")):
        data = load(path)
        rows = [
            [
                name,
                f"{100 * r['share_identical_to_exact_replay']:.2f}%",
                "-" if r["first_divergence"] is None else str(r["first_divergence"]),
                r["bit_identical_to_exact_replay"],
                f"{r['logits_vs_float64']['max_rel']:.2e}",
                f"{r['logits_vs_float64']['mean_rel']:.2e}",
            ]
            for name, r in data["results"].items()
        ]
        parts += [
            f"#### Greedy decoding with replay (`{path.parent.name}/`)",
            "",
            f"{data['method']['model']}; {data['method']['decoding']}. Each path's token ids "
            f"against exact replay's ({data['tokens_compared']} tokens), and its logits, "
            "teacher-forced on exact replay's tokens, against the model in float64.",
            "",
            table(
                [
                    "path",
                    "tokens identical to exact replay",
                    "first divergence [prompt, token]",
                    "bit-identical",
                    "logits: max err / max abs logit",
                    "mean err / mean abs logit",
                ],
                rows,
            ),
            "",
            provenance(data),
            "",
        ]
    return "\n".join(parts)
