"""Every ```python block of the user docs runs: the blocks of one file in order, in one
namespace (a later block uses the names of the earlier ones, as a reader types them), on this
test's device (the CPU under Triton's interpreter, or the GPU where there is one) at tiny
sizes, with index validation on. A snippet that cannot run (a name never defined, a
signature that changed, a bad argument) fails here.

The docs are rewritten before they run in one way only: a top-level assignment (at column 0)
whose targets are all names of STAND_INS gets the stand-ins' values instead, e.g.
`S, bs, H, P, N, G = 1024, 8, 16, 64, 128, 1` becomes `S, bs, H, P, N, G = 8, 3, 2, 8, 16, 1`.
A line that assigns stand-in names together with other names is refused: split it, or add the
names to STAND_INS. A block whose info string carries `no-run` (```python no-run) is skipped;
give the reason beside it in the docs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import DEVICE

ROOT = Path(__file__).resolve().parent.parent
# The files whose python blocks must run, relative to the repository root (each must exist:
# the README's first screen points at docs/usage.md for everything else).
DOC_FILES = ("README.md", "docs/usage.md")

# The names the snippets give the sizes and the device, and their tiny stand-ins: few Triton
# programs a call (B * H * P / BLOCK_M), P and N powers of two as the docs' are, T small but
# the ring still R = 8 + T >= 2 T.
STAND_INS = {
    "S": "8",
    "bs": "3",
    "H": "2",
    "P": "8",
    "N": "16",
    "G": "1",
    "T": "2",
    "dev": repr(DEVICE),
    "bf16": "torch.bfloat16",
}

_BLOCK = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_ASSIGN = re.compile(r"^([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=(?!=)")


@dataclass(frozen=True)
class Snippet:
    path: str
    line: int  # the block's first code line in the file, 1-based
    code: str
    skip: bool


def snippets(path: str) -> list[Snippet]:
    """The python blocks of a doc file, in order."""
    text = (ROOT / path).read_text()
    found = []
    for m in _BLOCK.finditer(text):
        line = text.count("\n", 0, m.start(2)) + 1
        found.append(Snippet(path, line, m.group(2), "no-run" in m.group(1).split()))
    return found


def with_stand_ins(snippet: Snippet) -> str:
    """The block's code with its size and device assignments replaced (see the module
    docstring); same line count, so that a traceback's line numbers are the doc file's."""
    lines = snippet.code.split("\n")
    for i, line in enumerate(lines):
        m = _ASSIGN.match(line)
        if m is None:
            continue
        targets = [name.strip() for name in m.group(1).split(",")]
        ours = [name for name in targets if name in STAND_INS]
        if not ours:
            continue
        if len(ours) != len(targets):
            raise AssertionError(
                f"{snippet.path}:{snippet.line + i}: {line.strip()!r} assigns the stand-in names "
                f"{ours} together with others; split the line or extend STAND_INS"
            )
        lines[i] = f"{', '.join(targets)} = {', '.join(STAND_INS[n] for n in targets)}"
    return "\n".join(lines)


# The README is a user's first screen (what, install, the smallest call, the engine imports, a
# short table and the plot); everything else goes to docs/usage.md.
README_MAX_LINES = 160


def test_the_readme_is_one_screen() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move the rest to docs/usage.md"


def test_the_readme_holds_the_ci_command() -> None:
    """.ci/run runs the README's test command verbatim: the two must not drift apart."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    command = ci[ci.index("# The README's test command, verbatim:") + 1]
    assert f"\n{command}\n" in (ROOT / "README.md").read_text(), command


def test_the_docs_links_resolve() -> None:
    """Every relative link of README.md and docs/usage.md names a file of the repository."""
    broken = []
    for path in DOC_FILES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (ROOT / path).read_text()):
            if "://" not in target and not ((ROOT / path).parent / target).exists():
                broken.append(f"{path}: {target}")
    assert not broken, broken


def test_the_docs_have_snippets() -> None:
    for path in DOC_FILES:
        assert (ROOT / path).exists() and snippets(path), f"{path} is missing or lost its python blocks"


def test_stand_ins_replace_the_sizes() -> None:
    code = "S, bs = 1024, 8  # pool, batch\nout = f(S,\n    bs=bs)\nT = 4"
    got = with_stand_ins(Snippet("doc.md", 1, code, False))
    assert got.split("\n") == ["S, bs = 8, 3", "out = f(S,", "    bs=bs)", "T = 2"]
    with pytest.raises(AssertionError, match=r"doc.md:1: .* together with others"):
        with_stand_ins(Snippet("doc.md", 1, "S, R = 1024, 12", False))


@pytest.mark.parametrize("path", DOC_FILES)
def test_doc_snippets_run(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSMDECODE_VALIDATE_INDICES", "1")  # the docs' calls pass the value checks
    namespace: dict = {"__name__": f"snippets of {path}"}
    ran = 0
    for snippet in snippets(path):
        if snippet.skip:
            continue
        code = "\n" * (snippet.line - 1) + with_stand_ins(snippet)
        exec(compile(code, str(ROOT / path), "exec"), namespace)  # the docs' own code
        ran += 1
    assert ran, f"{path} has no python block that runs"
