"""Build the results report of one device from the JSON that the ssmdecode tools wrote.

    python benchmarks/make_report.py [benchmarks/results/NVIDIA_H200]

Writes three things, all from the JSON in the folder:

- <folder>/REPORT.md: every measured table (benches, verify, sweeps, model steps), the summary
  first;
- <folder>/summary.png: one figure of what ssmdecode gains over the baseline of each run, with
  what the ceiling of that run would gain beside it (the decode call, the verify calls of
  speculative decoding at T = 4, each with ReplaySSM's fast route against the engine's own
  ReplaySSM kernel, and the model steps of both);
- the part of README.md between the markers `<!-- results:begin -->` and
  `<!-- results:end -->`: a short table of the summary's gains, that figure and where each
  figure came from (the summary's full table and sentences are REPORT.md's).

No figure is typed by hand: every number comes from a bench, sweep, verify or e2e JSON in the
folder, and every table names the command, commit and date of the run that measured it, with
the ceiling and the upstream configs of that same run. The one exception is marked as such: the
kernel sweeps are also held against benchmarks/reference/measuring_h200.json, the
upstream-kernel table of docs/measuring.md copied as printed there (a target, not a result of
ours).

Each section of the report is a module of benchmarks/report/; this script is the command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# the sections live in benchmarks/report/, beside this script (a script's folder is on sys.path)
from report import build, readme_summary, summary_plot
from report.common import ROOT

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "folder",
        nargs="?",
        type=Path,
        default=ROOT / "benchmarks/results/NVIDIA_H200",
        help="a device's results folder (default: %(default)s)",
    )
    folder = parser.parse_args().folder.resolve()
    plot = summary_plot(folder)
    (folder / "REPORT.md").write_text(build(folder, folder))
    wrote = [folder / "REPORT.md", *([plot] if plot else [])]
    readme = ROOT / "README.md"
    text = readme.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        summary = readme_summary(folder, ROOT)
        readme.write_text(head + BEGIN + "\n" + summary + "\n" + END + rest.split(END, 1)[1])
        wrote.append(readme)
    print("wrote " + ", ".join(str(p.relative_to(ROOT)) for p in wrote))
    return 0


if __name__ == "__main__":
    sys.exit(main())
