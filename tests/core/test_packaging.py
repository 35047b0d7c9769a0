"""Packaging: every Python package is installed, and the base install stays lean (extras)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

from tests.helpers import REPO

FOLDERS = {
    "toposcope": "toposcope",
    "exporters": "toposcope.exporters",
    "agent": "toposcope.agent",
    "advisor": "toposcope.advisor",
    "dashboards": "toposcope.dashboards",
    "sim": "toposcope.sim",
    "slurm": "toposcope.slurm",
    "kube": "toposcope.kube",
}

#: packages of the source tree that the distribution leaves out on purpose
DEVELOPMENT_ONLY = {"toposcope.devtools"}


def test_every_package_is_installed() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = set()
    for folder, package in FOLDERS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(REPO / folder)
            parts = [p for p in relative.parts if p != "."]
            found.add(".".join([package, *parts]))
    assert found - listed == DEVELOPMENT_ONLY, "add these to [tool.setuptools] packages"
    assert listed - found == set(), "these listed packages do not exist"
    mapping = config["tool"]["setuptools"]["package-dir"]
    assert {v: k for k, v in mapping.items()} == FOLDERS


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[ ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_base_install_is_the_lean_exporter() -> None:
    """``pip install toposcope`` brings no web framework or plotting library: those are extras."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = _requirement_names(project["dependencies"])
    assert base.isdisjoint({"dash", "plotly", "pandas", "apiflask", "flask"})
    extras = project["optional-dependencies"]
    assert {"exporter", "agent", "advisor", "sim", "dash", "all"} <= set(extras)
    assert extras["all"] == ["toposcope[agent,advisor,sim,dash,kubernetes,kube,slurm]"]
    assert base.isdisjoint({"grpcio", "protobuf"}), "the kubelet client is the kubernetes extra"
    node_side = _requirement_names(extras["kubernetes"])
    assert node_side.isdisjoint({"lightkube", "pydantic"}), "the API-server client is [kube]"
    assert "lightkube" in _requirement_names(extras["kube"])
    assert "dash" in _requirement_names(extras["dash"])
    assert "apiflask" in _requirement_names(extras["agent"])


def test_a_missing_extra_is_named_with_how_to_install_it() -> None:
    """Without the dash extra, ``toposcope dash`` says which extra to install and exits 2."""
    probe = (
        "import sys\n"
        "class Missing:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'dash':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Missing())\n"
        "from toposcope.cli import main\n"
        "sys.exit(main(['dash', '--help']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "toposcope[dash]" in done.stderr
    assert "Traceback" not in done.stderr
