"""``--resource-manager kubernetes`` against the contract server (tests/kube/fake_apiserver.py).

The backend is built as the advisor builds it (by its entry point, from a kubeconfig), applied
through the advisor's applier with its SQLite audit log, and reverted in process and by
``toposcope advise revert`` in another process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kube.cluster import budget
from tests.kube.fake_apiserver import Running
from toposcope.advisor.applying import Applier
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.recommendations import make_recommendation
from toposcope.advisor.rmclients import backend_names, make_resource_manager
from toposcope.kube.manager import KubernetesResourceManager
from toposcope.report.recommendation import (
    Evidence,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
)
from toposcope.rm import ActionKind, ActionRequest, ResourceManagerError, RetryLaterError

ACTOR = "tester@host"
KINDS = {
    ActionKind.MIGRATE: RecommendationKind.MIGRATE_JOB,
    ActionKind.PLACE: RecommendationKind.PLACE,
    ActionKind.RELEASE: RecommendationKind.RELEASE_IDLE,
}


def backend(config: Path, **options: object) -> KubernetesResourceManager:
    manager = make_resource_manager(
        "kubernetes", options={"kubernetes_kubeconfig": str(config), **options}
    )
    assert isinstance(manager, KubernetesResourceManager)
    return manager


def recommend(kind: ActionKind, workload: str, node: str) -> Recommendation:
    return make_recommendation(
        kind=KINDS[kind],
        policy="test",
        target=Target(node, workload),
        summary=f"{kind} {workload} {node}",
        current={},
        proposed={"node": node},
        evidence=[Evidence("toposcope_gpu_info", {"node": node}, 1.0)],
        estimated_gain=0.3,
        gain_model="test",
        confidence=0.7,
        risk=Risk.LOW,
        actions=[ActionRequest("", kind, workload, node)],
    )


def affinity_nodes(obj: dict[str, object]) -> list[list[str]]:
    text = json.dumps(obj)
    data = json.loads(text)
    spec = data["spec"]["template"]["spec"] if data["kind"] != "Pod" else data["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return [
        [v for e in t["matchExpressions"] for v in e["values"]] for t in terms["nodeSelectorTerms"]
    ]


def test_kubernetes_is_a_backend_with_its_options() -> None:
    assert "kubernetes" in backend_names()
    done = subprocess.run(
        [sys.executable, "-m", "toposcope.cli", "advise", "--help"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    for option in ("--kubeconfig", "--kube-max-evictions-per-node", "--kube-max-evictions"):
        assert option in done.stdout


def test_workloads_are_pods_and_gated_pods_are_pending(config: Path) -> None:
    views = {w.name: w for w in backend(config).workloads()}
    assert views["ml/train-a"].state == "running"
    assert views["ml/train-a"].allocation is not None
    assert views["ml/train-a"].allocation.node == "gpu-1"
    assert (views["ml/waiting"].state, views["ml/waiting"].gpus_requested) == ("pending", 1)
    assert sorted(n.name for n in backend(config).nodes()) == ["gpu-1", "gpu-2"]


def test_migrate_evicts_dry_run_first_steers_and_reverts(
    apiserver: Running, config: Path, tmp_path: Path
) -> None:
    fake = apiserver.fake
    audit = AuditLog(tmp_path / "audit.sqlite")
    applier = Applier(backend(config), audit, actor=ACTOR, backend="kubernetes")
    rec = recommend(ActionKind.MIGRATE, "ml/train-a", "gpu-2")
    (outcome,) = applier.apply([rec])
    assert outcome.result == "applied", outcome.detail
    assert fake.get("pods", "ml", "train-a")["metadata"]["deletionTimestamp"]
    assert affinity_nodes(fake.get("deployments", "ml", "train")) == [["gpu-2"]]
    writes = list(fake.writes())
    assert [w.dry_run for w in writes] == [True, False, True, False]
    assert writes[0].path.endswith("/pods/train-a/eviction")
    (row,) = audit.entries(rec.id)
    assert (row.state, row.irreversible, row.after and row.after.node) == (
        "succeeded",
        True,
        "gpu-2",
    )
    assert fake.invalid == []

    (undone,) = applier.revert(rec.id)
    assert undone.result == "reverted", undone.detail
    owner = fake.get("deployments", "ml", "train")
    assert "affinity" not in owner["spec"]["template"]["spec"]
    assert "toposcope.io/undo" not in owner["metadata"].get("annotations", {})
    assert [e.kind for e in audit.entries(rec.id)] == ["migrate", "unplace"]


def test_a_blocking_budget_is_retry_later_and_a_later_round_tries_again(
    apiserver: Running, config: Path, tmp_path: Path
) -> None:
    fake = apiserver.fake
    audit = AuditLog(tmp_path / "audit.sqlite")
    rec = recommend(ActionKind.MIGRATE, "ml/blocked-a", "gpu-2")
    (outcome,) = Applier(backend(config), audit, actor=ACTOR, backend="kubernetes").apply([rec])
    assert outcome.result == "retry-later"
    assert "PodDisruptionBudget allows no disruption now" in outcome.detail
    (row,) = audit.entries(rec.id)
    assert row.state == "retry-later"
    assert "deletionTimestamp" not in fake.get("pods", "ml", "blocked-a")["metadata"]
    assert "affinity" not in fake.get("deployments", "ml", "blocked")["spec"]["template"]["spec"]

    fake.get("poddisruptionbudgets", "ml", "blocked")["status"]["disruptionsAllowed"] = 1
    (again,) = Applier(backend(config), audit, actor=ACTOR, backend="kubernetes").apply([rec])
    assert again.result == "applied", again.detail
    assert audit.entries(rec.id)[0].state == "succeeded"
    assert fake.get("poddisruptionbudgets", "ml", "blocked")["status"]["disruptionsAllowed"] == 0


def test_several_budgets_are_refused(apiserver: Running, config: Path) -> None:
    apiserver.fake.add(budget("second", "train", 5))
    apiserver.fake.add(budget("third", "train", 5))
    with pytest.raises(ResourceManagerError, match="several PodDisruptionBudgets") as caught:
        backend(config).apply(ActionRequest("m", ActionKind.MIGRATE, "ml/train-a", "gpu-2"))
    assert caught.value.status == 409
    assert (
        "affinity"
        not in apiserver.fake.get("deployments", "ml", "train")["spec"]["template"]["spec"]
    )


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        ("bare", "bare pod"),
        ("scratch", "local storage"),
        ("daemon", "DaemonSet"),
        ("shy", "did not opt in"),
    ],
)
def test_the_descheduler_skip_rules_and_opt_in_hold(
    apiserver: Running, config: Path, pod: str, why: str
) -> None:
    with pytest.raises(ResourceManagerError, match=why):
        backend(config).apply(ActionRequest("m", ActionKind.MIGRATE, f"ml/{pod}", "gpu-2"))
    assert list(apiserver.fake.writes()) == []


def test_the_eviction_limits_are_retry_later(apiserver: Running, config: Path) -> None:
    manager = backend(config, kubernetes_max_evictions=0)
    with pytest.raises(RetryLaterError, match="at most"):
        manager.apply(ActionRequest("m", ActionKind.MIGRATE, "ml/train-a", "gpu-2"))
    assert list(apiserver.fake.writes()) == []


def test_place_narrows_a_gated_pod_and_removes_its_gate(apiserver: Running, config: Path) -> None:
    manager = backend(config)
    state = manager.apply(ActionRequest("p", ActionKind.PLACE, "ml/waiting", "gpu-2"))
    assert state.status == "succeeded" and state.irreversible is True
    placed = apiserver.fake.get("pods", "ml", "waiting")
    assert affinity_nodes(placed) == [["gpu-2"]]
    assert placed["spec"].get("schedulingGates") in (None, [])
    assert [w.dry_run for w in apiserver.fake.writes()] == [True, False, True, False]
    with pytest.raises(ResourceManagerError, match=r"no toposcope\.io/placement"):
        manager.apply(ActionRequest("q", ActionKind.PLACE, "ml/ungated", "gpu-2"))
    with pytest.raises(ResourceManagerError, match="cannot be undone"):
        manager.apply(ActionRequest("u", ActionKind.UNPLACE, "ml/waiting", "gpu-2"))
    assert apiserver.fake.invalid == []


def test_release_scales_to_zero_and_advise_revert_scales_back(
    apiserver: Running, config: Path, tmp_path: Path
) -> None:
    fake = apiserver.fake
    database = tmp_path / "audit.sqlite"
    applier = Applier(backend(config), AuditLog(database), actor=ACTOR, backend="kubernetes")
    rec = recommend(ActionKind.RELEASE, "ml/notebook-a", "gpu-1")
    (outcome,) = applier.apply([rec])
    assert outcome.result == "applied", outcome.detail
    assert fake.get("deployments", "ml", "notebook")["spec"]["replicas"] == 0
    refused = recommend(ActionKind.RELEASE, "ml/train-a", "gpu-1")
    (no,) = applier.apply([refused])
    assert no.result == "failed" and "did not opt in" in no.detail
    with pytest.raises(ResourceManagerError, match="never deletes a bare pod"):
        backend(config).apply(ActionRequest("b", ActionKind.RELEASE, "ml/bare", "gpu-1"))

    command = [
        sys.executable, "-m", "toposcope.cli", "advise", "revert", rec.id,
        "--resource-manager", "kubernetes", "--kubeconfig", str(config),
        "--audit-db", str(database),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert f"revert {rec.id}: reverted" in done.stdout
    assert fake.get("deployments", "ml", "notebook")["spec"]["replicas"] == 2
    log = subprocess.run(
        [sys.executable, "-m", "toposcope.cli", "advise", "log", "--audit-db", str(database)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "release ml/notebook-a" in log.stdout.replace("gpu-1/", "")
    assert fake.invalid == []


def test_pins_are_refused_with_the_kubelet_settings(config: Path) -> None:
    with pytest.raises(ResourceManagerError, match="cpuManagerPolicy: static") as caught:
        backend(config).apply(ActionRequest("p", ActionKind.PIN, "ml/train-a", "gpu-1", [0]))
    assert caught.value.status == 400


def test_a_bad_workload_name_is_refused_before_any_request(
    apiserver: Running, config: Path
) -> None:
    with pytest.raises(ResourceManagerError, match="namespace/pod"):
        backend(config).apply(ActionRequest("x", ActionKind.MIGRATE, "ml/../x", "gpu-2"))
    assert apiserver.fake.requests == []
