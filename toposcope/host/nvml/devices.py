"""The shared NVML device layer: snapshots, GPU processes and the GPU topology.

:class:`NvmlDevices` is what the ``gpu`` collector, the workloads collector's GPU process
source, the ``toposcope topology`` command and the background threads share.
"""

from __future__ import annotations

from typing import Any

import pynvml

from toposcope.host.nvml.errors import DeviceUnhealthy, NvmlNotReady, NvmlUnavailable
from toposcope.host.nvml.records import GpuDevice, GpuProcess, bus_id_of
from toposcope.host.nvml.snapshots import SnapshotReader
from toposcope.topology.model import Gpu, GpuLink
from toposcope.topology.nvml import NvLinkRemote, NvmlGpuRecord, build_gpu_topology

_COMPUTE_PROCESS_CALLS = (
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2",
)
_GRAPHICS_PROCESS_CALLS = (
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
)


class NvmlDevices(SnapshotReader):
    """The shared NVML device layer: initialisation with back-off, the helper, snapshots,
    GPU processes and the GPU topology.

    ``backend`` is the ``pynvml`` module or the fake; ``topology`` returns the sysfs
    topology used to cross-check locality (``CollectorContext.topology.get``); ``clock`` is a
    monotonic clock for back-off and sample ages. NVML is initialised lazily on the first
    :meth:`ensure_ready`. Thread-safe: the scrape, the workloads collector and the
    background threads share one instance.
    """

    # -- processes (the workloads collector's GPU source) ----------------------------------

    def gpu_processes(self) -> list[GpuProcess]:
        """Processes holding memory on every healthy GPU (compute and graphics merged).

        Empty when NVML is unavailable or re-initialising: GPU attribution is then missing
        from the workloads collector's output, which otherwise goes on.
        """
        try:
            devices = self.ensure_ready()
        except (NvmlUnavailable, NvmlNotReady):
            return []
        processes: list[GpuProcess] = []
        for device in devices:
            if device.handle is None:
                continue
            try:
                processes.extend(self._processes(device))
            except DeviceUnhealthy as exc:
                self._note_down(device.index, exc)
            except NvmlNotReady:
                return []
        return processes

    def _processes(self, device: GpuDevice) -> list[GpuProcess]:
        used_by_pid: dict[int, int | None] = {}
        for calls in (_COMPUTE_PROCESS_CALLS, _GRAPHICS_PROCESS_CALLS):
            found = self._first(
                calls, device.handle, gpu=device.index, generation=device.generation
            )
            for process in found or ():
                pid = int(process.pid)
                raw = getattr(process, "usedGpuMemory", None)
                used = int(raw) if raw is not None else None
                if pid not in used_by_pid:
                    used_by_pid[pid] = used
                elif used is not None:
                    previous = used_by_pid[pid]
                    used_by_pid[pid] = used if previous is None else max(previous, used)
        return [GpuProcess(pid, device.index, used) for pid, used in used_by_pid.items()]

    # -- GPU topology ----------------------------------------------------------------------------

    def gpu_records(self) -> tuple[list[NvmlGpuRecord], dict[tuple[int, int], int]]:
        """What NVML says about each GPU's locality and links, for the topology builder."""
        devices = [d for d in self.ensure_ready() if d.handle is not None]
        sysfs = self.sysfs_gpus()
        records: list[NvmlGpuRecord] = []
        usable: list[GpuDevice] = []
        for device in devices:
            try:
                records.append(self._record(device, sysfs))
                usable.append(device)
            except DeviceUnhealthy as exc:
                self._note_down(device.index, exc)
        ancestors: dict[tuple[int, int], int] = {}
        for a in usable:
            for b in usable:
                if b.index <= a.index:
                    continue
                try:
                    level = self.call(
                        "nvmlDeviceGetTopologyCommonAncestor",
                        a.handle,
                        b.handle,
                        gpu=a.index,
                        generation=a.generation,
                    )
                except DeviceUnhealthy as exc:
                    self._note_down(exc.gpu, exc)
                    continue
                if level is not None:
                    ancestors[(a.index, b.index)] = int(level)
                    ancestors[(b.index, a.index)] = int(level)
        return records, ancestors

    def _record(self, device: GpuDevice, sysfs: dict[str, Gpu]) -> NvmlGpuRecord:
        index, handle, generation = device.index, device.handle, device.generation

        def ask(name: str, link: int, field: str) -> Any:
            return self.call(
                name, handle, link, gpu=index, field=f"{field}{link}", generation=generation
            )

        numa_node, cpus, _ = self._locality(device, sysfs, count=False)
        remotes: list[NvLinkRemote] = []
        for link in device.nvlinks:
            state = ask("nvmlDeviceGetNvLinkState", link, "nvlink")
            if state is None or int(state) != int(pynvml.NVML_FEATURE_ENABLED):
                continue
            remote = bus_id_of(ask("nvmlDeviceGetNvLinkRemotePciInfo", link, "nvlink_remote"))
            if remote is None:
                continue
            kind = ask("nvmlDeviceGetNvLinkRemoteDeviceType", link, "nvlink_remote_type")
            switch = (
                None if kind is None else int(kind) == int(pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)
            )
            remotes.append(NvLinkRemote(link, remote, switch))
        return NvmlGpuRecord(
            index=index,
            pci_bus_id=device.pci_bus_id,
            uuid=device.uuid,
            model=device.name,
            numa_node=numa_node,
            local_cpus=cpus,
            nvlinks=tuple(remotes),
        )

    def gpu_topology(self) -> tuple[tuple[Gpu, ...], tuple[GpuLink, ...]]:
        """Model GPUs and the ``nvidia-smi topo -m`` link matrix as NVML sees them."""
        records, ancestors = self.gpu_records()
        return build_gpu_topology(records, ancestors)

    def gpu_links(self) -> tuple[GpuLink, ...]:
        """The link matrix, computed once per NVML initialisation (it does not change)."""
        with self._lock:
            cached = self._links
            generation = self._generation
        if cached is not None and cached[0] == generation:
            return cached[1]
        _, links = self.gpu_topology()
        with self._lock:
            if self._generation == generation:
                self._links = (generation, links)
        return links
