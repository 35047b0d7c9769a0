"""Imports go one way: every part imports the core (host readers and the fake NVML included)
and nothing sideways, except the simulator, which runs the exporter's own collectors and
renderer on its simulated nodes (core <- exporters <- sim).

Each part talks to the others only through wire formats (Prometheus text, HTTP APIs), so it
can run on another machine. A module-level or function-level import across the rule is a
failure here, named with its file and line, and so is a string naming ``toposcope.<part>``
(what ``importlib.import_module`` or a lazy import would use to get round the rule). Relative
imports are banned by ruff (TID252), so every import names its package. The one dispatcher
allowed to name every part is the core's command line (``toposcope/cli.py``): it imports only
the subcommand being run. Backends that live in another part are found through entry points
declared in pyproject.toml, not named in code.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: folder -> the toposcope subpackages it may import (besides the core and itself)
ALLOWED: dict[str, set[str]] = {
    "toposcope": set(),
    "exporters": set(),
    "agent": set(),
    "sim": {"exporters"},
    "advisor": set(),
    "dashboards": set(),
    "slurm": set(),
    "kube": set(),
}
PARTS = set(ALLOWED) - {"toposcope"}
#: the development toolkit: in the source tree, not in the wheel
DEVELOPMENT_ONLY = Path("toposcope/devtools")
#: files allowed to name any part in a string (the subcommand table)
DISPATCHERS = {Path("toposcope/cli.py")}
_PART_STRING = re.compile(rf"\btoposcope\.({'|'.join(sorted(PARTS))})\b")


def _imported_parts(path: Path) -> list[tuple[int, str]]:
    """(line, part) for every import of ``toposcope.<part>`` in the file, and every string
    constant that names one.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docstrings = _docstring_nodes(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append((node.lineno, "a relative import"))
                continue
            names = [node.module or ""]
            if node.module == "toposcope":
                names += [f"toposcope.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in docstrings:
                continue
            found += [(node.lineno, m.group(1)) for m in _PART_STRING.finditer(node.value)]
            continue
        else:
            continue
        for name in names:
            parts = name.split(".")
            if len(parts) > 1 and parts[0] == "toposcope" and parts[1] in PARTS:
                found.append((node.lineno, parts[1]))
    return found


def _docstring_nodes(tree: ast.Module) -> set[int]:
    """ids of the docstring constants (they name modules for readers, not for importing)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _violations(folder: str) -> list[str]:
    own = "toposcope" if folder == "toposcope" else folder
    allowed = ALLOWED[folder] | {own}
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, f"no Python files under {folder}/"
    return [
        f"{path.relative_to(ROOT)}:{line} imports toposcope.{part}"
        if part in PARTS
        else f"{path.relative_to(ROOT)}:{line} uses {part}"
        for path in files
        if path.relative_to(ROOT) not in DISPATCHERS
        for line, part in _imported_parts(path)
        if part not in allowed
    ]


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_imports_follow_the_layering(folder: str) -> None:
    assert _violations(folder) == []


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_no_shipped_module_imports_the_development_toolkit(folder: str) -> None:
    """``toposcope.devtools`` is not in the wheel, so nothing that is may import it."""
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        if DEVELOPMENT_ONLY in path.relative_to(ROOT).parents:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            if any(n == "toposcope.devtools" or n.startswith("toposcope.devtools.") for n in names):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_the_checker_catches_what_gets_round_it(tmp_path: Path) -> None:
    """A relative import across parts and an import string both count (they once passed)."""
    module = tmp_path / "sneaky.py"
    module.write_text(
        '"""Mentions toposcope.advisor in its docstring, which is fine."""\n'
        "import importlib\n"
        "from ...advisor import model\n"
        'SIM = importlib.import_module("toposcope.sim.cluster")\n'
        "from toposcope import advisor\n"
    )
    found = _imported_parts(module)
    assert (3, "a relative import") in found
    assert (4, "sim") in found
    assert (5, "advisor") in found
    assert all(line != 1 for line, _ in found)


def test_every_part_is_covered_and_installed() -> None:
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    assert {v for k, v in package_dir.items() if k != "toposcope"} == PARTS


def test_ruff_bans_relative_imports() -> None:
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "TID" in ruff["select"] or "TID252" in ruff["select"]
    assert ruff["flake8-tidy-imports"]["ban-relative-imports"] == "all"
