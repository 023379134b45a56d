"""benchmarks/make_report.py and its sections (benchmarks/report/): the shipped results folder
builds into a report with every section, and the README's markers are where the summary goes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "benchmarks" / "results" / "NVIDIA_H200"


@pytest.fixture(scope="module")
def report():
    """The benchmarks/report package, imported as make_report.py imports it (its folder on
    sys.path)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import report

        yield report
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_report_of_the_shipped_results_has_every_section(report) -> None:
    text = report.build(FOLDER, FOLDER)
    assert text.startswith(f"### Measured on {FOLDER.name}\n")
    for heading in (
        "#### Summary",
        "#### Headline (Nemotron-3-Super, TP8 rank)",
        "#### Bit-identity of the shipped table",
        "#### Sweep of the upstream grid's",
        "#### The upstream kernels and ssmdecode's through the same harness",
        "#### e2e: ",
        "#### Verify calls, mode replay",
        "#### Verify steps, T = 4",
        "#### ReplaySSM: the fast replay route",
        "##### ReplaySSM, T = 4, steady cursors, window 16",
        "#### Stochastic rounding of 16-bit states",
        "#### Accuracy of 16-bit states",
        "#### Plots",
    ):
        assert heading in text, heading
    assert text.endswith("\n") and not text.endswith("\n\n")


def test_readme_holds_the_summary_markers(report) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import make_report
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    readme = (ROOT / "README.md").read_text()
    assert readme.count(make_report.BEGIN) == 1 and readme.count(make_report.END) == 1
    assert readme.index(make_report.BEGIN) < readme.index(make_report.END)
