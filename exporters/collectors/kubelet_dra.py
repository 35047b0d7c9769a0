"""The ``kubelet`` collector's DRA devices and the NUMA alignment of every container's devices.

For each container of the kubelet's answer:

* each device it holds through a ResourceClaim (``dynamic_resources``) becomes a row of
  ``toposcope_kubelet_dra_device_info`` with dcgm-exporter's DRA label names, resolved through
  the node's ResourceSlices (:mod:`toposcope.host.podresources.slices`) to the GPU it is (a MIG
  device to its parent GPU) so that ``gpu`` joins every GPU series; a DRA GPU also gets a row
  of ``toposcope_kubelet_device_allocation_info`` (``resource`` the driver, ``device_id`` the
  DRA device name), as a device-plugin GPU has, so a pod's GPUs are found the same way
  whichever way they were allocated;
* each device with a known NUMA node (DRA devices, and device-plugin GPUs) is compared with
  the NUMA nodes of the container's exclusive CPUs and of its cgroup cpuset
  (:mod:`toposcope.host.device_alignment`);
* per pod and claim, the PCIe roots its devices of one driver span.

The container's cgroup is found by walking the kubepods cgroups of the cpuset hierarchy and
naming each through the workloads mapper (runtime state, then exclusive CPUs), once per scrape
and only when some container holds a device.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from toposcope.catalogue import spec
from toposcope.exporters.exposition import FamilyWriter
from toposcope.host.cgroups import Cgroups, CpuSet
from toposcope.host.device_alignment import alignments, device_numa
from toposcope.host.podresources.records import ClaimedDevice, ContainerAllocation
from toposcope.identity.workload import WorkloadIdentity, WorkloadKind, label_value
from toposcope.kubeapi.resourceslices import SliceDevice
from toposcope.topology.model import Topology

Key = tuple[str, str, str]
Devices = Mapping[Key, SliceDevice]


@dataclass
class DraWriters:
    """The families this module fills during one scrape."""

    info: FamilyWriter
    aligned: FamilyWriter
    distance: FamilyWriter
    roots: FamilyWriter

    @classmethod
    def new(cls) -> DraWriters:
        """Empty writers of the four families."""
        return cls(
            FamilyWriter(spec("toposcope_kubelet_dra_device_info")),
            FamilyWriter(spec("toposcope_kubelet_device_numa_aligned")),
            FamilyWriter(spec("toposcope_kubelet_device_numa_distance")),
            FamilyWriter(spec("toposcope_kubelet_dra_claim_pcie_roots")),
        )

    def all(self) -> list[FamilyWriter]:
        """The writers, in catalogue order."""
        return [self.info, self.aligned, self.distance, self.roots]


@dataclass(frozen=True)
class Resolved:
    """A claimed device and what the node's slices and topology say it is (``instance``: the
    GPU instance id of a MIG device, where NVML names it).
    """

    claimed: ClaimedDevice
    published: SliceDevice | None
    gpu: str
    numa_node: int | None
    instance: str = ""


def resolve(
    claimed: ClaimedDevice,
    devices: Devices,
    by_uuid: Mapping[str, int],
    topology: Topology,
    instances: Mapping[str, str] | None = None,
) -> Resolved:
    """``claimed`` resolved through the slices (``gpu`` the NVML index of its physical GPU,
    ``instances`` NVML's GPU instance id by MIG device UUID).
    """
    published = devices.get(claimed.key)
    index = by_uuid.get(published.gpu_uuid) if published is not None else None
    gpu = str(index) if index is not None else ""
    instance = ""
    if published is not None and published.parent_uuid:
        instance = (instances or {}).get(published.uuid, "")
    return Resolved(claimed, published, gpu, device_numa(published, topology, index), instance)


def _label(value: str) -> str:
    return label_value(value)


def add_claimed(
    container: ContainerAllocation,
    resolved: Iterable[Resolved],
    allocation: FamilyWriter,
    writers: DraWriters,
) -> None:
    """The info rows of a container's DRA devices (and allocation rows of its DRA GPUs)."""
    who = [container.namespace, container.pod, container.container]
    for item in resolved:
        claimed, published = item.claimed, item.published
        node = "" if item.numa_node is None else str(item.numa_node)
        roots = ",".join(published.pcie_roots) if published is not None else ""
        mig = (
            (published.mig_profile, published.uuid)
            if published and published.parent_uuid
            else ("", "")
        )
        names = [claimed.claim_namespace, claimed.claim_name, claimed.driver, claimed.pool]
        writers.info.add_metric(
            [*who, *map(_label, [*names, claimed.device]), *map(_label, mig), item.gpu,
             item.instance, node, roots if len(roots) <= 253 else ""],
            1.0,
        )  # fmt: skip
        if item.gpu:
            device = _label(claimed.device)
            allocation.add_metric([*who, _label(claimed.driver), device, item.gpu, node], 1.0)


def add_alignment(
    container: ContainerAllocation,
    source: str,
    resource: str,
    device_id: str,
    gpu: str,
    node: int,
    topology: Topology,
    cpuset: CpuSet | None,
    writers: DraWriters,
) -> None:
    """One device's alignment rows against each of the container's non-empty sets."""
    who = [container.namespace, container.pod, container.container]
    labels = [*who, source, _label(resource), _label(device_id), gpu, str(node)]
    found = alignments(
        topology,
        node,
        container.cpu_ids,
        cpuset.cpus if cpuset is not None else (),
        cpuset.mems if cpuset is not None else (),
    )
    for entry in found:
        writers.aligned.add_metric([*labels, entry.against.value], float(entry.aligned))
        writers.distance.add_metric(
            [*labels, entry.against.value, entry.tier.value], float(entry.distance)
        )


def add_claim_roots(
    resolved: Mapping[tuple[str, str], list[Resolved]], writers: DraWriters
) -> None:
    """Per (pod, claim, driver), the distinct PCIe roots of its devices that publish one."""
    spans: dict[tuple[str, str, str, str, str], set[str]] = {}
    for (namespace, pod), items in resolved.items():
        for item in items:
            if item.published is None or not item.published.pcie_roots:
                continue
            claimed = item.claimed
            key = (namespace, pod, claimed.claim_namespace, claimed.claim_name, claimed.driver)
            spans.setdefault(key, set()).update(item.published.pcie_roots)
    for key, roots in sorted(spans.items()):
        writers.roots.add_metric([*key[:2], *map(_label, key[2:])], float(len(roots)))


def container_cpusets(
    cgroups: Cgroups, identify: Callable[[str], WorkloadIdentity], wanted: set[Key]
) -> dict[Key, CpuSet]:
    """The effective cpuset of each wanted ``(namespace, pod, container)`` that runs here."""
    if not wanted:
        return {}
    layout = cgroups.layout()
    hierarchy = layout.controller("cpuset")
    if hierarchy is None:
        return {}
    found: dict[Key, CpuSet] = {}
    for cgroup, _ in cgroups.procs(hierarchy, keep=lambda path: "kubepods" in path):
        identity = identify(cgroup)
        if identity.kind != WorkloadKind.POD:
            continue
        key = (identity.namespace, identity.pod, identity.container)
        if key in wanted and key not in found:
            cpuset = cgroups.cpuset(cgroup, layout)
            if cpuset is not None:
                found[key] = cpuset
    return found


__all__ = [
    "DraWriters",
    "Resolved",
    "add_alignment",
    "add_claim_roots",
    "add_claimed",
    "container_cpusets",
    "resolve",
]
