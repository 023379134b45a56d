"""The results report of one device, one module a section (benchmarks/make_report.py runs it).

common     loading a run, its provenance line, Markdown tables, the shipped-table note
summary    the summary table, its sentences and summary.png (REPORT.md's top), and the
           README's short table (readme_summary)
bench      single-token benches: the headline, pdl, slot order, other shapes
spec       verify calls (bench --tokens) and verify steps (e2e --spec)
verify     bit-identity with the upstream config (ssmdecode verify)
sweeps     the upstream grid's sweep, each kernel's, and the measuring notes' table
e2e        decode steps of the layer stack and greedy decoding
replay     ReplaySSM: the fast replay route against the engines' kernels (bench-replay)
rounding   stochastic rounding of 16-bit states
accuracy   16-bit states over a long decode
build      REPORT.md from the sections above
"""

from .build import build
from .summary import readme_summary, summary_plot, summary_text

__all__ = ["build", "readme_summary", "summary_plot", "summary_text"]
