"""What every tool writes: the environment of the run, JSON, a Markdown table, a PNG plot.

Reports land in --out, by default benchmarks/results/<device_key>/ under the current folder.
Each carries the device (name, SM count, L2 size), torch, Triton and Python versions, the git
commit, the UTC date, the exact command line and the method's parameters, so numbers from
different runs can be told apart.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
import triton

from ssmdecode.bench.timer import l2_bytes
from ssmdecode.config import device_key

__all__ = [
    "MEANINGLESS",
    "environment",
    "environment_markdown",
    "markdown_table",
    "plot_vs_batch",
    "results_dir",
    "write_outputs",
]

MEANINGLESS = (
    "CPU run under Triton's interpreter: the timings mean nothing about any GPU; "
    "this run only exercises the code."
)


GIT_COMMIT_ENV = "SSMDECODE_GIT_COMMIT"


def _git_commit() -> str | None:
    """HEAD of the git checkout around this package; $SSMDECODE_GIT_COMMIT where the code runs
    from a copy of the tree without its .git (benchmarks/run_gpu.sh sets it); else None."""
    if os.environ.get(GIT_COMMIT_ENV):
        return os.environ[GIT_COMMIT_ENV]
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def environment(device: torch.device, command: str | None = None) -> dict[str, object]:
    """The facts a reader needs to compare this run with another; command is the command
    line (default: this process's)."""
    env: dict[str, object] = {
        "device": "cpu",
        "device_key": device_key(device),
        "sm_count": None,
        "l2_bytes": None,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "cuda": torch.version.cuda,
        "git_commit": _git_commit(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command or shlex.join(sys.argv),
        "triton_interpret": os.environ.get("TRITON_INTERPRET", "") not in ("", "0"),
        "timing_meaningful": device.type == "cuda",
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(
            device=props.name,
            sm_count=props.multi_processor_count,
            l2_bytes=l2_bytes(device),
            clocks=gpu_clocks(device),
        )
    return env


def gpu_clocks(device: torch.device) -> dict[str, int] | None:
    """The SM and memory clocks (MHz) and temperature now, through NVML when it is installed
    (nvidia-ml-py), else None. The tools call environment() after their measurements, so this
    is the clock the card held at the end of the run: latency-bound configs move with it
    while streaming ones move with the memory clock."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        # NVML counts every GPU of the host; CUDA those it may see. Same index where (as on
        # a lent single-GPU machine) CUDA_VISIBLE_DEVICES does not reorder them.
        index = device.index if device.index is not None else torch.cuda.current_device()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return {
            "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "mem_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "max_sm_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "temperature_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        }
    except Exception:  # NVML is optional: no clocks rather than no report
        return None


def results_dir(out: Path | None, device: torch.device) -> Path:
    """--out, else benchmarks/results/<device_key>/ under the current folder."""
    return out if out is not None else Path("benchmarks") / "results" / device_key(device)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub Markdown table; floats with 2 decimals, None as '-'."""

    def cell(v: object) -> str:
        if v is None:
            return "-"
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def environment_markdown(env: Mapping[str, object]) -> str:
    """The environment as a short bullet list, with the CPU warning when it applies."""
    l2 = env.get("l2_bytes")
    lines = [
        f"- device: {env['device']} (SM count {env['sm_count']}, L2 {l2 / 2**20:.1f} MiB)"
        if l2
        else f"- device: {env['device']}",
        f"- torch {env['torch']}, Triton {env['triton']}, Python {env['python']}, CUDA {env['cuda']}",
        f"- git commit: {env['git_commit']}",
        f"- date (UTC): {env['date_utc']}",
        f"- command: `{env['command']}`",
    ]
    if not env["timing_meaningful"]:
        lines.append(f"- **{MEANINGLESS}**")
    return "\n".join(lines) + "\n"


def write_outputs(out_dir: Path, stem: str, data: Mapping[str, object], markdown: str) -> list[Path]:
    """Write <stem>.json (data, indent 2) and <stem>.md (data["environment"] as a list, then
    markdown) into out_dir; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    env = data["environment"]
    md_path.write_text(f"# {stem}\n\n{environment_markdown(env)}\n{markdown}")
    return [json_path, md_path]


def plot_vs_batch(
    path: Path,
    title: str,
    series: Mapping[str, Mapping[int, float]],
    ceiling: Mapping[int, float] | None = None,
    peak: float | None = None,
    ylabel: str = "TB/s of state moved",
) -> Path:
    """A PNG of one line per series (label -> {batch: value}) against batch on a log2 axis,
    the same-bytes ceiling as a dashed line and the large-transfer peak as a dotted one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for label, points in series.items():
        batches = sorted(points)
        ax.plot(batches, [points[b] for b in batches], marker="o", label=label)
    if ceiling:
        batches = sorted(ceiling)
        ax.plot(batches, [ceiling[b] for b in batches], "k--", label="same-bytes ceiling")
    if peak is not None:
        ax.axhline(peak, color="gray", linestyle=":", label="large-transfer peak")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
