"""What the kubelet's pod-resources API answers, as plain typed records.

The client (:mod:`toposcope.host.podresources.client`) turns the gRPC messages
into these, so that nothing else in the exporter imports grpcio or protobuf, which are the
optional ``kubernetes`` extra.

Meaning of the fields, as the kubelet fills them:

* ``cpu_ids`` lists only the CPUs the CPU manager (``static`` policy) gave a container
  *exclusively* (Guaranteed pods with integer CPU requests). Every other container's list is
  empty although it runs on the shared pool: where a container's threads may run is its
  cgroup's cpuset, never this list.
* ``devices`` are the device plugins' allocations: for ``nvidia.com/gpu`` the ids are GPU
  UUIDs (``GPU-...``), ``GPU-...::N`` with time-slicing replicas, ``MIG-...`` for MIG
  devices, or indices with the plugin's ``index`` id strategy. ``numa_nodes`` is the
  plugin's topology hint (empty when it gives none).
* ``memory`` is the memory manager's allocation (``Static`` policy); kubelets before 1.22
  never send it, and with the ``None`` policy it is empty too. Empty means *unknown*, not
  zero.
* ``dynamic`` are the devices of the ResourceClaims a container uses (Dynamic Resource
  Allocation, ``dynamic_resources``; kubelets before 1.27, or with the
  ``KubeletPodResourcesDynamicResources`` gate off, never send them). A device is named by
  its driver, pool and device name, as the node's ResourceSlices publish it; what it is (a
  GPU's UUID, its PCIe root, its NUMA node) is read from those slices, not from here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceAllocation:
    """Devices of one resource (``nvidia.com/gpu``) and the NUMA node(s) they sit on."""

    resource_name: str
    device_ids: tuple[str, ...]
    numa_nodes: tuple[int, ...] = ()


@dataclass(frozen=True)
class MemoryAllocation:
    """Memory of one type (``memory``, ``hugepages-2Mi``) and the NUMA node(s) it is on."""

    memory_type: str
    size_bytes: int
    numa_nodes: tuple[int, ...] = ()


@dataclass(frozen=True)
class ClaimedDevice:
    """One device of a ResourceClaim a container uses (``DynamicResource``/``ClaimResource``).

    ``driver``, ``pool`` and ``device`` name it uniquely (a ResourceSlice's ``spec.driver``,
    ``spec.pool.name`` and ``spec.devices[].name``); ``cdi_devices`` are the CDI names the
    driver injected, ``share_id`` is set for a device shared by consumable capacity.
    """

    claim_namespace: str
    claim_name: str
    driver: str
    pool: str
    device: str
    cdi_devices: tuple[str, ...] = ()
    share_id: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        """``(driver, pool, device)``: how a ResourceSlice names the device."""
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True)
class ContainerAllocation:
    """What the kubelet assigned to one container of one pod (see the module docstring)."""

    namespace: str
    pod: str
    container: str
    devices: tuple[DeviceAllocation, ...] = ()
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[MemoryAllocation, ...] = ()
    dynamic: tuple[ClaimedDevice, ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        """``(namespace, pod, container)``: how the kubelet names a container."""
        return (self.namespace, self.pod, self.container)


@dataclass(frozen=True)
class Allocatable:
    """What the node can hand out (``GetAllocatableResources``, Kubernetes >= 1.21)."""

    devices: tuple[DeviceAllocation, ...] = ()
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[MemoryAllocation, ...] = ()


@dataclass(frozen=True)
class PodResources:
    """One answer of the kubelet: every container's allocation and the node's allocatable.

    ``allocatable`` is ``None`` when the kubelet does not implement
    ``GetAllocatableResources`` (before 1.21, or the feature gate off).
    """

    containers: tuple[ContainerAllocation, ...]
    allocatable: Allocatable | None = None

    def find(self, namespace: str, pod: str, container: str) -> ContainerAllocation | None:
        """The allocation of one container, or ``None`` when the kubelet does not list it."""
        for allocation in self.containers:
            if allocation.key == (namespace, pod, container):
                return allocation
        return None
