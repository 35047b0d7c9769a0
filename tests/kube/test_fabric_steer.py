"""Fabric placements on Kubernetes: Kueue's topology annotation, or gated pods' node affinity.

The recommendations are the real fabric-placement policy's, over a fabric read from node
labels at the levels of Kueue's documented Topology (block, rack, hostname). Against the
contract server (``tests/kube/fake_kueue.py``: JSON patches, CRD schemas, Kueue's rule that a
Workload's PodSets are fixed once quota is reserved) the backend's plan is made, applied, and
the requests the server recorded are compared with the plan's steps; the patched JobSet and
Workload validate against their published CRD schemas, the Job and every pod template with
kubernetes-validate. Real ``kubectl`` runs the printed script for the gated pods. Offline, the
dry run prints what it can and says what it could not read.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.advisor.builders import cluster, pcie8
from tests.kube.fake_apiserver import ApiFailure, Running, json_patch, kubeconfig, serve
from tests.kube.fake_kueue import KueueApiServer
from toposcope.advisor.applying import Applier
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.dry_run import planner_for, render_dry_run
from toposcope.advisor.model import ClusterModel, PendingWorkload, WorkloadModel
from toposcope.advisor.policies.fabric_placement import FabricPlacement
from toposcope.advisor.rmclients import make_resource_manager
from toposcope.errors import UsageError
from toposcope.fabric.kubernetes import LabeledNode, Topology, fabric_from_labels
from toposcope.fabric.located import Lines
from toposcope.kube.fabric_kueue import (
    PREFERRED,
    REQUIRED,
    choose_request,
    level_label,
    pointer,
)
from toposcope.kube.fabric_steer import parse_job, parse_levels
from toposcope.kube.manager import KubernetesResourceManager
from toposcope.kube.options import add_manager_options
from toposcope.report.recommendation import Recommendation, Report, RunInfo
from toposcope.rm import ResourceManagerError
from toposcope.rm.plan import HttpStep, Plan, PlanHints
from toposcope.rm.plan_script import plan_lines

BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
#: the levels of Kueue's documented Topology (site/static/examples/tas/sample-gpu-queues.yaml)
LEVELS = (BLOCK, RACK, HOST)
#: two blocks of two racks of three 8-GPU nodes: gpu-0..2 in rack r1 ... gpu-9..11 in r4
RACKS = {"r1": "b1", "r2": "b1", "r3": "b2", "r4": "b2"}
NODES = {f"gpu-{n}": (f"r{n // 3 + 1}", RACKS[f"r{n // 3 + 1}"]) for n in range(12)}
NS = "ml"
INDEX_LABEL = "kubernetes.io/job-completion-index"


def fabric_policy() -> FabricPlacement:
    nodes = [
        LabeledNode(name, {BLOCK: block, RACK: rack, HOST: name})
        for name, (rack, block) in NODES.items()
    ]
    fabric = fabric_from_labels(Topology("default", LEVELS), nodes, Lines("labels"))
    return FabricPlacement(replace(FabricPlacement().settings, defragment=False), fabric=fabric)


def model(held: dict[str, float | None], job: str, gpus: int) -> ClusterModel:
    """12 nodes; ``held`` ones run a job on all 8 GPUs with that time left (s)."""
    holders = [
        WorkloadModel(f"busy-{node}", node, gpus=tuple(range(8)), time_left_seconds=left)
        for node, left in held.items()
    ]
    return cluster([pcie8(name) for name in NODES], holders, pending=[PendingWorkload(job, gpus)])


def advice(held: dict[str, float | None], job: str, gpus: int) -> Recommendation:
    [rec] = fabric_policy().evaluate(model(held, job, gpus)).recommendations
    return rec


# -- the annotation -------------------------------------------------------------------------


def test_levels_map_onto_kueues_node_labels() -> None:
    assert level_label("leaf", LEVELS) == RACK and level_label("spine", LEVELS) == BLOCK
    assert level_label("node", LEVELS) == HOST and level_label("block", LEVELS) == RACK
    assert level_label("core", LEVELS) is None and level_label("fabric", LEVELS) is None
    assert level_label("node", (BLOCK, RACK)) is None
    assert level_label("level 1", (BLOCK, RACK)) == BLOCK


def test_the_policys_advice_becomes_required_preferred_or_a_held_requirement() -> None:
    fits = advice({}, "ml:JobSet:train", 24)
    assert fits.proposed["level"] == "leaf" and fits.proposed["tightest_level"] == "leaf"
    assert choose_request(fits.proposed, LEVELS).annotation == REQUIRED
    assert choose_request(fits.proposed, LEVELS).label == RACK
    # one node of every rack runs a job without an end: the job spreads over a block, and
    # Kueue is asked to try one rack first
    busy: dict[str, float | None] = {"gpu-0": None, "gpu-3": None, "gpu-6": None, "gpu-9": None}
    spread = advice(busy, "ml:JobSet:train", 24)
    assert spread.proposed["level"] == "spine" and "hold_level" not in spread.proposed
    wanted = choose_request(spread.proposed, LEVELS)
    assert (wanted.annotation, wanted.label) == (PREFERRED, RACK)
    # the jobs on r1 end in a minute: the policy holds it for a rack, Kueue requires one
    soon: dict[str, float | None] = {**busy, "gpu-0": 60.0}
    held = advice(soon, "ml:JobSet:train", 24)
    assert held.proposed["hold_level"] == "leaf"
    assert choose_request(held.proposed, LEVELS).annotation == REQUIRED
    big = advice({}, "ml:JobSet:train", 48)
    assert choose_request(big.proposed, LEVELS).label == BLOCK
    with pytest.raises(ValueError, match="no node label for the spine"):
        choose_request(big.proposed, (RACK, HOST))


def test_bad_names_and_levels_are_refused() -> None:
    assert parse_levels(f"{BLOCK}, {RACK},{HOST}") == LEVELS
    for text in ("", "a,a", "bad label", "x/" + "y" * 70):
        with pytest.raises(ValueError):
            parse_levels(text)
    assert parse_job("ml:JobSet:train") == ("ml", "JobSet", "train")
    for name in ("ml/train", "ml:Deployment:x", "ML:JobSet:x", "ml:JobSet:a;b", "ml:Job:"):
        with pytest.raises(ResourceManagerError):
            parse_job(name)
    parser = argparse.ArgumentParser()
    add_manager_options(parser)
    options = vars(parser.parse_args(["--kube-kueue-levels", "a,a"]))
    with pytest.raises(UsageError, match="--kube-kueue-levels"):
        make_resource_manager("kubernetes", options={**options, "plan_only": True})


def test_pointers_escape_slashes() -> None:
    assert pointer("a", REQUIRED, 0) == "/a/kueue.x-k8s.io~1podset-required-topology/0"
    doc = {"a": {"x/y": 1, "l": [1, 2]}}
    assert json_patch(doc, [{"op": "add", "path": "/a/x~1y", "value": 2}])["a"]["x/y"] == 2
    assert json_patch(doc, [{"op": "add", "path": "/a/l/1", "value": 9}])["a"]["l"] == [1, 9, 2]


# -- against the contract server ------------------------------------------------------------


def template(gpus: int = 8, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    container = {
        "name": "train",
        "image": "ghcr.io/example/train:1",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
    }
    meta: dict[str, Any] = {"labels": {"app": "train"}}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"restartPolicy": "Never", "containers": [container]}}


def jobset(name: str, *, suspend: bool = True) -> dict[str, Any]:
    replicated = [
        {"name": "driver", "replicas": 1,
         "template": {"spec": {"template": template(0, {PREFERRED: BLOCK})}}},
        {"name": "workers", "replicas": 1,
         "template": {"spec": {"parallelism": 3, "completions": 3,
                               "template": {"spec": template()["spec"]}}}},
    ]  # fmt: skip
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"suspend": suspend, "replicatedJobs": replicated},
    }


def workload(
    name: str, owner: dict[str, Any], *, reserved: bool = False, version: str = "v1beta2"
) -> dict[str, Any]:
    meta = owner["metadata"]
    reference = {
        "apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"],
        "uid": meta["uid"], "controller": True,
    }  # fmt: skip
    podsets = [
        {"name": "driver", "count": 1, "template": template(0),
         "topologyRequest": {"preferred": BLOCK, "podIndexLabel": INDEX_LABEL}},
        {"name": "workers", "count": 3, "template": template()},
    ]  # fmt: skip
    body: dict[str, Any] = {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NS, "ownerReferences": [reference]},
        "spec": {"queueName": "q", "podSets": podsets},
    }
    if reserved:
        condition = {
            "type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
            "message": "reserved", "lastTransitionTime": "2026-01-01T00:00:00Z",
        }  # fmt: skip
        body["status"] = {"conditions": [condition]}
    return body


def batch_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"suspend": True, "parallelism": 3, "completions": 3, "template": template()},
    }


def pytorch_job(name: str) -> dict[str, Any]:
    worker = template()
    del worker["metadata"]  # no metadata at all: the annotations' parent is added
    replicas = {
        "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template(0, {})},
        "Worker": {"replicas": 2, "restartPolicy": "OnFailure", "template": worker},
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": replicas},
    }


def gated_pod(name: str, job: str) -> dict[str, Any]:
    pod = template()
    pod["metadata"] = {
        "name": name,
        "namespace": NS,
        "labels": {"jobset.sigs.k8s.io/jobset-name": job},
    }
    pod["spec"]["schedulingGates"] = [{"name": "toposcope.io/placement"}]
    return {"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Pending"}, **pod}


@pytest.fixture(params=["v1beta2"])
def kueue(request: pytest.FixtureRequest) -> Iterator[Running]:
    fake = KueueApiServer(workload_version=request.param)
    fake.add_topology("default", *LEVELS)
    for name, (rack, block) in NODES.items():
        labels = {BLOCK: block, RACK: rack, HOST: name}
        fake.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                  "status": {"allocatable": {"nvidia.com/gpu": "8"}}})  # fmt: skip
    train = fake.add_job(jobset("train"))
    fake.add_job(workload("jobset-train-1a2b3", train, version=fake.workload_version))
    fake.add_job(jobset("running", suspend=False))
    admitted = fake.add_job(jobset("admitted"))
    fake.add_job(
        workload("jobset-admitted-4c5d6", admitted, reserved=True, version=fake.workload_version)
    )
    fake.add_job(batch_job("solo"))
    torch = fake.add_job(pytorch_job("torch"))
    fake.add_job(workload("pytorchjob-torch-7e8f9", torch, version=fake.workload_version))
    for index in range(3):
        fake.add(gated_pod(f"plain-{index}", "plain"))
    fake.add(gated_pod("other-0", "other"))
    running = serve(fake)
    try:
        yield running
    finally:
        running.stop()


def backend(running: Running, tmp_path: Path) -> KubernetesResourceManager:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig(running.url), encoding="utf-8")
    manager = make_resource_manager("kubernetes", options={"kubernetes_kubeconfig": str(path)})
    assert isinstance(manager, KubernetesResourceManager)
    return manager


def sent(running: Running) -> list[tuple[str, str, object]]:
    return [(w.method, w.path, w.body) for w in running.fake.writes() if not w.dry_run]


def planned(plan: Plan) -> list[tuple[str, str, object]]:
    steps = [s for s in plan.steps if isinstance(s, HttpStep)]
    assert len(steps) == len(plan.steps)
    return [(s.method, s.url, s.body) for s in steps]


def test_a_kueue_jobset_gets_the_annotation_and_its_workload_the_request(
    kueue: Running, tmp_path: Path
) -> None:
    manager = backend(kueue, tmp_path)
    rec = advice({}, "ml:JobSet:train", 24)
    plan = manager.plan_fabric(rec)
    assert not plan.refused, plan.refused
    assert sent(kueue) == []  # planning sends nothing
    state = manager.steer_fabric(rec)
    assert state.irreversible and "best fit" in state.note
    assert sent(kueue) == planned(plan)
    fake = kueue.fake
    assert isinstance(fake, KueueApiServer) and fake.invalid == []
    stored = fake.jobs[("jobsets", NS, "train")]
    for job in stored["spec"]["replicatedJobs"]:
        annotations = job["template"]["spec"]["template"]["metadata"]["annotations"]
        assert annotations == {REQUIRED: RACK}  # the driver's preferred one is replaced
    podsets = fake.jobs[("workloads", NS, "jobset-train-1a2b3")]["spec"]["podSets"]
    assert podsets[0]["topologyRequest"] == {"required": RACK, "podIndexLabel": INDEX_LABEL}
    assert podsets[1]["topologyRequest"] == {"required": RACK}
    lines = plan_lines(plan)
    assert any(line.startswith("kubectl patch jobsets.jobset.x-k8s.io train") for line in lines)
    assert any("--type=json" in line and "workloads.kueue.x-k8s.io" in line for line in lines)


def test_a_kueue_batch_job_is_annotated_and_validates(kueue: Running, tmp_path: Path) -> None:
    manager = backend(kueue, tmp_path)
    rec = advice({"gpu-0": None, "gpu-3": None, "gpu-6": None, "gpu-9": None}, "ml:Job:solo", 24)
    plan = manager.plan_fabric(rec)
    manager.steer_fabric(rec)
    assert sent(kueue) == planned(plan) and len(plan.steps) == 1
    fake = kueue.fake
    assert isinstance(fake, KueueApiServer) and fake.invalid == []
    stored = fake.jobs[("jobs", NS, "solo")]["spec"]["template"]["metadata"]
    assert stored["annotations"] == {PREFERRED: RACK}
    assert any("none yet" in text for text in plan.checked)  # no Workload created yet


def test_a_kueue_pytorchjob_gets_it_on_master_and_workers(kueue: Running, tmp_path: Path) -> None:
    manager = backend(kueue, tmp_path)
    rec = advice({}, "ml:PyTorchJob:torch", 32)
    plan = manager.plan_fabric(rec)
    manager.steer_fabric(rec)
    assert sent(kueue) == planned(plan) and len(plan.steps) == 2
    fake = kueue.fake
    assert isinstance(fake, KueueApiServer) and fake.invalid == []
    stored = fake.jobs[("pytorchjobs", NS, "torch")]["spec"]["pytorchReplicaSpecs"]
    for replica in ("Master", "Worker"):
        assert stored[replica]["template"]["metadata"]["annotations"] == {REQUIRED: BLOCK}
    podsets = fake.jobs[("workloads", NS, "pytorchjob-torch-7e8f9")]["spec"]["podSets"]
    assert [p["topologyRequest"]["required"] for p in podsets] == [BLOCK, BLOCK]


@pytest.mark.parametrize("kueue", ["v1beta2", "v1beta1"], indirect=True)
def test_pending_kueue_jobs_are_listed_and_the_policy_steers_them(
    kueue: Running, tmp_path: Path
) -> None:
    manager = backend(kueue, tmp_path)
    pending = {w.name: w.gpus_requested for w in manager.workloads() if w.state == "pending"}
    # suspended jobs have no pods: their Workloads stand for them; an admitted one is not
    # pending; the gated pods of a multi-node job without Kueue are one job, a job that fits
    # one node stays its pods
    assert pending == {
        "ml:JobSet:train": 24, "ml:PyTorchJob:torch": 24, "ml:JobSet:plain": 24,
        "ml/other-0": 8,
    }  # fmt: skip
    jobs = [PendingWorkload(n, g) for n, g in pending.items() if ":" in n]
    found = (
        fabric_policy()
        .evaluate(cluster([pcie8(name) for name in NODES], pending=jobs))
        .recommendations
    )
    assert {r.target.workload for r in found} == {
        "ml:JobSet:train", "ml:PyTorchJob:torch", "ml:JobSet:plain"
    }  # fmt: skip
    assert len({r.proposed["cell"] for r in found}) == 3  # one rack each
    for rec in found:
        manager.steer_fabric(rec)
    fake = kueue.fake
    assert isinstance(fake, KueueApiServer) and fake.invalid == []
    requests = [
        p["topologyRequest"]["required"]
        for key in (
            ("workloads", NS, "jobset-train-1a2b3"),
            ("workloads", NS, "pytorchjob-torch-7e8f9"),
        )
        for p in fake.jobs[key]["spec"]["podSets"]
    ]
    assert requests == [RACK] * 4
    plain = next(r for r in found if r.target.workload == "ml:JobSet:plain")
    for index in range(3):
        pod = fake.get("pods", NS, f"plain-{index}")
        assert pod["spec"]["schedulingGates"] == []
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert terms[0]["matchExpressions"][0]["values"] == sorted(plain.proposed["nodes"])
    version = fake.workload_version
    patched = {w.path for w in fake.writes() if "/workloads/" in w.path and not w.dry_run}
    assert patched == {
        f"/apis/kueue.x-k8s.io/{version}/namespaces/ml/workloads/{name}"
        for name in ("jobset-train-1a2b3", "pytorchjob-torch-7e8f9")
    }


def test_refusals_send_nothing(kueue: Running, tmp_path: Path) -> None:
    manager = backend(kueue, tmp_path)
    for workload_name, why in (
        ("ml:JobSet:running", "not suspended"),
        ("ml:JobSet:admitted", "reserved quota"),
        ("ml:JobSet:missing", "nothing to steer"),
        ("ml:PyTorchJob:missing", "nothing to steer"),
    ):
        rec = advice({}, workload_name, 24)
        plan = manager.plan_fabric(rec)
        assert why in plan.refused, plan.refused
        with pytest.raises(ResourceManagerError, match=why):
            manager.steer_fabric(rec)
    assert sent(kueue) == []


def test_a_conflicting_change_is_refused_whole(kueue: Running, tmp_path: Path) -> None:
    manager = backend(kueue, tmp_path)
    rec = advice({}, "ml:JobSet:train", 24)
    plan = manager.plan_fabric(rec)
    fake = kueue.fake
    assert isinstance(fake, KueueApiServer)
    fake.jobs[("jobsets", NS, "train")]["metadata"]["resourceVersion"] = "changed"
    with pytest.raises(ResourceManagerError):
        manager.api.execute(plan.steps[0])
    assert sent(kueue) == []


def test_gated_pods_without_kueue_get_the_chosen_nodes(kueue: Running, tmp_path: Path) -> None:
    manager = backend(kueue, tmp_path)
    rec = advice({}, "ml:JobSet:plain", 24)
    plan = manager.plan_fabric(rec)
    assert len(plan.steps) == 6  # three pods: affinity, then the gate
    manager.steer_fabric(rec)
    assert sent(kueue) == planned(plan)
    fake = kueue.fake
    assert fake.invalid == []
    nodes = sorted(rec.proposed["nodes"])
    assert {NODES[n][0] for n in nodes} == {rec.proposed["cell"]}  # one rack
    for index in range(3):
        pod = fake.get("pods", NS, f"plain-{index}")
        assert pod["spec"]["schedulingGates"] == []
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [{"key": HOST, "operator": "In", "values": nodes}]}]
    untouched = fake.get("pods", NS, "other-0")["spec"]["schedulingGates"]
    assert untouched == [{"name": "toposcope.io/placement"}]
    held = advice(
        {"gpu-0": 60.0, "gpu-3": None, "gpu-6": None, "gpu-9": None}, "ml:JobSet:other", 24
    )
    hold = manager.plan_fabric(held)
    assert hold.steps == () and not hold.refused and "keep their gate" in hold.notes[0]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_running_the_printed_script_sends_the_plan(kueue: Running, tmp_path: Path) -> None:
    manager = backend(kueue, tmp_path)
    plan = manager.plan_fabric(advice({}, "ml:JobSet:plain", 24))
    script = "\n".join(["set -eu", *plan_lines(plan)]) + "\n"
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "kubeconfig"), "HOME": str(tmp_path)}
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert sent(kueue) == planned(plan)


# -- offline --------------------------------------------------------------------------------


def test_the_offline_dry_run_prints_what_it_can_and_says_what_it_could_not_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    recs = (advice({}, "ml:Job:solo", 24), advice({}, "ml:JobSet:train", 24))
    run = RunInfo("2026-01-01T00:00:00+00:00", "test", "1h", ("fabric-placement",), 0.05)
    report = Report(run, recs)
    options = {"kubernetes_kueue_levels": ",".join(LEVELS)}
    script = render_dry_run(
        report, "kubernetes", planner_for("kubernetes", None, options), PlanHints()
    )
    assert "kubectl patch jobs.batch solo --namespace ml --type=merge -p" in script
    assert REQUIRED in script and RACK in script
    assert "# not checked: JobSet ml/train was not read" in script
    assert "# not checked: its pending Kueue Workload was not read" in script
    assert "# not checked: if the job is not Kueue's" in script
    done = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    bare = render_dry_run(report, "kubernetes", planner_for("kubernetes", None, {}), PlanHints())
    assert "give its levels with --kube-kueue-levels" in bare and "kubectl" not in bare


def test_the_contract_server_refuses_what_the_crds_refuse() -> None:
    fake = KueueApiServer()
    bad = jobset("bad")
    bad["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"] = {
        REQUIRED: 3
    }
    with pytest.raises(ApiFailure):
        fake.add_job(bad)
    unknown = workload("w", fake.add_job(jobset("ok")))
    unknown["spec"]["podSets"][1]["topologyRequest"] = {"required": RACK, "level": "x"}
    with pytest.raises(ApiFailure):
        fake.add_job(unknown)
    assert len(fake.invalid) == 2


def test_advise_apply_steers_a_fabric_placement_once_and_audits_it(
    kueue: Running, tmp_path: Path
) -> None:
    manager = backend(kueue, tmp_path)
    audit = AuditLog(tmp_path / "audit.sqlite")
    applier = Applier(manager, audit, actor="ops@host", backend="kubernetes")
    rec = advice({}, "ml:JobSet:train", 24)
    refused = advice({}, "ml:JobSet:admitted", 24)
    plan = manager.plan_fabric(rec)
    by_id = {o.recommendation_id: o for o in applier.apply([rec, refused])}
    assert by_id[rec.id].result == "applied", by_id[rec.id].detail
    assert by_id[refused.id].result == "failed" and "reserved quota" in by_id[refused.id].detail
    assert sent(kueue) == planned(plan)
    entry = audit.entry(f"{rec.id}-0")
    assert entry is not None and entry.state == "succeeded" and entry.irreversible
    failed = audit.entry(f"{refused.id}-0")
    assert failed is not None and failed.state == "failed"
    again = {o.recommendation_id: o for o in applier.apply([rec, refused])}
    assert again[rec.id].result == "skipped" and again[rec.id].detail == "already applied"
    assert again[refused.id].result == "skipped"
    assert sent(kueue) == planned(plan)  # nothing sent the second time
