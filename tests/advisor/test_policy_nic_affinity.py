"""nic-affinity: ranks whose GPUs talk through a far RDMA NIC get the environment that keeps
them on their near NICs.

The node is a DGX A100 (the real ``nvidia-smi topo -m`` matrix in
tests/fixtures/nvidia-smi/dgx-a100.txt, which the gres.conf tests read too): GPUs 0 and 1 sit
behind one PCIe switch with ``mlx5_0`` and ``mlx5_1`` (PXB), GPUs 2 and 3 with ``mlx5_2`` and
``mlx5_3``, every other NIC is across the socket link (SYS). The GPU-to-NIC series are made
from that matrix by the exporter's own locality rule (:class:`NicLocality`), labelled as the
topology collector labels them; the workload series as the workloads collector labels them.
The model is built by the advisor's own builder from those samples.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from tests.advisor.test_dry_run import bash_n
from toposcope.advisor.loaders.base import LoadedData, QueryResult, Window
from toposcope.advisor.loaders.queries import queries
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.model_builder import build_model
from toposcope.advisor.policies import build
from toposcope.advisor.policies.nic_affinity import NicAffinity, NicAffinitySettings
from toposcope.errors import ConfigError
from toposcope.promql.results import Sample
from toposcope.topology.model import NicKind
from toposcope.topology.nic_locality import NicLocality
from toposcope.topology.nvidia_smi import build_from_nvidia_smi_topo

REPO = Path(__file__).resolve().parents[2]
DGX = REPO / "tests" / "fixtures" / "nvidia-smi" / "dgx-a100.txt"
NODE = "dgx-a100-1"
TARGET = {"instance": f"{NODE}:9847", "job": "toposcope", "node": NODE}
SLURM = {"workload": "slurm-job-4242", "slurm_job_id": "4242", "namespace": "", "pod": "",
         "container": ""}  # fmt: skip
POD = {"workload": "pod-trainer", "namespace": "research", "pod": "llm-0", "container": "trainer",
       "slurm_job_id": ""}  # fmt: skip
HDR = 25e9  # a 200 Gb/s HDR port, bytes per second


def link_samples() -> list[Sample]:
    """``toposcope_gpu_nic_link_info`` of the DGX A100 matrix, its mlx5 ports InfiniBand."""
    topo = build_from_nvidia_smi_topo(DGX.read_text())
    topo = replace(topo, nics=tuple(replace(n, kind=NicKind.INFINIBAND) for n in topo.nics))
    locality = NicLocality.of(topo)
    return [
        Sample({**TARGET, "gpu": str(gpu), "pci_bus_id": "", "nic": nic, "link": link,
                "nearest": "true" if locality.is_nearest(gpu, nic) else "false"}, 1.0)
        for (gpu, nic), link in sorted(locality.links.items())
    ]  # fmt: skip


def used(who: dict[str, str], nic: str, source: str, link: str, near: bool) -> Sample:
    labels = {**TARGET, **who, "nic": nic, "source": source, "link": link,
              "near": "true" if near else "false"}  # fmt: skip
    return Sample(labels, 1.0)


def loaded(
    who: dict[str, str],
    uses: list[Sample],
    *,
    gpus: tuple[int, ...] = (0, 1),
    traffic: dict[str, float] | None = None,
    owner: tuple[str, str] = ("", ""),
    links: list[Sample] | None = None,
    rail: float | None = None,
    down: tuple[str, ...] = (),
    cabled: tuple[str, ...] | None = None,
) -> LoadedData:
    info = {**TARGET, **who, "owner_kind": owner[0], "owner_name": owner[1]}
    ports = [
        Sample({**TARGET, "device": f"mlx5_{i}", "port": "1", "link_layer": "InfiniBand",
                "state": "DOWN" if f"mlx5_{i}" in down else "ACTIVE",
                "phys_state": "Polling" if f"mlx5_{i}" in down else "LinkUp"}, 1.0)
        for i in range(10)
    ]  # fmt: skip
    rates = [  # tx carries the traffic, rx half of it
        Sample({**TARGET, "device": nic, "port": "1", "direction": d}, v * share)
        for nic, v in (traffic or {}).items()
        for d, share in (("tx", 1.0), ("rx", 0.5))
    ]
    speeds = [Sample({**TARGET, "device": f"mlx5_{i}", "port": "1"}, HDR) for i in range(10)]
    rails = [] if rail is None else [Sample({"workload": who["workload"]}, rail)]
    answers = {
        "workload-info": [Sample(info, 1.0)],
        "workload-gpus": [Sample({**TARGET, **who, "gpu": str(g)}, 1.0) for g in gpus],
        "gpu-nic-links": link_samples() if links is None else links,
        "workload-nic-used": uses,
        "nic-ports": ports,
        "nic-port-traffic": rates,
        "nic-port-speed": speeds,
        "job-rail-aligned": rails,
        "fabric-node-ports": [
            Sample(
                {
                    "job": "fabric",
                    "instance": "fabric:9850",
                    "node": NODE,
                    "nic": nic,
                    "leaf": "leaf-1",
                    "block": "",
                },
                1.0,
            )
            for nic in cabled or ()
        ],
    }
    wanted = {q.name: q for q in queries(names=list(answers))}
    results = {
        name: QueryResult(name, wanted[name].metric, tuple(samples))
        for name, samples in answers.items()
    }
    return LoadedData("test", Window.parse("1h"), results)


def model_of(data: LoadedData) -> ClusterModel:
    return build_model(data)


def test_a_rank_told_to_use_the_other_sockets_hca_gets_its_near_ones() -> None:
    far = used(SLURM, "mlx5_2", "nccl_env", "SYS", near=False)
    model = model_of(loaded(SLURM, [far], traffic={"mlx5_2": 6e9}))
    nics = model.nics.node(NODE)
    assert nics is not None and nics.nearest(0) == ("PXB", ("mlx5_0", "mlx5_1"))
    evaluation = NicAffinity().evaluate(model)
    (rec,) = evaluation.recommendations
    assert rec.kind == "config" and rec.actions == ()
    assert rec.target.workload == "slurm-job-4242" and rec.target.gpus == (0, 1)
    assert rec.proposed["env"] == {
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
        "NCCL_NET_GDR_LEVEL": "PXB",
    }
    # measured: 6 GB/s of a 25 GB/s port through a path with 0.3 of the bandwidth
    assert rec.estimated_gain == pytest.approx(min(1.0, 0.24 / 0.3) * (1 - 0.3))
    assert "measured port load 0.240" in rec.gain_model and rec.confidence == 0.7
    series = {(e.series, e.labels.get("nic"), e.labels.get("link")) for e in rec.evidence}
    assert ("toposcope_gpu_nic_link_info", "mlx5_0", "PXB") in series
    assert ("toposcope_gpu_nic_link_info", "mlx5_2", "SYS") in series
    assert ("toposcope_workload_nic_used_info", "mlx5_2", "SYS") in series
    port = [e for e in rec.evidence if e.series == "toposcope_nic_port_bytes_total"]
    assert [e.value for e in port] == [6e9]
    slurm = rec.proposed["slurm"]
    assert "export_flag" not in slurm  # --export splits at the value's comma
    assert slurm["script_lines"][0] == "export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1"
    assert "kubernetes" not in rec.proposed


def test_without_port_traffic_the_assumed_network_share_is_used() -> None:
    far = used(SLURM, "mlx5_2", "nccl_env", "SYS", near=False)
    (rec,) = NicAffinity().evaluate(model_of(loaded(SLURM, [far]))).recommendations
    assert rec.estimated_gain == pytest.approx(0.25 * (1 - 0.3))
    assert rec.confidence == 0.5 and "assumed network share 0.25" in rec.gain_model


def test_a_rank_on_its_near_nic_by_its_own_hca_setting_is_left_alone() -> None:
    near = used(SLURM, "mlx5_0", "nccl_env", "PXB", near=True)
    evaluation = NicAffinity().evaluate(model_of(loaded(SLURM, [near])))
    assert evaluation.recommendations == () and evaluation.undecided == ()


def test_a_workload_that_uses_no_rdma_is_not_advised() -> None:
    evaluation = NicAffinity().evaluate(model_of(loaded(SLURM, [])))
    assert evaluation.recommendations == ()


def test_a_pod_without_nccl_ib_hca_gets_its_owners_template_patch() -> None:
    near = used(POD, "mlx5_0", "uverbs", "PXB", near=True)
    settings = NicAffinitySettings(rdma_resources=("mlx5_0=rdma/hca_a", "mlx5_1=rdma/hca_b"))
    data = loaded(POD, [near], owner=("Deployment", "llm"))
    (rec,) = NicAffinity(settings).evaluate(model_of(data)).recommendations
    assert rec.estimated_gain == pytest.approx(0.1 * 0.25 * 0.5) and rec.confidence == 0.3
    assert "without NCCL_IB_HCA" in rec.summary
    kube = rec.proposed["kubernetes"]
    assert (kube["owner_kind"], kube["owner_name"]) == ("Deployment", "llm")
    (container,) = kube["template_patch"]["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "trainer"
    assert {"name": "NCCL_IB_HCA", "value": "=mlx5_0:1,mlx5_1:1"} in container["env"]
    limits = {"rdma/hca_a": "1", "rdma/hca_b": "1"}
    assert container["resources"] == {"limits": limits, "requests": limits}
    assert rec.proposed["rdma_resources"] == limits
    assert "slurm" not in rec.proposed


def test_gpus_with_no_nic_nearer_than_the_socket_link_get_a_note() -> None:
    links = [
        Sample({**TARGET, "gpu": "0", "pci_bus_id": "", "nic": "mlx5_0", "link": "SYS",
                "nearest": "true"}, 1.0)
    ]  # fmt: skip
    far = used(SLURM, "mlx5_0", "rdma_cgroup", "SYS", near=True)
    evaluation = NicAffinity().evaluate(model_of(loaded(SLURM, [far], gpus=(0,), links=links)))
    assert evaluation.recommendations == ()
    (note,) = evaluation.undecided
    assert note.target == f"{NODE}/slurm-job-4242" and "no NCCL setting" in note.reason


def test_a_rail_aligned_job_keeps_its_rings_on_their_rails() -> None:
    far = used(SLURM, "mlx5_2", "nccl_env", "SYS", near=False)
    (rec,) = NicAffinity().evaluate(model_of(loaded(SLURM, [far], rail=1.0))).recommendations
    assert rec.proposed["env"]["NCCL_CROSS_NIC"] == "0"


def test_a_hostile_nic_name_never_reaches_a_value() -> None:
    links = [
        Sample({**TARGET, "gpu": "0", "pci_bus_id": "", "nic": "mlx5_0;reboot", "link": "PIX",
                "nearest": "true"}, 1.0),
        Sample({**TARGET, "gpu": "0", "pci_bus_id": "", "nic": "mlx5_9", "link": "SYS",
                "nearest": "false"}, 1.0),
    ]  # fmt: skip
    far = used(SLURM, "mlx5_9", "nccl_env", "SYS", near=False)
    evaluation = NicAffinity().evaluate(model_of(loaded(SLURM, [far], gpus=(0,), links=links)))
    assert evaluation.recommendations == ()
    (note,) = evaluation.undecided
    assert "cannot advise" in note.reason and "NIC name" in note.reason


def test_a_hostile_container_name_never_reaches_a_patch() -> None:
    who = {**POD, "container": "Trainer$(id)"}
    far = used(who, "mlx5_2", "nccl_env", "SYS", near=False)
    evaluation = NicAffinity().evaluate(model_of(loaded(who, [far])))
    assert evaluation.recommendations == ()
    assert "container name" in evaluation.undecided[0].reason


def test_the_resource_map_is_checked_with_the_settings() -> None:
    with pytest.raises(ConfigError, match="rdma_resources"):
        build(["nic-affinity"], {"nic-affinity": {"rdma_resources": "mlx5_0=rdma/a b"}})
    with pytest.raises(ConfigError, match="NIC=RESOURCE"):
        build(["nic-affinity"], {"nic-affinity": {"rdma_resources": "mlx5_0"}})
    (policy,) = build(["nic-affinity"], {"nic-affinity": {"rdma_resources": "mlx5_0=rdma/a"}})
    assert policy.settings.rdma_resources == ("mlx5_0=rdma/a",)


def test_below_min_gain_is_a_note() -> None:
    near = used(POD, "mlx5_0", "uverbs", "PXB", near=True)
    settings = NicAffinitySettings(min_gain=0.05)
    evaluation = NicAffinity(settings).evaluate(model_of(loaded(POD, [near])))
    assert evaluation.recommendations == ()
    assert "below min_gain" in evaluation.undecided[0].reason


def test_the_task_prolog_snippet_prints_the_exports_for_its_job_only(tmp_path: Path) -> None:
    far = used(SLURM, "mlx5_2", "nccl_env", "SYS", near=False)
    (rec,) = NicAffinity().evaluate(model_of(loaded(SLURM, [far]))).recommendations
    script = "\n".join(rec.proposed["slurm"]["task_prolog"]) + "\n"
    bash_n(script)
    path = tmp_path / "prolog.sh"
    path.write_text(script)

    def run(job: str, node: str) -> str:
        env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": job, "SLURMD_NODENAME": node}
        done = subprocess.run(
            ["sh", str(path)], env=env, capture_output=True, text=True, check=True
        )
        return done.stdout

    assert run("4242", NODE).splitlines() == [
        "export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1",
        "export NCCL_NET_GDR_LEVEL=PXB",
    ]
    assert run("4243", NODE) == "" and run("4242", "dgx-a100-2") == ""


def test_a_near_nic_whose_ports_are_down_is_never_advised() -> None:
    """mlx5_0 and mlx5_1 uncabled: GPUs 0 and 1 have no usable NIC nearer than the socket
    link, so the rank on mlx5_2 is where it can be, and no HCA list helps.
    """
    far = used(SLURM, "mlx5_2", "nccl_env", "SYS", near=False)
    model = model_of(loaded(SLURM, [far], down=("mlx5_0", "mlx5_1")))
    nics = model.nics.node(NODE)
    assert nics is not None and not nics.usable("mlx5_0") and nics.usable("mlx5_2")
    assert nics.nearest(0)[0] == "SYS" and "mlx5_0" not in nics.nearest(0)[1]
    evaluation = NicAffinity().evaluate(model)
    assert evaluation.recommendations == ()
    assert "no NCCL setting" in evaluation.undecided[0].reason


def test_one_uncabled_nic_of_a_pair_leaves_the_other_in_the_list() -> None:
    far = used(SLURM, "mlx5_2", "nccl_env", "SYS", near=False)
    model = model_of(loaded(SLURM, [far], down=("mlx5_1",)))
    (rec,) = NicAffinity().evaluate(model).recommendations
    assert rec.proposed["env"]["NCCL_IB_HCA"] == "=mlx5_0:1"
    assert rec.proposed["slurm"]["export_flag"] == (
        "--export=ALL,NCCL_IB_HCA==mlx5_0:1,NCCL_NET_GDR_LEVEL=PXB"
    )


def test_a_pod_given_the_far_hca_by_its_device_plugin_asks_for_the_near_ones_instead() -> None:
    far = used(POD, "mlx5_2", "uverbs", "SYS", near=False)
    pairs = ("mlx5_0=rdma/hca_a", "mlx5_1=rdma/hca_b", "mlx5_2=rdma/hca_c")
    data = loaded(POD, [far], owner=("StatefulSet", "llm"))
    policy = NicAffinity(NicAffinitySettings(rdma_resources=pairs))
    (rec,) = policy.evaluate(model_of(data)).recommendations
    assert rec.proposed["rdma_resources_dropped"] == ["rdma/hca_c"]
    (container,) = rec.proposed["kubernetes"]["template_patch"]["spec"]["template"]["spec"][
        "containers"
    ]
    assert container["resources"]["limits"] == {
        "rdma/hca_c": None,
        "rdma/hca_a": "1",
        "rdma/hca_b": "1",
    }


def test_hcas_the_fabric_leaves_uncabled_are_never_advised() -> None:
    """The fabric model cables only mlx5_0 of GPUs 0-1's pair (and the other socket's): the
    HCA list names it alone; with neither of the pair cabled no setting helps.
    """
    far = used(SLURM, "mlx5_2", "nccl_env", "SYS", near=False)
    model = model_of(loaded(SLURM, [far], cabled=("mlx5_0", "mlx5_2", "mlx5_3")))
    (rec,) = NicAffinity().evaluate(model).recommendations
    assert rec.proposed["env"]["NCCL_IB_HCA"] == "=mlx5_0:1"
    model = model_of(loaded(SLURM, [far], cabled=("mlx5_2", "mlx5_3")))
    evaluation = NicAffinity().evaluate(model)
    assert evaluation.recommendations == ()
    assert "no NCCL setting" in evaluation.undecided[0].reason


def test_a_fabric_file_says_which_hcas_are_cabled_where_the_metrics_do_not(
    tmp_path: Path,
) -> None:
    """The fabric file (docs/fabric.md's format) cables the other socket's pair only: the rank
    is as near as it can be. A file that cannot be read is one note for the whole run.
    """
    fabric = tmp_path / "fabric.yaml"
    fabric.write_text(
        "switches:\n  - name: leaf-1\n    nodes: [dgx-a100-1]\nnodes:\n  - name: dgx-a100-1\n"
        "    ports:\n      - {nic: mlx5_2, switch: leaf-1}\n      - {nic: mlx5_3, switch: leaf-1}\n"
    )
    far = used(SLURM, "mlx5_2", "nccl_env", "SYS", near=False)
    settings = NicAffinitySettings(fabric_file=str(fabric))
    evaluation = NicAffinity(settings).evaluate(model_of(loaded(SLURM, [far])))
    assert evaluation.recommendations == ()
    assert "no NCCL setting" in evaluation.undecided[0].reason
    # the metrics' own cabling wins over the file
    metrics = loaded(SLURM, [far], cabled=("mlx5_0", "mlx5_1"))
    (rec,) = NicAffinity(settings).evaluate(model_of(metrics)).recommendations
    assert rec.proposed["env"]["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    missing = NicAffinitySettings(fabric_file=str(tmp_path / "none.yaml"))
    evaluation = NicAffinity(missing).evaluate(model_of(loaded(SLURM, [far])))
    assert evaluation.recommendations == ()
    assert [n.target for n in evaluation.undecided] == ["*"]
