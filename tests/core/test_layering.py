"""Imports go one way: core <- exporters <- sim; core <- advisor; core <- dashboards.

Each part talks to the others only through wire formats (Prometheus text, HTTP APIs), so it
can run on another machine. A module-level or function-level import across the rule is a
failure here, named with its file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: folder -> the toposcope subpackages it may import (besides the core and itself)
ALLOWED: dict[str, set[str]] = {
    "toposcope": set(),
    "exporters": set(),
    "sim": {"exporters"},
    "advisor": set(),
    "dashboards": set(),
}
PARTS = {"exporters", "sim", "advisor", "dashboards"}


def _imported_parts(path: Path) -> list[tuple[int, str]]:
    """(line, part) for every import of ``toposcope.<part>`` in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "toposcope":
                names += [f"toposcope.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if len(parts) > 1 and parts[0] == "toposcope" and parts[1] in PARTS:
                found.append((node.lineno, parts[1]))
    return found


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_imports_follow_the_layering(folder: str) -> None:
    own = "toposcope" if folder == "toposcope" else folder
    allowed = ALLOWED[folder] | {own}
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, f"no Python files under {folder}/"
    violations = [
        f"{path.relative_to(ROOT)}:{line} imports toposcope.{part}"
        for path in files
        for line, part in _imported_parts(path)
        if part not in allowed
    ]
    assert violations == []
