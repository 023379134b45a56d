"""Accuracy of 16-bit states over a long decode (`ssmdecode accuracy`)."""

from __future__ import annotations

from pathlib import Path

from .common import load, provenance


def accuracy_section(folder: Path) -> str:
    """`ssmdecode accuracy`'s tables (their own markdown) and provenance, one per accuracy*
    folder (other Philox rounds, other decays)."""
    parts = []
    for path in sorted(folder.glob("accuracy*/accuracy.json")):
        data = load(path)
        md = (path.parent / "accuracy.md").read_text()
        body = md[md.index("Shape:") :].split("\nwrote ")[0].strip()
        parts += [
            f"#### Accuracy of 16-bit states over a long decode (`ssmdecode accuracy`, {path.parent.name}/)",
            "",
            body,
            "",
            provenance(data),
            "",
        ]
    return "\n".join(parts).rstrip()
