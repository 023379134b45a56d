"""Decode steps of the layer stack (`ssmdecode e2e`) and greedy decoding compared."""

from __future__ import annotations

from pathlib import Path

from .common import is_spec, load, provenance, table, table_rows_note


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
    return "\n".join(parts)
