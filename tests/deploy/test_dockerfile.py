"""Dockerfile: the image the Kubernetes manifests name, checked without building it.

The build itself needs a Docker daemon and the package index; these checks catch the
mistakes that do not: a packaged folder missing from the COPY lines, a different base image
or entry point.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any

from tests.helpers import REPO

DOCKERFILE = REPO / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    joined: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in joined]


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_base_image_and_entry_point() -> None:
    instructions = _instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    entry = [args for name, args in instructions if name == "ENTRYPOINT"]
    assert [json.loads(args) for args in entry] == [["toposcope"]]
    assert ("EXPOSE", "9847") in instructions


def test_every_packaged_folder_is_copied() -> None:
    copied: set[str] = set()
    for name, args in _instructions():
        if name == "COPY":
            copied.update(part.rstrip("/") for part in args.split()[:-1])
    package_dirs = set(_pyproject()["tool"]["setuptools"]["package-dir"].values())
    assert package_dirs | {"pyproject.toml", "README.md"} <= copied
    assert all((REPO / path).exists() for path in copied)


def test_installs_the_copied_project() -> None:
    runs = [args for name, args in _instructions() if name == "RUN"]
    assert any('pip install "/src[all]"' in run for run in runs)
