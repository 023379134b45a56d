"""What every section uses: loading a run's JSON, its provenance line, a Markdown table, and
whether a run's "table" rows ran the configs the shipped table picks today."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ssmdecode.config import LaunchConfig, TableError, load_table, nearest_bucket, table_key

# the repository root: links in the report and the README are made relative to files under it
ROOT = Path(__file__).resolve().parents[2]


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def provenance(data: dict) -> str:
    env = data["environment"]
    return (
        f"<sub>{env['device']}, torch {env['torch']}, Triton {env['triton']}, commit "
        f"{env['git_commit'][:7]}, {env['date_utc'][:16].replace('T', ' ')} UTC: "
        f"`{env['command'].split(' --out ')[0]}`</sub>"
    )


def table(headers: list[str], rows: list[list[object]]) -> str:
    def cell(v: object) -> str:
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def is_upstream_grid(row: dict) -> bool:
    """A config the upstream kernel can launch: its grid order, no cache hints."""
    return LaunchConfig.from_dict(row["launch_config"]).upstream_grid


def is_spec(data: dict) -> bool:
    """A run of speculative decoding's verify calls (bench --tokens) or steps (e2e --spec)."""
    return any("tokens" in r for r in data["rows"])


def row_mode(row: dict) -> tuple[str, int]:
    """The table key's mode and token count a row's call looked up: bench rows name a mode,
    e2e --spec rows a path (buffer or replay); single-token rows neither."""
    mode = row.get("mode") or row.get("path") or "single"
    return mode, row["tokens"] if mode != "single" else 0


def shipped_config(folder: Path, shape: dict, batch: int, mode: str, tokens: int) -> str | None:
    """The label of the config the shipped table of the folder's device picks today for a
    call, None where the table holds no entry for it."""
    try:
        table = load_table(folder.name)
    except TableError:
        return None
    key = table_key(shape["headdim"], shape["dstate"], shape["state_dtype"], mode, tokens)
    buckets = (table or {}).get(key)
    return buckets[nearest_bucket(list(buckets), batch)].label if buckets else None


def table_rows_note(folder: Path, data: dict) -> str:
    """Whether a run's "table" rows ran the configs the shipped table picks today: a run made
    before entries were re-tuned measured other configs under the same name."""
    ran = sorted(
        {(r["batch"], *row_mode(r), r["launch"]) for r in data["rows"] if r.get("config") == "table"}
    )
    differ = []
    for batch, mode, tokens, launch in ran:
        now = shipped_config(folder, data["shape"], batch, mode, tokens)
        if now is not None and now != launch:
            where = f"batch {batch}" + ("" if mode == "single" else f", {mode} T = {tokens}")
            differ.append(f"{where}: {launch} then, {now} now")
    if not ran:
        return ""
    if not differ:
        return "Its table rows ran the configs the shipped table picks today."
    return (
        "Its table rows ran the table of the day of the run, not the shipped one, at "
        + "; ".join(differ)
        + "."
    )


# Known limits of one run, shown beside its figures while the folder holds that run (keyed by
# folder and commit); a later run of the same folder drops the note.
RUN_NOTES = {
    ("e2e-spec", "7646a04"): (
        "In this run the intermediate-state path's copy of the accepted state took two more "
        "passes over the states than it needs (a torch.where over the gathered states); "
        "5a9b5a8 makes it one gather and one scatter a layer, not measured yet "
        "(docs/performance.md)."
    ),
}


def run_note(path: Path, data: dict) -> str:
    return RUN_NOTES.get((path.parent.name, data["environment"]["git_commit"][:7]), "")


def link(path: Path, links_from: Path) -> str:
    """A Markdown link target to path from a file in the folder links_from."""
    return os.path.relpath(path, links_from)


def percent_range(values: list[float]) -> str:
    return f"{100 * min(values):.0f}-{100 * max(values):.0f}%"


def fine_range(values: list[float]) -> str:
    return f"{100 * min(values):.1f}-{100 * max(values):.1f}%"
