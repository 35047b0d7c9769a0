"""dra-alignment: a Guaranteed pod's DRA GPU off the NUMA node of its exclusive CPUs.

The model is built by the advisor's own builder from samples shaped as the exporter's
``kubelet`` collector publishes them for the DRA fixture node (tests/podresources/
test_dra_exporter.py scrapes the same rows): the trainer's claim holds gpu-0 on NUMA node 0
while its exclusive CPUs are on node 1, and gpu-2 on node 1; the two sit under two PCIe roots.
The proposed constraint, put into the claim's template, validates against the Kubernetes 1.34
schemas.
"""

from __future__ import annotations

from kubernetes_validate import validate  # type: ignore[import-untyped]

from toposcope.advisor.loaders.base import LoadedData, QueryResult, Window
from toposcope.advisor.loaders.queries import queries
from toposcope.advisor.model_builder import build_model
from toposcope.advisor.policies.dra_alignment import DraAlignment
from toposcope.promql.results import Sample

TARGET = {"instance": "gpu-node-1:9847", "job": "toposcope", "node": "gpu-node-1"}
WHO = {"namespace": "research", "pod": "llm-train-0", "container": "trainer"}
CLAIM = {
    "dra_claim_namespace": "research",
    "dra_claim_name": "llm-train-0-gpus-x7k2p",
    "dra_driver_name": "gpu.nvidia.com",
    "dra_pool_name": "gpu-node-1",
}


def info(device: str, gpu: str, numa: str, root: str) -> Sample:
    return Sample(
        {**TARGET, **WHO, **CLAIM, "dra_device_name": device, "dra_mig_profile": "",
         "dra_mig_device_uuid": "", "gpu": gpu, "numa_node": numa, "pcie_root": root},
        1.0,
    )  # fmt: skip


def aligned(device: str, gpu: str, numa: str, against: str, value: float) -> Sample:
    return Sample(
        {**TARGET, **WHO, "source": "dra", "resource": "gpu.nvidia.com", "device_id": device,
         "gpu": gpu, "numa_node": numa, "against": against},
        value,
    )  # fmt: skip


def loaded(gpu0_aligned: float, roots: float, root0: str = "pci0000:3a") -> LoadedData:
    devices = [info("gpu-0", "0", "0", root0), info("gpu-2", "2", "1", "pci0000:7a")]
    alignment = [
        aligned("gpu-0", "0", "0", "exclusive_cpus", gpu0_aligned),
        aligned("gpu-0", "0", "0", "cpuset_cpus", gpu0_aligned),
        aligned("gpu-2", "2", "1", "exclusive_cpus", 1.0),
    ]
    spans = [
        Sample(
            {**TARGET, "namespace": "research", "pod": "llm-train-0",
             **{k: v for k, v in CLAIM.items() if k != "dra_pool_name"}},
            roots,
        )
    ]  # fmt: skip
    wanted = queries(names=["dra-devices", "dra-device-aligned", "dra-claim-pcie-roots"])
    results = {
        q.name: QueryResult(q.name, q.metric, tuple(samples))
        for q, samples in zip(wanted, (devices, alignment, spans), strict=True)
    }
    return LoadedData("test", Window.parse("1h"), results)


def test_a_dra_gpu_off_its_exclusive_cpus_gets_a_pcie_root_constraint() -> None:
    model = build_model(loaded(gpu0_aligned=0.0, roots=2.0))
    devices = {d.device: d for d in model.dra_devices}
    assert devices["gpu-0"].aligned == {"exclusive_cpus": False, "cpuset_cpus": False}
    assert devices["gpu-0"].claim_pcie_roots == 2 and devices["gpu-0"].gpu == 0
    (rec,) = DraAlignment().evaluate(model).recommendations
    assert rec.kind == "config" and rec.actions == ()
    assert rec.target.node == "gpu-node-1" and rec.target.gpus == (0, 2)
    assert rec.proposed["constraint"] == {"matchAttribute": "resource.kubernetes.io/pcieRoot"}
    assert rec.proposed["apply_with"] == "toposcope kube claim-advice --pod research/llm-train-0"
    assert "gpu-0 (off its exclusive cpus)" in rec.summary and "2 PCIe roots" in rec.summary
    assert rec.estimated_gain == 0.5 * 0.1 + 0.05
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two-gpus-pcieroot", "namespace": "research"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2},
                        }
                    ],
                    **rec.proposed["resource_claim_spec_patch"]["devices"],
                }
            }
        },
    }
    assert validate(template, "1.34", strict=True) == "1.34"


def test_numa_node_where_a_device_publishes_no_pcie_root() -> None:
    (rec,) = DraAlignment().evaluate(build_model(loaded(0.0, 1.0, root0=""))).recommendations
    assert rec.proposed["constraint"] == {"matchAttribute": "resource.kubernetes.io/numaNode"}


def test_an_aligned_claim_under_one_root_gives_nothing() -> None:
    assert DraAlignment().evaluate(build_model(loaded(1.0, 1.0))).recommendations == ()
