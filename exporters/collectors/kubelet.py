"""``kubelet`` collector: what the kubelet gave each container, from its pod-resources API.

On a Kubernetes node (``--kubelet.pod-resources-socket``, or the default socket present):

* ``toposcope_kubelet_device_allocation_info``: one row per device id a device plugin gave
  a container, with the container's ``namespace``/``pod``/``container``. For GPUs the device
  id is the GPU's UUID (``GPU-...``; ``GPU-...::N`` with time-slicing replicas; the index
  with the plugin's ``index`` id strategy), joined to NVML's GPUs so that ``gpu`` is the
  index every ``toposcope_gpu_*`` and dcgm-exporter series use: each GPU's holder is known
  even before the pod opens it. ``numa_node`` is the plugin's topology hint.
* ``toposcope_kubelet_exclusive_cpus``: the CPUs the CPU manager gave a container
  exclusively, counted per NUMA node (only Guaranteed containers with integer CPUs have any;
  where every other container may run is its cgroup's cpuset).
* ``toposcope_kubelet_allocatable``: what the node can hand out, per resource and NUMA node
  (devices, and ``cpu``), where the kubelet implements ``GetAllocatableResources`` (1.21+).
* the devices of ResourceClaims (Dynamic Resource Allocation), each container's devices'
  NUMA alignment and each claim's PCIe roots: see
  :mod:`~toposcope.exporters.collectors.kubelet_dra`.

Without a kubelet the collector has no data (success 0, as the gpu collector on a host
without GPUs); a kubelet that stops answering is logged once and asked again next scrape.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import Metric

from toposcope.catalogue import spec
from toposcope.errors import NoDataError
from toposcope.exporters.collectors.kubelet_dra import (
    DraWriters,
    Resolved,
    add_alignment,
    add_claim_roots,
    add_claimed,
    container_cpusets,
    resolve,
)
from toposcope.exporters.context import CollectorContext
from toposcope.exporters.exposition import FamilyWriter, plain_nonempty
from toposcope.exporters.kubelet_attach import attach_kubelet, workload_mapper
from toposcope.exporters.registry import CollectorEntry
from toposcope.host.cgroups import Cgroups
from toposcope.host.nvml import NvmlNotReady, NvmlUnavailable
from toposcope.host.podresources.mapper import KubeletMapper
from toposcope.host.podresources.records import DeviceAllocation
from toposcope.host.podresources.slices import SliceDirectory, open_slice_directory
from toposcope.host.podresources.source import KubeletSource
from toposcope.identity.workload import WorkloadIdentity
from toposcope.topology.model import Topology

#: resources whose device ids are NVIDIA GPU UUIDs or indices
GPU_RESOURCES = ("nvidia.com/gpu",)


def _nodes_label(nodes: Iterable[int]) -> str:
    return ",".join(str(node) for node in sorted(nodes))


def gpu_of(resource: str, device_id: str, by_uuid: dict[str, int], indices: set[int]) -> str:
    """The NVML index of the GPU a device id names, or ``""`` when it names none we see."""
    uuid = device_id.split("::", 1)[0]
    if uuid in by_uuid:
        return str(by_uuid[uuid])
    if resource in GPU_RESOURCES and device_id.isdigit() and int(device_id) in indices:
        return device_id
    return ""


class KubeletCollector:
    """Publishes the kubelet's allocations (see the module docstring)."""

    def __init__(
        self, source: KubeletSource, ctx: CollectorContext, slices: SliceDirectory | None = None
    ) -> None:
        self._source = source
        self._ctx = ctx
        self._slices = slices
        self._cgroups = Cgroups(ctx.config.paths)
        self._mapper: KubeletMapper | None = None

    def _mig_instances(self, parents: set[int]) -> dict[str, str]:
        """NVML's GPU instance id of each MIG device of the GPUs ``parents``, by its UUID."""
        gpu_source = self._ctx.nvml
        if not parents or gpu_source is None or gpu_source.devices is None:
            return {}
        nvml = gpu_source.devices
        try:
            devices = nvml.ensure_ready()
        except (NvmlUnavailable, NvmlNotReady):
            return {}
        return {
            instance.uuid: str(instance.gpu_instance_id)
            for device in devices
            if device.index in parents
            for instance in nvml.mig_instances(device)
            if instance.uuid
        }

    def _gpus(self) -> dict[str, int]:
        """NVML's GPUs by UUID; empty without NVML."""
        gpu_source = self._ctx.nvml
        if gpu_source is None or gpu_source.devices is None:
            return {}
        try:
            devices = gpu_source.devices.ensure_ready()
        except (NvmlUnavailable, NvmlNotReady):
            return {}
        return {d.uuid: d.index for d in devices if d.uuid}

    def collect(self) -> Iterator[Metric]:
        """Ask the kubelet (or reuse this scrape's answer) and yield the kubelet families."""
        answer = self._source.answer()
        if answer is None:
            raise NoDataError(self._source.reason or "no kubelet pod-resources answer")
        by_uuid = self._gpus()
        indices = set(by_uuid.values())
        topology = self._ctx.topology.get()
        cpu_node = topology.cpu_to_node()
        devices = FamilyWriter(spec("toposcope_kubelet_device_allocation_info"))
        exclusive = FamilyWriter(spec("toposcope_kubelet_exclusive_cpus"))
        allocatable = FamilyWriter(spec("toposcope_kubelet_allocatable"))
        dra = DraWriters.new()
        claimed = [k for c in answer.containers for k in (d.key for d in c.dynamic)]
        published = self._slices.devices(claimed) if self._slices is not None else {}
        cpusets = container_cpusets(
            self._cgroups,
            self._identify,
            {c.key for c in answer.containers if c.devices or c.dynamic},
        )
        mig_parents = {
            by_uuid[found.parent_uuid]
            for key in claimed
            if (found := published.get(key)) is not None and found.parent_uuid in by_uuid
        }
        instances = self._mig_instances(mig_parents)
        by_pod: dict[tuple[str, str], list[Resolved]] = {}
        for container in answer.containers:
            who = [container.namespace, container.pod, container.container]
            cpuset = cpusets.get(container.key)
            for group in container.devices:
                nodes = _nodes_label(group.numa_nodes)
                for device_id in group.device_ids:
                    gpu = gpu_of(group.resource_name, device_id, by_uuid, indices)
                    devices.add_metric([*who, group.resource_name, device_id, gpu, nodes], 1.0)
                    numa = _plugin_node(group, gpu, topology)
                    if gpu and numa is not None:
                        add_alignment(
                            container, "device_plugin", group.resource_name, device_id, gpu,
                            numa, topology, cpuset, dra,
                        )  # fmt: skip
            resolved = [
                resolve(d, published, by_uuid, topology, instances) for d in container.dynamic
            ]
            add_claimed(container, resolved, devices, dra)
            for item in resolved:
                if item.numa_node is not None:
                    add_alignment(
                        container, "dra", item.claimed.driver, item.claimed.device, item.gpu,
                        item.numa_node, topology, cpuset, dra,
                    )  # fmt: skip
            by_pod.setdefault((container.namespace, container.pod), []).extend(resolved)
            for node, count in sorted(_per_node(container.cpu_ids, cpu_node).items()):
                exclusive.add_metric([*who, node], float(count))
        add_claim_roots(by_pod, dra)
        node_total = answer.allocatable
        if node_total is not None:
            for (resource, nodes), count in sorted(_allocatable(node_total.devices).items()):
                allocatable.add_metric([resource, nodes], float(count))
            for node, count in sorted(_per_node(node_total.cpu_ids, cpu_node).items()):
                allocatable.add_metric(["cpu", node], float(count))
        yield from plain_nonempty([devices, exclusive, allocatable, *dra.all()])

    def _identify(self, cgroup: str) -> WorkloadIdentity:
        """The workloads mapper's name for a cgroup (built on first use)."""
        if self._mapper is None:
            self._mapper = workload_mapper(self._ctx)
        return self._mapper.identify(cgroup)


def _plugin_node(group: DeviceAllocation, gpu: str, topology: Topology) -> int | None:
    """A device-plugin GPU's NUMA node: the plugin's hint when it names one node, else the
    host topology's node of the GPU.
    """
    if len(group.numa_nodes) == 1:
        return group.numa_nodes[0]
    for found in topology.gpus:
        if str(found.index) == gpu:
            return found.numa_node
    return None


def _per_node(cpus: Iterable[int], cpu_node: dict[int, int]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for cpu in cpus:
        node = cpu_node.get(cpu)
        label = "" if node is None else str(node)
        counts[label] = counts.get(label, 0) + 1
    return counts


def _allocatable(groups: Iterable[DeviceAllocation]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for group in groups:
        key = (group.resource_name, _nodes_label(group.numa_nodes))
        counts[key] = counts.get(key, 0) + len(group.device_ids)
    return counts


def _build(ctx: CollectorContext) -> KubeletCollector:
    settings = ctx.config.dra_slices
    slices = open_slice_directory(settings) if settings is not None else None
    return KubeletCollector(attach_kubelet(ctx), ctx, slices)


ENTRY = CollectorEntry(
    name="kubelet",
    default_enabled=True,
    factory=_build,
    description="devices and exclusive CPUs the kubelet gave each pod (pod-resources API)",
)
