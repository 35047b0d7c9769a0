"""The advisor's view of DRA devices: which pod holds which device of which claim, where it
sits, and whether it is aligned with the container's CPUs.

Built from the exporter's ``kubelet`` collector series (``toposcope_kubelet_dra_device_info``
joined with ``toposcope_kubelet_device_numa_aligned{source="dra"}`` on pod, container and
device, and ``toposcope_kubelet_dra_claim_pcie_roots``), per node as the model builder names
nodes. A device is misaligned against a set when it was never aligned in the window (the
highest ``aligned`` sample is 0).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from toposcope.advisor.loaders.base import LoadedData

#: what names a series' node (the model builder's NodeNamer)
Namer = Callable[[Mapping[str, str]], str]


@dataclass(frozen=True)
class DraDevice:
    """One device a container holds through a ResourceClaim, as the node's exporter saw it.

    ``aligned`` maps a set (``exclusive_cpus``, ``cpuset_cpus``, ``cpuset_mems``) to whether
    the device was on one of its NUMA nodes during the window; ``claim_pcie_roots`` is how many
    PCIe roots the claim's devices of this driver span on the node (0: unknown).
    """

    node: str
    namespace: str
    pod: str
    container: str
    claim_namespace: str
    claim: str
    driver: str
    device: str
    gpu: int | None = None
    numa_node: int | None = None
    pcie_root: str = ""
    aligned: Mapping[str, bool] = field(default_factory=dict)
    claim_pcie_roots: int = 0

    @property
    def pod_key(self) -> tuple[str, str, str]:
        """``(node, namespace, pod)``."""
        return (self.node, self.namespace, self.pod)


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def read_dra_devices(data: LoadedData, namer: Namer) -> tuple[DraDevice, ...]:
    """Every DRA device of the answers, with its alignment and its claim's PCIe roots."""
    aligned: dict[tuple[str, str, str, str, str, str], dict[str, bool]] = {}
    for s in data.samples("dra-device-aligned"):
        if s.labels.get("source") != "dra":
            continue
        labels = s.labels
        key = (
            namer(labels),
            labels.get("namespace", ""),
            labels.get("pod", ""),
            labels.get("container", ""),
            labels.get("resource", ""),
            labels.get("device_id", ""),
        )
        aligned.setdefault(key, {})[labels.get("against", "")] = s.value >= 1.0
    roots: dict[tuple[str, str, str, str, str, str], int] = {}
    for s in data.samples("dra-claim-pcie-roots"):
        labels = s.labels
        key = (
            namer(labels),
            labels.get("namespace", ""),
            labels.get("pod", ""),
            labels.get("dra_claim_namespace", ""),
            labels.get("dra_claim_name", ""),
            labels.get("dra_driver_name", ""),
        )
        roots[key] = max(roots.get(key, 0), int(s.value))
    found: list[DraDevice] = []
    for s in data.samples("dra-devices"):
        labels = s.labels
        node = namer(labels)
        who = (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
        driver, device = labels.get("dra_driver_name", ""), labels.get("dra_device_name", "")
        claim = (labels.get("dra_claim_namespace", ""), labels.get("dra_claim_name", ""))
        found.append(
            DraDevice(
                node,
                *who,
                *claim,
                driver,
                device,
                gpu=_int(labels.get("gpu")),
                numa_node=_int(labels.get("numa_node")),
                pcie_root=labels.get("pcie_root", ""),
                aligned=aligned.get((node, *who, driver, device), {}),
                claim_pcie_roots=roots.get((node, who[0], who[1], *claim, driver), 0),
            )
        )
    return tuple(sorted(found, key=lambda d: (d.pod_key, d.container, d.claim, d.device)))


__all__ = ["DraDevice", "Namer", "read_dra_devices"]
