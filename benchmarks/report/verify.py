"""Bit-identity of the shipped table with the upstream config (`ssmdecode verify`)."""

from __future__ import annotations

from pathlib import Path

from .common import load, provenance, table


def verify_section(folder: Path) -> str:
    rows = []
    first = None
    for path in sorted(folder.glob("verify*/verify.json")):
        data = load(path)
        grid = data["grid"]
        first = first or data
        rows.append(
            [
                f"P{grid['headdim']} N{grid['dstate']} {grid['state_dtype']} state",
                f"{data['points'] - data['failures']}/{data['points']}",
                grid.get("out_dtype") or grid["dtype"],
                data["environment"]["git_commit"][:7],
            ]
        )
    if not rows:
        return ""
    return "\n".join(
        [
            "#### Bit-identity of the shipped table with the upstream config (`ssmdecode verify`)",
            "",
            "Heads 8, 16, 32, 64, 128 x batch 1..64 then every 8 up to 1024 (the seed's 920 points);",
            "out and the whole state pool after one call, bit for bit.",
            "",
            table(["shape", "points identical", "out stored as", "commit"], rows),
            "",
            provenance(first),
        ]
    )
