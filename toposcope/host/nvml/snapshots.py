"""Per-scrape GPU snapshots: every reading of a GPU read once, locality checked with sysfs.

Health signals come from :mod:`.health`. A GPU that fails in an unhealthy way comes back
``up=False`` with its identity only; one
whose handle was lost is rediscovered on the next scrape. Locality is sysfs's where sysfs
knows the GPU, and each disagreement with NVML is counted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pynvml

from toposcope.errors import SourceError
from toposcope.host.nvml.errors import DeviceUnhealthy
from toposcope.host.nvml.health import HealthReader
from toposcope.host.nvml.records import (
    CLOCK_EVENT_REASONS,
    GpuDevice,
    GpuSnapshot,
    MigInstance,
    mig_profile,
    text_of,
    words_to_ids,
)
from toposcope.topology.model import Gpu

_CLOCK_EVENT_CALLS = (
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
)
#: The versioned call first; the plain one is deprecated (to go with CUDA 14) but is all
#: that older drivers have.
_TEMPERATURE_CALLS = ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature")
_ECC_KINDS = (
    ("corrected", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
    ("uncorrected", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
)
_ECC_COUNTERS = (("volatile", pynvml.NVML_VOLATILE_ECC), ("aggregate", pynvml.NVML_AGGREGATE_ECC))

#: 64-bit words passed to the affinity calls: room for 1024 CPUs and 256 NUMA nodes.
_CPU_SET_WORDS = 16
_NODE_SET_WORDS = 4


class SnapshotReader(HealthReader):
    """Reads snapshots of GPUs over the NVML library (see the module docstring)."""

    def sysfs_gpus(self) -> dict[str, Gpu]:
        """sysfs's GPUs by PCI bus id (empty when no topology is configured or it fails)."""
        if self._topology is None:
            return {}
        try:
            topology = self._topology()
        except SourceError as exc:
            self._log_once(logging.WARNING, None, "sysfs topology", str(exc), "unreadable")
            return {}
        return {g.pci_bus_id: g for g in topology.gpus if g.pci_bus_id is not None}

    def read_snapshots(self, devices: Sequence[GpuDevice]) -> list[GpuSnapshot]:
        """One snapshot per device, sharing one read of the sysfs topology."""
        sysfs = self.sysfs_gpus()
        return [self.read_snapshot(device, sysfs) for device in devices]

    def read_snapshot(self, device: GpuDevice, sysfs: dict[str, Gpu] | None = None) -> GpuSnapshot:
        """Read every quantity of one GPU once; a GPU that fails unhealthy comes back down.

        Raises :class:`NvmlNotReady` when NVML itself needs re-initialisation.
        """
        if sysfs is None:
            sysfs = self.sysfs_gpus()
        if device.handle is None:
            device = self._rediscover(device)
            if device.handle is None:
                return self._lost(device, sysfs)
        try:
            snapshot = self._read(device, sysfs)
        except DeviceUnhealthy as exc:
            self._note_down(device.index, exc)
            return self._lost(device, sysfs)
        self._note_up(device.index)
        return snapshot

    def _lost(self, device: GpuDevice, sysfs: dict[str, Gpu]) -> GpuSnapshot:
        known = self._known(device)
        local = sysfs.get(known.pci_bus_id) if known.pci_bus_id else None
        return GpuSnapshot(
            index=device.index,
            up=False,
            uuid=known.uuid,
            name=known.name,
            pci_bus_id=known.pci_bus_id,
            numa_node=local.numa_node if local else None,
            cpu_affinity=local.local_cpus if local else (),
        )

    def _known(self, device: GpuDevice) -> GpuDevice:
        """The best identity known for a device (a lost one keeps what discovery found)."""
        if device.uuid is not None:
            return device
        with self._lock:
            for known in self._devices:
                if known.index == device.index and known.uuid is not None:
                    return known
        return device

    def _read(self, device: GpuDevice, sysfs: dict[str, Gpu]) -> GpuSnapshot:
        index, handle, generation = device.index, device.handle, device.generation

        def ask(name: str, *args: Any, field: str | None = None) -> Any:
            return self.call(name, handle, *args, gpu=index, field=field, generation=generation)

        utilization = ask("nvmlDeviceGetUtilizationRates")
        memory = ask("nvmlDeviceGetMemoryInfo")
        power = ask("nvmlDeviceGetPowerUsage")
        limit = ask("nvmlDeviceGetEnforcedPowerLimit")
        energy = ask("nvmlDeviceGetTotalEnergyConsumption")
        temperature = self._first(
            _TEMPERATURE_CALLS,
            handle,
            pynvml.NVML_TEMPERATURE_GPU,
            gpu=index,
            generation=generation,
        )
        sm_clock = ask("nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_SM, field="clock_sm")
        mem_clock = ask("nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_MEM, field="clock_memory")
        reasons = self._first(_CLOCK_EVENT_CALLS, handle, gpu=index, generation=generation)
        ecc: list[tuple[str, str, int]] = []
        for kind_name, kind in _ECC_KINDS:
            for counter_name, counter in _ECC_COUNTERS:
                count = ask(
                    "nvmlDeviceGetTotalEccErrors",
                    kind,
                    counter,
                    field=f"ecc_{kind_name}_{counter_name}",
                )
                if count is not None:
                    ecc.append((kind_name, counter_name, int(count)))
        links: list[tuple[int, bool]] = []
        for link in device.nvlinks:
            state = ask("nvmlDeviceGetNvLinkState", link, field=f"nvlink{link}")
            if state is not None:
                links.append((link, int(state) == int(pynvml.NVML_FEATURE_ENABLED)))
        mig_mode, instances = self._mig(device)
        health = self.read_health(device)
        numa_node, cpus, mismatch = self._locality(device, sysfs, count=True)
        return GpuSnapshot(
            index=index,
            up=True,
            uuid=device.uuid,
            name=device.name,
            pci_bus_id=device.pci_bus_id,
            numa_node=numa_node,
            cpu_affinity=cpus,
            locality_mismatch=mismatch,
            mig_mode=mig_mode,
            mig_instances=instances,
            utilization_ratio=int(utilization.gpu) / 100.0 if utilization is not None else None,
            memory_utilization_ratio=(
                int(utilization.memory) / 100.0 if utilization is not None else None
            ),
            memory_used_bytes=int(memory.used) if memory is not None else None,
            memory_total_bytes=int(memory.total) if memory is not None else None,
            power_watts=int(power) / 1000.0 if power is not None else None,
            power_limit_watts=int(limit) / 1000.0 if limit is not None else None,
            energy_joules=int(energy) / 1000.0 if energy is not None else None,
            temperature_celsius=float(temperature) if temperature is not None else None,
            sm_clock_hertz=int(sm_clock) * 1e6 if sm_clock is not None else None,
            memory_clock_hertz=int(mem_clock) * 1e6 if mem_clock is not None else None,
            clock_events=(
                tuple((name, bool(int(reasons) & bit)) for name, bit in CLOCK_EVENT_REASONS)
                if reasons is not None
                else None
            ),
            ecc_errors=tuple(ecc),
            nvlink_up=tuple(links),
            health=health,
        )

    def mig_instances(self, device: GpuDevice) -> tuple[MigInstance, ...]:
        """The GPU's MIG instances (``GPU_I_ID``, profile, UUID); empty without MIG."""
        return self._mig(device)[1]

    def _mig(self, device: GpuDevice) -> tuple[str | None, tuple[MigInstance, ...]]:
        index, handle, generation = device.index, device.handle, device.generation
        modes = self.call("nvmlDeviceGetMigMode", handle, gpu=index, generation=generation)
        if modes is None:
            return None, ()
        if int(modes[0]) != int(pynvml.NVML_DEVICE_MIG_ENABLE):
            return "disabled", ()
        slots = self.call(
            "nvmlDeviceGetMaxMigDeviceCount", handle, gpu=index, generation=generation
        )
        instances: list[MigInstance] = []
        for slot in range(int(slots or 0)):
            mig = self.call(
                "nvmlDeviceGetMigDeviceHandleByIndex",
                handle,
                slot,
                gpu=index,
                field="mig_device",
                generation=generation,
            )
            if mig is None:
                continue

            def ask(name: str, field: str, mig: Any = mig) -> Any:
                return self.call(name, mig, gpu=index, field=field, generation=generation)

            instance_id = ask("nvmlDeviceGetGpuInstanceId", "mig_gpu_instance_id")
            if instance_id is None:
                continue
            name = text_of(ask("nvmlDeviceGetName", "mig_name"))
            uuid = text_of(ask("nvmlDeviceGetUUID", "mig_uuid"))
            instances.append(MigInstance(int(instance_id), mig_profile(name), uuid))
        instances.sort(key=lambda m: m.gpu_instance_id)
        return "enabled", tuple(instances)

    def _locality(
        self, device: GpuDevice, sysfs: dict[str, Gpu], *, count: bool
    ) -> tuple[int | None, tuple[int, ...], bool]:
        """NUMA node and CPUs of a GPU: NVML's, overruled by sysfs where they disagree."""
        index, handle, generation = device.index, device.handle, device.generation

        def ask(name: str, *args: Any) -> Any:
            return self.call(name, handle, *args, gpu=index, generation=generation)

        words = ask("nvmlDeviceGetCpuAffinity", _CPU_SET_WORDS)
        nvml_cpus = words_to_ids(words) if words is not None else ()
        node_words = ask(
            "nvmlDeviceGetMemoryAffinity", _NODE_SET_WORDS, pynvml.NVML_AFFINITY_SCOPE_NODE
        )
        nodes = words_to_ids(node_words) if node_words is not None else ()
        nvml_node: int | None = nodes[0] if len(nodes) == 1 else None
        if nvml_node is None:
            value = ask("nvmlDeviceGetNumaNodeId")
            nvml_node = int(value) if value is not None and int(value) >= 0 else None
        local = sysfs.get(device.pci_bus_id) if device.pci_bus_id else None
        if local is None:
            return nvml_node, nvml_cpus, False
        mismatch = bool(
            (nvml_node is not None and local.numa_node is not None and nvml_node != local.numa_node)
            or (nvml_cpus and local.local_cpus and set(nvml_cpus) != set(local.local_cpus))
        )
        if mismatch and count:
            with self._lock:
                self._mismatches[index] = self._mismatches.get(index, 0) + 1
            self._log_once(
                logging.WARNING,
                index,
                "locality",
                f"NVML says node {nvml_node}, sysfs node {local.numa_node}",
                "disagrees with sysfs (sysfs wins)",
            )
        node = local.numa_node if local.numa_node is not None else nvml_node
        return node, local.local_cpus or nvml_cpus, mismatch
