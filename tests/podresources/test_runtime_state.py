"""Container names from the runtimes' OCI bundles: containerd and CRI-O state fixtures."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from tests.podresources.server import CRIO_STATE, NODE_ROOT
from toposcope.host.podresources.runtime_state import (
    DEFAULT_STATE_DIRS,
    ContainerNames,
    RuntimeState,
    names_from_annotations,
)

TRAINER = "a1b2c3d4e5f6" + "0" * 52
TRAINER_SANDBOX = "5a5a5a5a5a5a" + "2" * 52
POD_UID = "1a2b3c4d-5e6f-4a5b-8c7d-0123456789ab"
CRIO_UID = "0c1d2e3f-4a5b-4c6d-8e7f-a0b1c2d3e4f5"


def test_containerd_bundles_under_the_host_root() -> None:
    state = RuntimeState.under(NODE_ROOT)
    assert state.names(TRAINER) == ContainerNames(
        pod="llm-train-0", namespace="research", container="trainer", pod_uid=POD_UID
    )
    sandbox = state.names(TRAINER_SANDBOX)
    assert sandbox == ContainerNames(
        pod="llm-train-0", namespace="research", container="", pod_uid=POD_UID, sandbox=True
    )


def test_crio_bundles_with_labels_as_annotations_or_only_in_json() -> None:
    state = RuntimeState([CRIO_STATE])
    jupyter = state.names("d1d1d1d1d1d1" + "5" * 52)
    assert jupyter == ContainerNames("notebook-7f9c", "team-a", "jupyter", CRIO_UID)
    sidecar = state.names("e2e2e2e2e2e2" + "6" * 52)
    assert sidecar == ContainerNames("notebook-7f9c", "team-a", "sidecar", CRIO_UID)
    pause = state.names("c0c0c0c0c0c0" + "4" * 52)
    assert pause == ContainerNames("notebook-7f9c", "team-a", "", CRIO_UID, sandbox=True)


def test_defaults_are_containerd_then_crio_and_unknown_ids_give_none(tmp_path: Path) -> None:
    state = RuntimeState.under(tmp_path)
    assert state.directories == tuple(tmp_path / d.lstrip("/") for d in DEFAULT_STATE_DIRS)
    assert state.names(TRAINER) is None


def test_ids_that_are_not_container_ids_are_not_looked_up(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"annotations": {}}))
    state = RuntimeState([tmp_path / "state"])
    for bad in ("..", "../state", "abc", "A1B2C3D4E5F6", TRAINER + "/x"):
        assert state.names(bad) is None


def test_a_bundle_written_later_is_found_later(tmp_path: Path) -> None:
    state = RuntimeState([tmp_path])
    assert state.names(TRAINER) is None
    bundle = tmp_path / TRAINER
    bundle.mkdir()
    source = NODE_ROOT / "run/containerd/io.containerd.runtime.v2.task/k8s.io" / TRAINER
    (bundle / "config.json").write_bytes((source / "config.json").read_bytes())
    names = state.names(TRAINER)
    assert names is not None and names.container == "trainer"


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"[]", b'{"annotations": []}', b'{"annotations": {"x": "y"}}', b""],
)
def test_malformed_or_foreign_bundles_name_nothing(tmp_path: Path, content: bytes) -> None:
    (tmp_path / TRAINER).mkdir()
    (tmp_path / TRAINER / "config.json").write_bytes(content)
    assert RuntimeState([tmp_path]).names(TRAINER) is None


def test_half_named_annotations_name_nothing() -> None:
    assert names_from_annotations({"io.kubernetes.cri.sandbox-name": "p"}) is None
    assert names_from_annotations({"io.kubernetes.cri-o.Labels": "{broken"}) is None
    assert (
        names_from_annotations({"io.kubernetes.pod.name": 3, "io.kubernetes.pod.namespace": "n"})
        is None
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_state_directory_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bundle = tmp_path / TRAINER
    bundle.mkdir()
    (bundle / "config.json").write_text("{}")
    (bundle / "config.json").chmod(0)
    state = RuntimeState([tmp_path])
    with caplog.at_level(logging.WARNING):
        assert state.names(TRAINER) is None
        assert state.names(TRAINER) is None
    (warning,) = caplog.records
    assert "permission denied" in warning.getMessage()
