"""Naming Kubernetes workloads on the GPU node fixture: runtime state, exclusive CPUs, pods."""

from __future__ import annotations

import json
from pathlib import Path

from tests.podresources.server import NODE_ROOT, PodResourcesServer
from toposcope.config import HostPaths
from toposcope.host.podresources.client import PodResourcesClient
from toposcope.host.podresources.mapper import KubeletMapper
from toposcope.host.podresources.runtime_state import RuntimeState
from toposcope.host.podresources.source import KubeletSource
from toposcope.host.workload_identity import classify_cgroup

UID_A = "1a2b3c4d-5e6f-4a5b-8c7d-0123456789ab"
UID_B = "9f8e7d6c-5b4a-4c3d-9e2f-fedcba987654"
POD_A = "/kubepods.slice/kubepods-pod" + UID_A.replace("-", "_") + ".slice"
POD_B = (
    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
    + UID_B.replace("-", "_")
    + ".slice"
)
TRAINER = f"{POD_A}/cri-containerd-a1b2c3d4e5f6{'0' * 52}.scope"
TRAINER_PAUSE = f"{POD_A}/cri-containerd-5a5a5a5a5a5a{'2' * 52}.scope"
NGINX = f"{POD_B}/cri-containerd-b0b1b2b3b4b5{'1' * 52}.scope"
NGINX_PAUSE = f"{POD_B}/cri-containerd-6b6b6b6b6b6b{'3' * 52}.scope"
PATHS = HostPaths.under(NODE_ROOT)


def names(mapper: KubeletMapper, cgroup: str) -> tuple[str, str, str]:
    found = mapper.identify(cgroup)
    return (found.namespace, found.pod, found.container)


def kubelet_source(server: PodResourcesServer) -> KubeletSource:
    return KubeletSource(PodResourcesClient(str(server.socket)), max_age=0.0)


def test_the_runtime_state_names_every_container_and_sandbox() -> None:
    mapper = KubeletMapper(PATHS, RuntimeState.under(NODE_ROOT))
    assert names(mapper, TRAINER) == ("research", "llm-train-0", "trainer")
    assert names(mapper, TRAINER_PAUSE) == ("research", "llm-train-0", "")
    assert names(mapper, NGINX) == ("default", "nginx-debug", "nginx")
    assert names(mapper, NGINX_PAUSE) == ("default", "nginx-debug", "")
    # the path identity is kept: workload name, pod UID, QoS class
    trainer = mapper.identify(TRAINER)
    assert trainer.name == f"{UID_A}/a1b2c3d4e5f6"
    assert (trainer.pod_uid, trainer.qos_class) == (UID_A, "Guaranteed")
    # processes in the pod's own cgroup belong to the pod
    assert names(mapper, POD_A) == ("research", "llm-train-0", "")


def test_other_cgroups_are_classified_by_path_alone() -> None:
    mapper = KubeletMapper(PATHS, RuntimeState.under(NODE_ROOT))
    for cgroup in ("/system.slice/foo.service", "/docker/" + "c0ffee" * 6, "/"):
        assert mapper.identify(cgroup) == classify_cgroup(cgroup)


def test_without_runtime_state_the_kubelets_exclusive_cpus_name_guaranteed_containers(
    kubelet: PodResourcesServer,
) -> None:
    mapper = KubeletMapper(PATHS, RuntimeState([]), kubelet_source(kubelet))
    # the trainer's cgroup cpuset is 4-7, the CPUs the kubelet lists for it alone
    assert names(mapper, TRAINER) == ("research", "llm-train-0", "trainer")
    # its sandbox is then known to be the same pod
    assert names(mapper, TRAINER_PAUSE) == ("research", "llm-train-0", "")
    # a BestEffort container has no exclusive CPU: nothing ties it to a kubelet name
    assert names(mapper, NGINX) == ("", "", "")


def test_a_runtime_record_of_another_pod_uid_is_not_trusted(tmp_path: Path) -> None:
    source = NODE_ROOT / "run/containerd/io.containerd.runtime.v2.task/k8s.io"
    cid = "a1b2c3d4e5f6" + "0" * 52
    config = json.loads((source / cid / "config.json").read_text())
    config["annotations"]["io.kubernetes.cri.sandbox-uid"] = UID_B
    (tmp_path / cid).mkdir()
    (tmp_path / cid / "config.json").write_text(json.dumps(config))
    mapper = KubeletMapper(PATHS, RuntimeState([tmp_path]))
    assert names(mapper, TRAINER) == ("", "", "")


def test_names_found_stay_when_the_kubelet_goes_and_come_when_it_returns(
    socket_dir: Path,
) -> None:
    server = PodResourcesServer(socket_dir / "kubelet.sock")
    source = KubeletSource(PodResourcesClient(str(server.socket)), max_age=0.0)
    mapper = KubeletMapper(PATHS, RuntimeState([]), source, retry_after=0.0)
    # no kubelet yet: the pod sandbox is unnamed, and so is the trainer
    assert names(mapper, TRAINER) == ("", "", "")
    with server:
        assert names(mapper, TRAINER) == ("research", "llm-train-0", "trainer")
    assert source.answer() is None
    assert names(mapper, TRAINER) == ("research", "llm-train-0", "trainer")
