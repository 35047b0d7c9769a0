"""Pinning advice as nri-plugins policy annotations, checked against that project's docs.

The annotation keys and balloon options toposcope proposes must be the ones the
topology-aware and balloons policies document (tests/fixtures/nri/, excerpts of the
containers/nri-plugins docs, cited there); the owner patch keeps a valid Deployment; and
``claim-advice --nri-policy`` prints it for the pod of the claim advice's cluster.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from kubernetes_validate import validate  # type: ignore[import-untyped]

from tests.helpers import FIXTURES
from tests.kube.fake_apiserver import merge_patch
from tests.kube.fake_dra import DraApiServer
from tests.kube.test_claim_advice import NS, POD, cluster, deployment
from toposcope.cli import main
from toposcope.kubeapi.nri_advice import (
    BALLOON,
    HINTS,
    NriAdviceError,
    NriPolicy,
    advise,
    container_key,
)

DOCS = (FIXTURES / "nri" / "resource-policy-annotations.md").read_text(encoding="utf-8")
#: every annotation key base the docs use with a per-container suffix
DOCUMENTED = set(re.findall(r"([a-z.-]+\.resource-policy\.nri\.io)/container\.", DOCS))
__all__ = ["cluster"]


def _base(key: str) -> str:
    return key.split("/", 1)[0]


def test_topology_aware_hints_from_devices_and_pod_resources_as_documented() -> None:
    advice = advise(NriPolicy.TOPOLOGY_AWARE, [("trainer", ""), ("loader", "0000:3b:00.0")])
    assert advice.annotations == {
        f"{HINTS}/container.trainer": "devices,pod-resources",
        f"{HINTS}/container.loader": "devices,pod-resources",
    }
    assert {_base(k) for k in advice.annotations} <= DOCUMENTED
    # the value is a comma-separated list of the documented hint types
    assert "devices,pod-resources" in DOCS
    assert "podResourceAPI: true" in DOCS and "podResourceAPI: true" in " ".join(advice.notes)


def test_balloons_a_type_close_to_the_gpu_and_the_container_annotated_into_it() -> None:
    advice = advise(NriPolicy.BALLOONS, [("trainer", "0000:3B:00.0"), ("sidecar", "")])
    assert advice.annotations == {f"{BALLOON}/container.trainer": "toposcope-gpu-3b-00-0"}
    assert {_base(k) for k in advice.annotations} <= DOCUMENTED
    (balloon,) = advice.balloon_types
    assert balloon == {
        "name": "toposcope-gpu-3b-00-0",
        "preferCloseToDevices": ["/sys/bus/pci/devices/0000:3b:00.0"],
        "preferNewBalloons": True,
    }
    for option in ("preferCloseToDevices", "preferNewBalloons"):
        assert option in DOCS
    assert any("sidecar" in note for note in advice.notes)


def test_the_owner_patch_keeps_a_valid_deployment() -> None:
    advice = advise(NriPolicy.BALLOONS, [("trainer", "0000:3b:00.0")])
    patched = merge_patch(deployment(), advice.owner_patch("42"))
    assert validate(patched, "1.34", strict=True) == "1.34"
    annotations = patched["spec"]["template"]["metadata"]["annotations"]
    assert annotations[f"{BALLOON}/container.trainer"] == "toposcope-gpu-3b-00-0"


def test_a_container_name_too_long_for_a_key_is_refused() -> None:
    with pytest.raises(NriAdviceError, match="63"):
        container_key(HINTS, "c" * 60)


def test_claim_advice_prints_the_annotation_patch(
    cluster: tuple[DraApiServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, config = cluster
    code = main(["kube", "claim-advice", "--pod", f"{NS}/{POD}", "--kubeconfig", str(config),
                 "--nri-policy", "balloons", "--format", "json"])  # fmt: skip
    assert code == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["nri"]["annotations"] == {f"{BALLOON}/container.trainer": "toposcope-gpu-3b-00-0"}
    code = main(["kube", "claim-advice", "--pod", f"{NS}/{POD}", "--kubeconfig", str(config),
                 "--nri-policy", "topology-aware"])  # fmt: skip
    script = capsys.readouterr().out
    assert code == 0
    assert f"{HINTS}/container.trainer" in script and "kubectl patch deployments.apps" in script
