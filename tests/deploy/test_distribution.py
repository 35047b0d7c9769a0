"""Packaging: what a ``pip install toposcope`` user gets, checked without installing.

The wheel must carry the rule templates and defaults and the dashboards' JSON (package data),
declare its licence as an SPDX expression with the licence file, and take its version from git
tags with a fallback for source trees without git metadata. Installing is too slow for a
test; these checks read ``pyproject.toml`` and match its package-data globs against the files
in the repository, so a new template or dashboard outside the globs fails here.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

import toposcope
from tests.helpers import REPO


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _package_folder(package: str) -> Path:
    """The source folder of ``package`` through ``[tool.setuptools.package-dir]``."""
    mapping: dict[str, str] = _pyproject()["tool"]["setuptools"]["package-dir"]
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in mapping:
            return REPO / mapping[prefix] / Path(*parts[cut:])
    raise AssertionError(f"{package} has no package-dir")


def _shipped(package: str) -> set[Path]:
    """Files the package-data globs of ``package`` select."""
    folder = _package_folder(package)
    globs = _pyproject()["tool"]["setuptools"]["package-data"].get(package, [])
    return {path for pattern in globs for path in folder.glob(pattern)}


@pytest.mark.parametrize(
    ("package", "folder", "pattern"),
    [
        ("toposcope.rules", "toposcope/rules", "defaults.yaml"),
        ("toposcope.rules", "toposcope/rules/templates", "*"),
        ("toposcope.dashboards.grafana", "dashboards/grafana/json", "*"),
    ],
)
def test_package_data_covers_rules_and_dashboards(package: str, folder: str, pattern: str) -> None:
    files = {p for p in (REPO / folder).glob(pattern) if p.is_file()}
    assert files, f"nothing in {folder}"
    assert package in _pyproject()["tool"]["setuptools"]["packages"]
    missing = sorted(str(p.relative_to(REPO)) for p in files - _shipped(package))
    assert not missing, f"not in the wheel (package-data of {package}): {missing}"


def test_only_listed_package_data_is_shipped() -> None:
    """setuptools-scm would add every git-tracked file inside a package otherwise."""
    assert _pyproject()["tool"]["setuptools"]["include-package-data"] is False


def test_license_is_an_spdx_expression_with_its_file() -> None:
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    requires = _pyproject()["build-system"]["requires"]
    # PEP 639 license expressions need setuptools 77
    setuptools = next(r for r in requires if r.startswith("setuptools>="))
    assert tuple(int(p) for p in setuptools.removeprefix("setuptools>=").split(".")) >= (77,)


def test_version_comes_from_git_tags_with_a_fallback() -> None:
    pyproject = _pyproject()
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    assert any(r.startswith("setuptools-scm") for r in pyproject["build-system"]["requires"])
    assert pyproject["tool"]["setuptools_scm"]["fallback_version"]


def test_version_flag_prints_the_installed_version() -> None:
    assert toposcope.__version__ == version("toposcope")
    result = subprocess.run(
        [sys.executable, "-m", "toposcope.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"toposcope {version('toposcope')}"


def test_changelog_follows_keep_a_changelog() -> None:
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog\n")
    assert "## [Unreleased]" in text
    fallback = _pyproject()["tool"]["setuptools_scm"]["fallback_version"]
    assert f"## [{fallback}]" in text
    assert "keepachangelog.com" in text


def test_dashboards_export_writes_the_packaged_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from toposcope.cli import main

    assert main(["dashboards", "export", str(tmp_path)]) == 0
    json_dir = REPO / "dashboards" / "grafana" / "json"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in json_dir.iterdir())
    for path in tmp_path.iterdir():
        assert path.read_text(encoding="utf-8") == (json_dir / path.name).read_text("utf-8")
    assert main(["dashboards", "export", str(tmp_path), "--check"]) == 0
    (tmp_path / "toposcope-node-detail.json").write_text("{}", encoding="utf-8")
    assert main(["dashboards", "export", str(tmp_path), "--check"]) == 1
    assert "toposcope-node-detail.json is stale" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    assert main(["dashboards", "export", str(blocker)]) == 2
