"""Dockerfile: the images the Kubernetes manifests name, checked without building them.

The build itself needs a Docker daemon and the package index; these checks catch the
mistakes that do not: a packaged folder missing from the COPY lines, a stage that runs as
root without needing to, the exporter image installing more than the lean exporter, labels
that do not follow the OCI conventions, a manifest naming a stage that does not exist.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

import yaml

from tests.helpers import REPO

DOCKERFILE = REPO / "Dockerfile"
K8S = REPO / "deploy" / "kubernetes"
#: final stages -> the user each runs as (only the agent needs root)
FINAL_STAGES = {"exporter": "65532:65532", "toposcope": "65532:65532", "agent": "0:0"}
OCI_LABELS = {
    "org.opencontainers.image.title",
    "org.opencontainers.image.description",
    "org.opencontainers.image.version",
    "org.opencontainers.image.licenses",
    "org.opencontainers.image.source",
}


@dataclass
class Stage:
    """One ``FROM ... AS name`` stage: its base and instructions (base stages' too)."""

    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)


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


def _stages() -> dict[str, Stage]:
    """The stages by name, each holding its own and its base stages' instructions."""
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for name, args in _instructions():
        if name == "FROM":
            match = re.fullmatch(r"(\S+) AS (\S+)", args, flags=re.IGNORECASE)
            assert match, f"every stage is named: FROM {args}"
            base, stage_name = match.groups()
            inherited = list(stages[base].instructions) if base in stages else []
            current = stages[stage_name] = Stage(stage_name, base, inherited)
        elif current is not None:
            current.instructions.append((name, args))
    return stages


def _values(stage: Stage, instruction: str) -> list[str]:
    return [args for name, args in stage.instructions if name == instruction]


def _labels(stage: Stage) -> dict[str, str]:
    labels: dict[str, str] = {}
    for args in _values(stage, "LABEL"):
        for key, value in re.findall(r'(\S+?)="([^"]*)"', args):
            labels[key] = value
    return labels


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_stages_base_image_and_entry_point() -> None:
    stages = _stages()
    assert set(FINAL_STAGES) <= set(stages)
    assert ("ARG", "PYTHON_IMAGE=python:3.11-slim") in _instructions()
    assert list(stages)[-1] == "toposcope", "a build without --target makes the non-root image"
    for name in FINAL_STAGES:
        entry = _values(stages[name], "ENTRYPOINT")
        assert [json.loads(args) for args in entry][-1:] == [["toposcope"]], name
        # final images copy an installed environment; sources and wheels stay in the build
        assert not any(args.startswith("/src") for args in _values(stages[name], "COPY"))


def test_every_image_but_the_agent_runs_as_a_non_root_user() -> None:
    stages = _stages()
    for name, user in FINAL_STAGES.items():
        users = _values(stages[name], "USER")
        assert users and users[-1] == user, f"{name}: USER {users[-1:]}, expected {user}"


def test_oci_labels_on_every_image() -> None:
    stages = _stages()
    for name in FINAL_STAGES:
        labels = _labels(stages[name])
        assert labels.keys() >= OCI_LABELS, f"{name}: {sorted(OCI_LABELS - labels.keys())}"
        assert labels["org.opencontainers.image.licenses"] == _pyproject()["project"]["license"]
    titles = {_labels(stages[name])["org.opencontainers.image.title"] for name in FINAL_STAGES}
    assert len(titles) == len(FINAL_STAGES)


def test_every_packaged_folder_is_copied() -> None:
    copied: set[str] = set()
    for name, args in _instructions():
        if name == "COPY" and not args.startswith("--from"):
            copied.update(part.rstrip("/") for part in args.split()[:-1])
    package_dirs = set(_pyproject()["tool"]["setuptools"]["package-dir"].values())
    assert package_dirs | {"pyproject.toml", "README.md", "LICENSE"} <= copied
    assert all((REPO / path).exists() for path in copied)


def test_exporter_image_is_the_lean_install_and_the_others_have_everything() -> None:
    stages = _stages()
    runs = {name: " ".join(_values(stage, "RUN")) for name, stage in stages.items()}
    copy_from = {
        name: re.findall(r"--from=(\S+)", " ".join(_values(stages[name], "COPY")))
        for name in FINAL_STAGES
    }
    assert copy_from == {
        "exporter": ["install-exporter"],
        "toposcope": ["install-all"],
        "agent": ["install-all"],
    }
    assert ("ARG", "EXPORTER_EXTRAS=exporter") in stages["install-exporter"].instructions
    assert "[${EXPORTER_EXTRAS}]" in runs["install-exporter"]
    assert "[all]" in runs["install-all"]
    assert "[all]" not in runs["install-exporter"]
    # the exporter extra adds nothing to the base install (`pip install toposcope`)
    assert _pyproject()["project"]["optional-dependencies"]["exporter"] == []


def test_version_reaches_the_build_without_git_metadata() -> None:
    build = _stages()["build"]
    assert any("SETUPTOOLS_SCM_PRETEND_VERSION=${VERSION}" in env for env in _values(build, "ENV"))
    fallback = _pyproject()["tool"]["setuptools_scm"]["fallback_version"]
    assert f"VERSION={fallback}" in _values(build, "ARG")


def test_manifests_name_the_images_the_dockerfile_builds() -> None:
    """Each workload's image is one of the three stages, tagged with the documented version."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))
    fallback = _pyproject()["tool"]["setuptools_scm"]["fallback_version"]
    images = {image["name"]: image for image in kustomization["images"]}
    expected = {
        "toposcope-exporter": "exporter",
        "toposcope-agent": "agent",
        "toposcope": "toposcope",
    }
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not doc or doc["kind"] not in ("DaemonSet", "Deployment"):
                continue
            for container in doc["spec"]["template"]["spec"]["containers"]:
                name, _, tag = container["image"].rpartition(":")
                stage = expected[name.rpartition("/")[2]]
                assert stage in _stages(), stage
                assert tag == fallback, container["image"]
                assert images[name]["newTag"] == fallback
    docs = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    for stage in expected.values():
        assert f"--target {stage}" in docs
