"""Every Python package in the source folders is listed for installation in pyproject.toml."""

from __future__ import annotations

import tomllib

from tests.helpers import REPO

FOLDERS = {
    "toposcope": "toposcope",
    "exporters": "toposcope.exporters",
    "advisor": "toposcope.advisor",
    "dashboards": "toposcope.dashboards",
    "sim": "toposcope.sim",
}


def test_every_package_is_installed() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = set()
    for folder, package in FOLDERS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(REPO / folder)
            parts = [p for p in relative.parts if p != "."]
            found.add(".".join([package, *parts]))
    assert found - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - found == set(), "these listed packages do not exist"
    mapping = config["tool"]["setuptools"]["package-dir"]
    assert {v: k for k, v in mapping.items()} == FOLDERS
