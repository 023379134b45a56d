"""The wheel: what a user installs works without the checkout.

Builds a wheel of this checkout offline (pip wheel, no build isolation, no index), checks that
it carries the H200 launch table and the package's version, installs it into a fresh virtual
environment, and there finds the table through ssmdecode.config and runs `ssmdecode --help`.
The fresh environment sees this one's dependencies (torch, triton, numpy, tqdm, matplotlib)
through a .pth file naming the directories they live in: Python adds the directories a .pth
lists to sys.path but does not read the .pth files inside them, so this environment's editable
install of ssmdecode (itself a .pth) stays out, and every ssmdecode module must come from the
wheel. 7 s on an idle 2-core CPU machine (25 s with other test runs beside it), mostly
building, creating the environment (ensurepip) and importing torch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version
from pathlib import Path

import pytest

import ssmdecode

ROOT = Path(__file__).resolve().parent.parent
# What setuptools reads to build the wheel: pyproject.toml and the files it names. The build
# runs on a copy of them, so that it leaves no build/ folder in the checkout and stale files
# of an earlier build/lib cannot slip into the wheel.
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "src")
DEPENDENCIES = ("torch", "triton", "numpy", "tqdm", "matplotlib")
TABLE = "ssmdecode/configs/selective_state_update/NVIDIA_H200.json"
# pyproject's [build-system] floor (an SPDX license string, license-files). Without build
# isolation pip builds with this environment's setuptools; torch 2.13, the CPU pin, requires
# setuptools >= 77.0.3, so a venv made by the README's command has it.
SETUPTOOLS_FLOOR = (77,)

# Runs in the fresh environment; prints what the test asserts on.
PROBE = """
import importlib.metadata, json, torch
import ssmdecode
from ssmdecode.config import default_config, load_table, lookup_config, table_path
table = load_table("NVIDIA_H200")
print(json.dumps({
    "file": ssmdecode.__file__,
    "version": ssmdecode.__version__,
    "metadata_version": importlib.metadata.version("ssmdecode"),
    "table_path": str(table_path("NVIDIA_H200")),
    "table_keys": sorted(table) if table else None,
    "cpu_lookup": lookup_config(64, 128, torch.float32, 8, device="cpu").label,
    "default": default_config(128, torch.float32).label,
}))
"""


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (
        f"{' '.join(cmd)} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    )
    return done


def _clean_env() -> dict[str, str]:
    """This process's environment without what would point Python or ssmdecode elsewhere, and
    with pip kept off the network."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "VIRTUAL_ENV", "SSMDECODE_CONFIG_DIR")
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    return env


def _dependency_dirs() -> list[str]:
    """The directories this environment imports the dependencies from (their site-packages)."""
    dirs: list[str] = []
    for name in DEPENDENCIES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, f"{name} is not importable here"
        home = str(Path(spec.origin).resolve().parent.parent)
        if home not in dirs:
            dirs.append(home)
    return dirs


def _setuptools_version() -> tuple[int, ...] | None:
    try:
        text = installed_version("setuptools")
    except PackageNotFoundError:
        return None
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


def test_wheel_installs_and_runs_without_the_checkout(tmp_path: Path) -> None:
    have = _setuptools_version()
    if have is None or have < SETUPTOOLS_FLOOR:
        pytest.skip(
            f"building without isolation needs setuptools >= {SETUPTOOLS_FLOOR[0]} in this "
            f"environment, which has {have or 'none'}"
        )
    env = _clean_env()
    version = ssmdecode.__version__

    tree = tmp_path / "tree"
    tree.mkdir()
    for name in BUILD_INPUTS:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(src, tree / name)
    dist = tmp_path / "dist"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(tree),
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(dist),
        ],
        tmp_path,
        env,
    )
    wheels = list(dist.glob("ssmdecode-*.whl"))
    assert [w.name for w in wheels] == [f"ssmdecode-{version}-py3-none-any.whl"]
    wheel = wheels[0]
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(f"ssmdecode-{version}.dist-info/METADATA").decode()
    assert TABLE in names
    assert f"ssmdecode-{version}.dist-info/licenses/LICENSE" in names
    assert f"\nVersion: {version}\n" in metadata
    assert "\nLicense-Expression: Apache-2.0\n" in metadata

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    python, script = venv / "bin" / "python", venv / "bin" / "ssmdecode"
    # installed before the .pth below exists: pip must not see this environment's ssmdecode
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)], tmp_path, env)
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp_path, env
    ).stdout.strip()
    (Path(purelib) / "outer_dependencies.pth").write_text("\n".join(_dependency_dirs()) + "\n")

    got = json.loads(_run([str(python), "-c", PROBE], tmp_path, env).stdout)
    assert Path(got["file"]).is_relative_to(venv), got["file"]
    assert got["version"] == got["metadata_version"] == version
    table = Path(got["table_path"])
    assert table.is_relative_to(venv) and table.is_file(), table
    assert table.as_posix().endswith(TABLE)
    assert "headdim=64 dstate=128 state=float32" in got["table_keys"]
    # a CPU device has no table: lookups fall back to the built-in default
    assert got["cpu_lookup"] == got["default"]

    help_text = _run([str(script), "--help"], tmp_path, env).stdout
    for subcommand in ("bench", "sweep", "verify", "tune", "e2e"):
        assert subcommand in help_text
