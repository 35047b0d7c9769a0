"""The Kubernetes backend's plans against the contract server: the requests it sends are the plan.

For each action kind the plan is made, the action applied, and the requests the contract
server recorded (without their ``dryRun=All`` twins) are compared with the plan's steps;
the printed ``kubectl`` lines name the same objects and bodies, and real ``kubectl`` running
the printed script sends the same requests (the contract server serves kubectl's discovery).
Without an API server the plan is made from the action alone and says what it could not read.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.kube.fake_apiserver import Running
from toposcope.advisor.rmclients import make_resource_manager
from toposcope.kube.manager import KubernetesResourceManager
from toposcope.rm import ActionKind, ActionRequest
from toposcope.rm.plan import HttpStep, Plan, PlanHints, WorkloadHints
from toposcope.rm.plan_script import plan_lines


def backend(config: Path) -> KubernetesResourceManager:
    manager = make_resource_manager("kubernetes", options={"kubernetes_kubeconfig": str(config)})
    assert isinstance(manager, KubernetesResourceManager)
    return manager


def sent(apiserver: Running) -> list[tuple[str, str, object]]:
    """The writes the server received for real (not the dry runs)."""
    return [(w.method, w.path, w.body) for w in apiserver.fake.writes() if not w.dry_run]


def planned(plan: Plan) -> list[tuple[str, str, object]]:
    steps = [s for s in plan.steps if isinstance(s, HttpStep)]
    assert len(steps) == len(plan.steps)
    return [(s.method, s.url, s.body) for s in steps]


def kubectl_requests(plan: Plan) -> list[tuple[str, str, object]]:
    """The requests the printed kubectl lines make: (method, path, body)."""
    found = []
    for line in plan_lines(plan):
        if line.startswith("#"):
            continue
        words = shlex.split(line)
        if words[:2] == ["kubectl", "patch"]:
            resource, name = words[2], words[3]
            namespace = words[words.index("--namespace") + 1]
            plural, _, group = resource.partition(".")
            prefix = f"/apis/{group}/v1" if group else "/api/v1"
            path = f"{prefix}/namespaces/{namespace}/{plural}/{name}"
            sub = [w.split("=", 1)[1] for w in words if w.startswith("--subresource=")]
            path += f"/{sub[0]}" if sub else ""
            assert "--type=merge" in words
            found.append(("PATCH", path, json.loads(words[words.index("-p") + 1])))
        else:
            assert words[0] == "printf" and words[4:7] == ["kubectl", "create", "--raw"], words
            found.append(("POST", words[7], json.loads(words[2])))
    return found


@pytest.mark.parametrize(
    ("kind", "workload", "node", "requests"),
    [
        (ActionKind.PLACE, "ml/waiting", "gpu-2", 2),
        (ActionKind.MIGRATE, "ml/train-a", "gpu-2", 2),
        (ActionKind.RELEASE, "ml/notebook-a", "gpu-1", 2),
    ],
)
def test_apply_sends_exactly_the_plan(
    apiserver: Running, config: Path, kind: ActionKind, workload: str, node: str, requests: int
) -> None:
    manager = backend(config)
    request = ActionRequest(f"{kind}-1", kind, workload, node, gpus=[0])
    plan = manager.plan(request)
    assert plan.runnable and plan.checked and plan.unknown == ()
    assert len(plan.steps) == requests
    assert kubectl_requests(plan) == planned(plan)
    assert sent(apiserver) == []
    manager.apply(request)
    assert sent(apiserver) == planned(plan)
    assert apiserver.fake.invalid == []


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")
@pytest.mark.parametrize(
    ("kind", "workload", "node"),
    [
        (ActionKind.PLACE, "ml/waiting", "gpu-2"),
        (ActionKind.MIGRATE, "ml/train-a", "gpu-2"),
        (ActionKind.RELEASE, "ml/notebook-a", "gpu-1"),
    ],
)
def test_kubectl_runs_the_printed_plan(
    apiserver: Running, config: Path, tmp_path: Path, kind: ActionKind, workload: str, node: str
) -> None:
    plan = backend(config).plan(ActionRequest(f"{kind}-2", kind, workload, node, gpus=[0]))
    script = "set -eu\n" + "\n".join(plan_lines(plan)) + "\n"
    env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(tmp_path)}
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert sent(apiserver) == planned(plan)
    assert apiserver.fake.invalid == []


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")
def test_an_offline_placement_runs_only_on_a_pod_still_gated(
    apiserver: Running, config: Path, tmp_path: Path
) -> None:
    offline = make_resource_manager(
        "kubernetes", options={"kubernetes_kubeconfig": str(tmp_path / "none"), "plan_only": True}
    )
    assert isinstance(offline, KubernetesResourceManager)
    env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(tmp_path)}

    def run(workload: str) -> subprocess.CompletedProcess[str]:
        plan = offline.plan(ActionRequest("p", ActionKind.PLACE, workload, "gpu-2", gpus=[0]))
        script = "set -eu\n" + "\n".join(plan_lines(plan)) + "\n"
        return subprocess.run(
            ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
        )

    done = run("ml/waiting")
    assert done.returncode == 0, done.stderr
    placed = apiserver.fake.get("pods", "ml", "waiting")["spec"]
    assert "schedulingGates" not in placed
    assert "gpu-2" in json.dumps(placed["affinity"])
    # a pod that is not gated (already placed, or never opted in) is left as it was
    before = apiserver.fake.get("pods", "ml", "ungated")
    assert run("ml/ungated").returncode != 0
    assert apiserver.fake.get("pods", "ml", "ungated") == before


def test_a_refused_action_has_no_step_and_sends_nothing(apiserver: Running, config: Path) -> None:
    plan = backend(config).plan(ActionRequest("m", ActionKind.MIGRATE, "ml/shy", "gpu-2"))
    assert not plan.runnable and plan.steps == () and "not evicted" in plan.refused
    assert sent(apiserver) == []


def test_a_pin_is_refused_with_the_kubelet_change_and_a_pod_spec_patch(config: Path) -> None:
    request = ActionRequest("p", ActionKind.PIN, "train-a", "gpu-1", cpus=[0, 1, 2, 3])
    hints = PlanHints({"gpu-1/train-a": WorkloadHints("ml", "train-a", "main")})
    plan = backend(config).plan(request, hints)
    assert not plan.runnable and "cpuManagerPolicy: static" in plan.refused
    kubelet, pod = plan.notes
    assert '"cpuManagerPolicy": "static"' in kubelet and "single-numa-node" in kubelet
    assert '"cpu": "4"' in pod and '"name": "main"' in pod


def test_without_an_api_server_the_plan_says_what_it_could_not_read(tmp_path: Path) -> None:
    manager = make_resource_manager(
        "kubernetes",
        options={"kubernetes_kubeconfig": str(tmp_path / "missing"), "plan_only": True},
    )
    assert isinstance(manager, KubernetesResourceManager)
    hints = PlanHints({"gpu-2/trainer": WorkloadHints("ml", "trainer-0", "main")})
    move = manager.plan(ActionRequest("m", ActionKind.MIGRATE, "trainer", "gpu-2"), hints)
    assert move.runnable and move.steps == ()  # no eviction without its steering
    assert "the pod's owner was not read" in move.unknown[0] and "trainer" not in move.refused
    place = manager.plan(ActionRequest("p", ActionKind.PLACE, "ml/waiting", "gpu-2"))
    assert len(place.steps) == 2 and "the pod was not read" in place.unknown[0]
    release = manager.plan(ActionRequest("r", ActionKind.RELEASE, "ml/nb", "gpu-1", gpus=[0]))
    assert release.steps == () and "owner was not read" in release.unknown[0]
    script = "\n".join(line for p in (move, place, release) for line in plan_lines(p)) + "\n"
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0
