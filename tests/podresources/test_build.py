"""The build step that generates the pod-resources modules (build_protos.py at the top).

grpcio-tools is a build requirement only, so protoc itself runs when the package is built or
installed, not here. What is checked: the step finds the .proto of every package through
pyproject's package-dir mapping, and an editable install (this checkout) left the modules it
says it writes next to the .proto, where the installed package imports them from.
"""

from __future__ import annotations

import importlib
import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.helpers import REPO

PACKAGE = "toposcope.host.podresources"


def _build_protos() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_protos", REPO / "build_protos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _distribution() -> Any:
    """setuptools' view of the project's packages (setuptools ships no type stubs)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    setuptools = importlib.import_module("setuptools")
    return setuptools.Distribution(
        {"packages": config["packages"], "package_dir": config["package-dir"]}
    )


def test_pyproject_runs_the_step_in_every_build() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert config["tool"]["setuptools"]["cmdclass"] == {
        "build": "build_protos.Build",
        "build_protos": "build_protos.BuildProtos",
    }
    requires = config["build-system"]["requires"]
    assert any(r.startswith("grpcio-tools==") for r in requires)
    assert any(r.startswith("mypy-protobuf==") for r in requires)
    module = _build_protos()
    assert ("build_protos", None) in module.Build.sub_commands


def test_the_step_finds_the_proto_through_package_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    module = _build_protos()
    command = module.BuildProtos(_distribution())
    assert command.get_source_files() == ["toposcope/host/podresources/api.proto"]


def test_an_editable_install_holds_the_generated_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    module = _build_protos()
    command = module.BuildProtos(_distribution())
    command.editable_mode = True
    outputs = [Path(p) for p in command.get_outputs()]
    assert [p.name for p in outputs] == [
        "api_pb2.py",
        "api_pb2.pyi",
        "api_pb2_grpc.py",
        "api_pb2_grpc.pyi",
    ]
    for path in outputs:
        assert path.parent == Path("toposcope/host/podresources")
        assert path.is_file(), f"{path} missing: reinstall with pip install -e ."
    # and the package imports them from there
    from toposcope.host.podresources import api_pb2

    assert Path(api_pb2.__file__).resolve() == (REPO / outputs[0]).resolve()
