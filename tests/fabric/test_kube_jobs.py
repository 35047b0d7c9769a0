"""Multi-node jobs on Kubernetes: pods grouped by JobSet, LeaderWorkerSet group, PyTorchJob
and Kueue pod group, measured against the fabric of Kueue's documented Topology
(tests/fixtures/fabric: block-1 over rack-1 {node-1} and rack-2 {node-2}, block-2 over
rack-1 {node-3} and rack-3 {node-4}).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fabric.test_kubernetes_api import BLOCK, HOST, RACK
from tests.helpers import REPO
from tests.kube.fake_apiserver import kubeconfig, serve
from tests.kube.fake_topologies import TopologyApiServer
from toposcope.cli import main
from toposcope.errors import ConfigError
from toposcope.fabric.kube_jobs import JobLabel, job_placements, parse_job_label
from toposcope.fabric.kubernetes import read_kubernetes_files
from toposcope.fabric.spread import FabricIndex

FIXTURES = REPO / "tests" / "fixtures" / "fabric"
NODES = FIXTURES / "kubernetes-nodes.yaml"
TOPOLOGY = FIXTURES / "kueue-topology.yaml"


def pod(
    name: str,
    node: str,
    labels: dict[str, str] | None = None,
    gpus: int | str = 4,
    phase: str = "Running",
    owner: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A Pod object as ``kubectl get pods -o json`` prints it (only the fields read)."""
    metadata: dict[str, Any] = {"name": name, "namespace": "ml", "labels": labels or {}}
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": owner[0],
                "name": owner[1],
                "controller": True,
            }
        ]
    return {
        "metadata": metadata,
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
        },
        "status": {"phase": phase},
    }


JOBSET = {"jobset.sigs.k8s.io/jobset-name": "train", "kueue.x-k8s.io/queue-name": "team-a"}
LWS = "leaderworkerset.sigs.k8s.io/"
PODS = [
    pod("train-0", "node-1", JOBSET),
    pod("train-1", "node-3", JOBSET),
    pod("train-2", "node-4", JOBSET, phase="Pending"),  # not running: not counted
    pod("serve-0", "node-1", {f"{LWS}name": "serve", f"{LWS}group-index": "0"}, gpus=8),
    pod("serve-0-1", "node-2", {f"{LWS}name": "serve", f"{LWS}group-index": "0"}, gpus=8),
    pod("serve-1", "node-3", {f"{LWS}name": "serve", f"{LWS}group-index": "1"}, gpus=8),
    pod("bert-master-0", "node-2", owner=("PyTorchJob", "bert")),
    pod("bert-worker-0", "node-4", owner=("PyTorchJob", "bert")),
    pod("web-abc", "node-4", owner=("ReplicaSet", "web-6d4f")),  # not a multi-node kind
]


def test_pods_group_into_the_multi_node_jobs_and_their_spread() -> None:
    index = FabricIndex(read_kubernetes_files(NODES, TOPOLOGY))
    spreads = {s.job.workload: s for s in index.spreads(job_placements(PODS))}
    # the LeaderWorkerSet's group 1 runs on one node: not a multi-node job
    assert set(spreads) == {"ml:JobSet:train", "ml:LeaderWorkerSet:serve-0", "ml:PyTorchJob:bert"}
    train = spreads["ml:JobSet:train"]
    assert (train.job.scheduler, train.job.partition) == ("kubernetes", "team-a")
    assert (train.nodes, train.gpus) == (2, 8)
    # node-1 and node-3 are in different blocks, while block-1 alone holds two nodes
    assert train.domains == {"leaf": 2, "spine": 2} and train.needed == {"leaf": 2, "spine": 1}
    assert train.spread_beyond_need == {"spine": 1}
    assert (train.top_level, train.top_level_needed) == (2, 1)
    serve = spreads["ml:LeaderWorkerSet:serve-0"]
    assert (serve.gpus, serve.top_level, serve.spread_beyond_need) == (16, 1, {})
    assert serve.rail_aligned is None  # a pod does not say which GPU indices it got
    assert spreads["ml:PyTorchJob:bert"].spread_beyond_need == {"spine": 1}


def test_configured_labels_replace_the_defaults() -> None:
    labels = [parse_job_label("Training=example.com/run,example.com/attempt")]
    assert labels == [JobLabel("Training", ("example.com/run", "example.com/attempt"))]
    mine = {"example.com/run": "r7", "example.com/attempt": "2"}
    pods = [pod("a", "node-1", mine), pod("b", "node-2", mine), *PODS[:2]]
    (only,) = job_placements(pods, labels)
    assert only.workload == "ml:Training:r7-2"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("jobset=x", "is not a kind"),
        ("JobSet=", "is not a label key"),
        ("JobSet=a b", "is not a label key"),
    ],
)
def test_bad_job_labels_are_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_job_label(text)


def test_malformed_pods_are_named_by_index_and_field() -> None:
    with pytest.raises(ConfigError, match=r"pods\[1\].spec.containers\[0\].resources.limits"):
        job_placements([PODS[0], pod("x", "node-2", JOBSET, gpus="lots")])
    with pytest.raises(ConfigError, match=r"pods\[0\].spec.nodeName: '../etc'"):
        job_placements([pod("x", "../etc", JOBSET)])
    with pytest.raises(ConfigError, match=r"pods\[0\]: expected a mapping"):
        job_placements(["not a pod"])


def test_the_command_prints_each_jobs_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": PODS}))
    source = ["--kubernetes-nodes", str(NODES), "--kueue-topology", str(TOPOLOGY)]
    assert main(["fabric", "jobs", *source, "--pods", str(pods), "--format", "json"]) == 0
    found = {job["workload"]: job for job in json.loads(capsys.readouterr().out)}
    assert found["ml:JobSet:train"]["domains"] == {"leaf": 2, "spine": 2}
    assert found["ml:JobSet:train"]["domains_needed"]["spine"] == 1
    assert main(["fabric", "jobs", *source, "--pods", str(pods)]) == 0
    text = capsys.readouterr().out
    assert "ml:JobSet:train: 2 nodes, 8 GPUs" in text and "SPREAD" in text
    assert main(["fabric", "jobs", *source, "--pods", str(pods), "--job-label", "x=y"]) == 2
    assert "is not a kind" in capsys.readouterr().err
    listed = tmp_path / "pods.yaml"  # kubectl get pods -o yaml: the same jobs
    listed.write_text(yaml.safe_dump({"kind": "List", "items": PODS}))
    assert main(["fabric", "jobs", *source, "--pods", str(listed)]) == 0
    assert capsys.readouterr().out == text


def test_running_pods_from_the_api_server_as_prometheus_families(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = TopologyApiServer()
    fake.add_topology("default", BLOCK, RACK, HOST)
    for index, (block, rack) in enumerate([("b1", "r1"), ("b1", "r2"), ("b2", "r1")]):
        name = f"gpu{index + 1:02d}"
        fake.add_node(name, {BLOCK: block, RACK: rack, HOST: name})
    for name, node in (("train-0", "gpu01"), ("train-1", "gpu03")):
        fake.add({"apiVersion": "v1", "kind": "Pod", **pod(name, node, JOBSET)})
    served = serve(fake)
    try:
        config = tmp_path / "kubeconfig"
        config.write_text(kubeconfig(served.url), encoding="utf-8")
        command = ["fabric", "jobs", "--kubernetes", "--kubeconfig", str(config)]
        assert main([*command, "--pods-from-api", "--format", "prometheus"]) == 0
    finally:
        served.stop()
    text = capsys.readouterr().out
    job = 'partition="team-a",scheduler="kubernetes",workload="ml:JobSet:train"'
    assert f'toposcope_job_fabric_domains{{level="spine",{job}}} 2.0' in text
    assert 'toposcope_fabric_switch_info{level="leaf",parent="b1",switch="b1.r1"} 1.0' in text
    (listing,) = [r for r in fake.requests if r.path == "/api/v1/pods"]
    assert listing.query["fieldSelector"] == ["status.phase=Running"]
    assert main(["fabric", "jobs", "--kubernetes", "--pods", "x", "--pods-namespace", "ml"]) == 2
    assert "--pods-namespace goes with --pods-from-api" in capsys.readouterr().err
