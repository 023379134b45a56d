"""docs/architecture.md is checked against the code, both ways, on CPU:

- every file or folder its layout blocks name exists, and every module of the package is named
  in one of them (a layout block is a ```text block whose first line is a folder; a line at
  the block's first indent names entries of that folder, a line at column 0 entries of the
  repository root, continuation lines are indented further);
- every public export of ssmdecode, ssmdecode.ops.selective_state_update and ssmdecode.compat.*
  (their __all__) is named in the doc;
- the signatures it prints are the functions' own (parameter names, order, keyword-only marker
  and defaults), and every public function of the op family has one;
- the names it imports from ssmdecode.config, the dotted names (`compat.vllm.X`,
  `ssmdecode.X`) and the repository paths it quotes exist.

A failure names the doc's entry or the code's name that disagree: fix the doc (or the code).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "src" / "ssmdecode"
# The subpackages whose __init__.py holds more than a docstring, so the doc names it: the op
# family's exports, compat's shared helpers (the package's own __init__.py is named too).
NAMED_INITS = ("selective_state_update", "compat")
# The modules whose public exports (__all__) the doc must name.
EXPORTERS = (
    "ssmdecode",
    "ssmdecode.ops.selective_state_update",
    "ssmdecode.compat",
    "ssmdecode.compat.sglang",
    "ssmdecode.compat.vllm",
    "ssmdecode.compat.flashinfer",
)
# The module whose public functions the signature block prints.
FAMILY = "ssmdecode.ops.selective_state_update"

_BLOCK = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SIGNATURE = re.compile(r"^(\w+)\(", re.MULTILINE)


def _text() -> str:
    return DOC.read_text()


def _blocks(language: str) -> list[str]:
    return [m.group(2) for m in _BLOCK.finditer(_text()) if m.group(1) == language]


def layout_entries(text: str) -> list[tuple[str, str]]:
    """(entry as written, its path relative to the repository root) of every layout block of a
    doc's text."""
    entries = []
    for m in _BLOCK.finditer(text):
        lines = m.group(2).splitlines()
        if m.group(1) != "text" or not lines or not re.fullmatch(r"[\w./-]+/", lines[0]):
            continue
        folder = lines[0]
        indent = None  # the block's first indent, set by its first indented line
        for line in lines[1:]:
            if not line.strip():
                continue
            depth = len(line) - len(line.lstrip())
            if depth and indent is None:
                indent = depth
            if depth not in (0, indent):
                continue  # a continuation of the entry above
            names = re.split(r"\s{2,}", line.strip())[0]
            for name in names.split(", "):
                entries.append((name, name if depth == 0 else folder + name))
    return entries


def _exists(path: str, *roots: Path) -> bool:
    """Whether a path exists under one of roots (default: the repository root); a
    <placeholder> in it matches any name."""
    pattern = re.sub(r"<[^>]+>", "*", path.rstrip("/"))
    return any(any(r.glob(pattern)) if "*" in pattern else (r / pattern).exists() for r in roots or (ROOT,))


def test_layout_entries_are_parsed() -> None:
    text = "```text\nsrc/a/\n  b.py, c/   what\n             more\ntests/   x\n```\n"
    assert layout_entries(text) == [("b.py", "src/a/b.py"), ("c/", "src/a/c/"), ("tests/", "tests/")]


def test_every_listed_path_exists() -> None:
    entries = layout_entries(_text())
    assert entries, "docs/architecture.md has no layout block"
    missing = [name for name, path in entries if not _exists(path)]
    assert not missing, f"docs/architecture.md lists paths that do not exist: {missing}"


def test_every_module_is_listed() -> None:
    listed = {path for _, path in layout_entries(_text())}
    modules = [
        p.relative_to(ROOT).as_posix()
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name != "__init__.py" or p.parent == PACKAGE or p.parent.name in NAMED_INITS
    ]
    unlisted = [m for m in modules if m not in listed]
    assert not unlisted, f"modules missing from docs/architecture.md's layout blocks: {unlisted}"


@pytest.mark.parametrize("module", EXPORTERS)
def test_every_public_export_is_named(module: str) -> None:
    text = _text()
    exports = importlib.import_module(module).__all__
    unnamed = [name for name in exports if not re.search(rf"\b{re.escape(name)}\b", text)]
    assert not unnamed, f"{module} exports {unnamed}, which docs/architecture.md does not name"


def _split_top_level(params: str) -> list[str]:
    """'a, b=(1, 2), *, c=None' -> ['a', 'b=(1, 2)', '*', 'c=None']."""
    parts, depth, current = [], 0, ""
    for ch in params:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return [p for p in [*parts, current.strip()] if p]


def doc_signatures() -> dict[str, list[str]]:
    """name -> the parameters as the doc prints them, from the text block of signatures (the
    one whose lines open with `name(`); `...` stands for parameters not printed."""
    found = {}
    for block in _blocks("text"):
        for m in _SIGNATURE.finditer(block):
            depth, end = 0, m.end() - 1
            for end in range(m.end() - 1, len(block)):
                depth += block[end] == "("
                depth -= block[end] == ")"
                if depth == 0:
                    break
            found[m.group(1)] = _split_top_level(" ".join(block[m.end() : end].split()))
    return found


def test_signatures_match_the_code() -> None:
    family = importlib.import_module(FAMILY)
    printed = doc_signatures()
    functions = [n for n in family.__all__ if inspect.isfunction(getattr(family, n))]
    unprinted = [n for n in functions if n not in printed]
    assert not unprinted, f"docs/architecture.md prints no signature of {unprinted}"
    for name, params in printed.items():
        assert hasattr(family, name), f"docs/architecture.md prints {name}(), which {FAMILY} lacks"
        if params == ["..."]:
            continue
        want = []
        for p in inspect.signature(getattr(family, name)).parameters.values():
            if p.kind is p.KEYWORD_ONLY and "*" not in want:
                want.append("*")
            want.append(p.name)
        got = [p.split("=")[0] for p in params]
        assert got == want, f"{name}: docs/architecture.md prints {got}, the code takes {want}"
        defaults = inspect.signature(getattr(family, name)).parameters
        for p in params:
            if "=" in p:
                key, value = p.split("=", 1)
                default = defaults[key].default
                assert ast.literal_eval(value) == default, (
                    f"{name}: docs/architecture.md prints {p}, the code's default is {default!r}"
                )


def test_config_names_exist() -> None:
    config = importlib.import_module("ssmdecode.config")
    imported = [
        alias.name
        for block in _blocks("python")
        for node in ast.walk(ast.parse(block))
        if isinstance(node, ast.ImportFrom) and node.module == "ssmdecode.config"
        for alias in node.names
    ]
    assert imported, "docs/architecture.md no longer lists ssmdecode.config's names"
    missing = [n for n in imported if not hasattr(config, n)]
    assert not missing, f"docs/architecture.md lists {missing}, which ssmdecode.config lacks"


def _resolve(dotted: str) -> bool:
    """Whether ssmdecode.<dotted> (or dotted, when it starts with ssmdecode) is a module or an
    attribute of one."""
    parts = dotted.split(".")
    if parts[0] != "ssmdecode":
        parts.insert(0, "ssmdecode")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_quoted_names_and_paths_exist() -> None:
    spans = re.findall(r"`([^`\n]+)`", _text())
    dotted = [s for s in spans if re.fullmatch(r"(ssmdecode|compat)(\.\w+)+", s)]
    assert dotted, "no dotted name found: the pattern went stale"
    unresolved = [s for s in dotted if not _resolve(s)]
    assert not unresolved, f"docs/architecture.md quotes names that do not exist: {unresolved}"
    paths = [s for s in spans if re.fullmatch(r"[\w.<>-]+(/[\w.<>-]+)+/?", s)]
    missing = [p for p in paths if not _exists(p, ROOT, PACKAGE)]  # the repository's, or the package's
    assert not missing, f"docs/architecture.md quotes paths that do not exist: {missing}"
