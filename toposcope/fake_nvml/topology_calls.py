"""The fake NVML's calls about how GPUs connect: NVLinks, MIG slices, CPU and NUMA locality,
and the PCIe path between two GPUs (the description's matrix, or derived from switches,
host bridges and NUMA nodes).
"""

from __future__ import annotations

import pynvml

from toposcope.fake_nvml.base import FakeNvmlBase, nvml_call, raise_nvml
from toposcope.fake_nvml.spec import MAX_MIG_DEVICES, FakeNvLink
from toposcope.fake_nvml.structs import FakeHandle, FakePciInfo, pci_info


class TopologyCalls(FakeNvmlBase):
    """NVLink state and peers, MIG devices, CPU and memory affinity, common PCIe ancestors."""

    # -- NVLink ----------------------------------------------------------------------------------

    def _link(self, handle: FakeHandle, link: int) -> FakeNvLink:
        """One NVLink of a full GPU (NOT_SUPPORTED without NVLink, INVALID_ARGUMENT past
        the last link).
        """
        gpu = self._full_gpu(handle)
        if gpu.nvlinks is None:
            raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(gpu.nvlinks):
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.nvlinks[link]

    @nvml_call("device")
    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:
        """``NVML_FEATURE_ENABLED`` (1) when the link is active."""
        active = self._link(handle, link).active
        return int(pynvml.NVML_FEATURE_ENABLED if active else pynvml.NVML_FEATURE_DISABLED)

    @nvml_call("device")
    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: FakeHandle, link: int) -> FakePciInfo:
        """PCI identity of the device at the far end of a link (a GPU or an NVSwitch)."""
        remote = self._link(handle, link).remote
        peer = next((g for g in self._gpus if g.pci_bus_id == remote), None)
        return pci_info(remote, peer.pci_device_id if peer else 0x1AF110DE)

    @nvml_call("device")
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: FakeHandle, link: int) -> int:
        """``NVML_NVLINK_DEVICE_TYPE_GPU``, ``_SWITCH`` or ``_UNKNOWN``."""
        remote = self._link(handle, link).remote
        if any(g.pci_bus_id == remote for g in self._gpus):
            return int(pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)
        if remote in self.spec.nvswitches:
            return int(pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)
        return int(pynvml.NVML_NVLINK_DEVICE_TYPE_UNKNOWN)

    # -- MIG ---------------------------------------------------------------------------------------

    @nvml_call("device")
    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        """``[current, pending]`` MIG mode (``NVML_DEVICE_MIG_ENABLE`` = 1)."""
        gpu = self._full_gpu(handle)
        if gpu.mig_mode is None:
            raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = 1 if gpu.mig_mode == "enabled" else 0
        return [mode, mode]

    @nvml_call("device")
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        """How many MIG devices the GPU can hold (7 on an A100)."""
        gpu = self._full_gpu(handle)
        if gpu.mig_mode is None:
            raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return MAX_MIG_DEVICES

    @nvml_call("device")
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, index: int) -> FakeHandle:
        """The handle of the ``index``-th MIG device; NOT_FOUND for an empty slot."""
        gpu = self._full_gpu(handle)
        if gpu.mig_mode != "enabled":
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not 0 <= index < MAX_MIG_DEVICES:
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(gpu.mig_instances):
            raise_nvml(pynvml.NVML_ERROR_NOT_FOUND)
        return FakeHandle(gpu.index, index)

    @nvml_call("device")
    def nvmlDeviceIsMigDeviceHandle(self, handle: FakeHandle) -> int:
        """1 for a MIG device handle."""
        return 1 if self._mig(handle) is not None else 0

    @nvml_call("device")
    def nvmlDeviceGetGpuInstanceId(self, handle: FakeHandle) -> int:
        """The GPU instance id of a MIG device (INVALID_ARGUMENT on a full GPU)."""
        mig = self._mig(handle)
        if mig is None:
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return mig.gi_id

    @nvml_call("device")
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: FakeHandle) -> FakeHandle:
        """The parent GPU of a MIG device."""
        if self._mig(handle) is None:
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(handle.index)

    # -- locality and topology ----------------------------------------------------------------

    @nvml_call("device")
    def nvmlDeviceGetCpuAffinity(self, handle: FakeHandle, cpu_set_size: int) -> list[int]:
        """Ideal CPUs as ``cpu_set_size`` 64-bit words (bit ``i`` of word ``w`` = CPU 64w+i)."""
        gpu = self._full_gpu(handle)
        if not gpu.cpu_affinity:
            raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)
        words = [0] * cpu_set_size
        for cpu in gpu.cpu_affinity:
            if cpu // 64 < cpu_set_size:
                words[cpu // 64] |= 1 << (cpu % 64)
        return words

    @nvml_call("device")
    def nvmlDeviceGetMemoryAffinity(
        self, handle: FakeHandle, node_set_size: int, scope: int
    ) -> list[int]:
        """Closest NUMA node(s) as ``node_set_size`` 64-bit words."""
        gpu = self._full_gpu(handle)
        if gpu.numa_node is None:
            raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)
        words = [0] * node_set_size
        if gpu.numa_node // 64 < node_set_size:
            words[gpu.numa_node // 64] = 1 << (gpu.numa_node % 64)
        return words

    @nvml_call("device")
    def nvmlDeviceGetNumaNodeId(self, handle: FakeHandle) -> int:
        """The GPU's NUMA node."""
        node = self._full_gpu(handle).numa_node
        return self._read(float(node) if node is not None else None)

    @nvml_call("device")
    def nvmlDeviceGetTopologyCommonAncestor(self, handle: FakeHandle, other: FakeHandle) -> int:
        """The closest common PCIe ancestor of two GPUs (``NVML_TOPOLOGY_*``)."""
        a = self._full_gpu(handle)
        b = self._gpu(other)
        if self._mig(other) is not None:
            raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if self.spec.matrix is not None:
            return self.spec.matrix[a.index][b.index]
        if a.index == b.index:
            return int(pynvml.NVML_TOPOLOGY_INTERNAL)
        if a.pcie_switch is not None and a.pcie_switch == b.pcie_switch:
            return int(pynvml.NVML_TOPOLOGY_SINGLE)
        if a.host_bridge is not None and a.host_bridge == b.host_bridge:
            return int(pynvml.NVML_TOPOLOGY_HOSTBRIDGE)
        if a.numa_node is not None and a.numa_node == b.numa_node:
            return int(pynvml.NVML_TOPOLOGY_NODE)
        return int(pynvml.NVML_TOPOLOGY_SYSTEM)
