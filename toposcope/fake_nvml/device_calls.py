"""The fake NVML's library, system and per-device calls: identity, readings, processes.

Readings follow the description's values over the fake clock, in NVML's own units; a
reading the description leaves out answers ``NOT_SUPPORTED``, and a MIG handle answers only
what the driver answers for a MIG device (name, UUID, memory, processes).

``nvmlDeviceGetProcessUtilization`` answers one sample per process whose description gives
``sm_util``, stamped at the fake time (microseconds after :data:`SAMPLE_EPOCH_US`, as the
driver stamps CPU time), when that is later than the caller's last seen timestamp;
``NOT_FOUND`` when there is no such sample, ``NOT_SUPPORTED`` in MIG mode (as the driver).
"""

from __future__ import annotations

import pynvml

from toposcope.fake_nvml.base import FakeNvmlBase, nvml_call, raise_nvml
from toposcope.fake_nvml.spec import NO_INSTANCE
from toposcope.fake_nvml.structs import (
    FakeHandle,
    FakeMemory,
    FakePciInfo,
    FakeProcessInfo,
    FakeProcessUtilizationSample,
    FakeUtilization,
    pci_info,
)
from toposcope.fake_nvml.values import evaluate
from toposcope.topology.nvml import normalise_pci_bus_id

#: the CPU time (microseconds since the Unix epoch) the fake time 0 of sample stamps stands for
SAMPLE_EPOCH_US = 1_700_000_000_000_000


class DeviceCalls(FakeNvmlBase):
    """``nvmlInit``/``nvmlShutdown``, system queries, device identity, readings, processes."""

    # -- library lifecycle and system queries ------------------------------------------------

    @nvml_call("init")
    def nvmlInit(self) -> None:
        """Initialise the library (reference-counted like the real one)."""
        with self._lock:
            self._refcount += 1

    @nvml_call("init")
    def nvmlInitWithFlags(self, flags: int) -> None:
        """Initialise with flags (ignored)."""
        with self._lock:
            self._refcount += 1

    @nvml_call("system")
    def nvmlShutdown(self) -> None:
        """Drop one reference; at zero every call raises UNINITIALIZED again."""
        with self._lock:
            self._refcount -= 1

    def nvmlErrorString(self, result: int) -> str:
        """The library's text for an error code."""
        return str(pynvml.NVMLError(result))

    @nvml_call("system")
    def nvmlSystemGetDriverVersion(self) -> str:
        """The driver version string (``535.129.03``)."""
        return self.spec.driver_version

    @nvml_call("system")
    def nvmlSystemGetCudaDriverVersion(self) -> int:
        """The CUDA driver API version (``12020`` = 12.2)."""
        return self.spec.cuda_driver_version

    @nvml_call("system")
    def nvmlDeviceGetCount(self) -> int:
        """Number of GPUs."""
        return len(self._gpus)

    @nvml_call("index")
    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        """The handle of GPU ``index`` (PCI bus order)."""
        if not 0 <= index < len(self._gpus):
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(index)

    @nvml_call("system")
    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> FakeHandle:
        """The handle of the GPU at a PCI address (any notation)."""
        try:
            wanted = normalise_pci_bus_id(bus_id)
        except ValueError:
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for gpu in self._gpus:
            if gpu.pci_bus_id == wanted:
                return FakeHandle(gpu.index)
        raise_nvml(pynvml.NVML_ERROR_NOT_FOUND)

    # -- device identity ------------------------------------------------------------------------

    @nvml_call("device")
    def nvmlDeviceGetIndex(self, handle: FakeHandle) -> int:
        """The NVML index of a device."""
        return self._gpu(handle).index

    @nvml_call("device")
    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        """Product name; MIG devices append ``MIG <profile>`` as the driver does."""
        gpu = self._gpu(handle)
        mig = self._mig(handle)
        return f"{gpu.name} MIG {mig.profile}" if mig is not None else gpu.name

    @nvml_call("device")
    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        """``GPU-...`` (or ``MIG-...`` for a MIG device)."""
        gpu = self._gpu(handle)
        mig = self._mig(handle)
        return mig.uuid if mig is not None else gpu.uuid

    @nvml_call("device")
    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> FakePciInfo:
        """PCI identity; ``busId`` like ``b'00000000:07:00.0'``."""
        gpu = self._gpu(handle)
        return pci_info(gpu.pci_bus_id, gpu.pci_device_id)

    @nvml_call("device")
    def nvmlDeviceGetPciInfo_v3(self, handle: FakeHandle) -> FakePciInfo:
        """Same as :meth:`nvmlDeviceGetPciInfo` (what the bindings call underneath)."""
        gpu = self._gpu(handle)
        return pci_info(gpu.pci_bus_id, gpu.pci_device_id)

    # -- readings -------------------------------------------------------------------------------

    @nvml_call("device")
    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> FakeMemory:
        """Framebuffer total/used/free in bytes (of the MIG instance for a MIG handle)."""
        gpu = self._gpu(handle)
        mig = self._mig(handle)
        if mig is not None:
            total, used = mig.memory_total_bytes, self._read(mig.memory_used_bytes)
        else:
            total = self._read(float(gpu.memory_total_bytes) if gpu.memory_total_bytes else None)
            used = self._read(gpu.memory_used_bytes)
        used = min(used, total)
        return FakeMemory(total=total, free=total - used, used=used)

    @nvml_call("device")
    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> FakeUtilization:
        """GPU and memory-controller busy percent over the last sample period."""
        gpu = self._full_gpu(handle)
        return FakeUtilization(
            gpu=self._read(gpu.utilization_gpu), memory=self._read(gpu.utilization_memory)
        )

    @nvml_call("device")
    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        """Power draw in milliwatts."""
        return self._read(self._full_gpu(handle).power_mw)

    @nvml_call("device")
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        """Enforced power limit in milliwatts."""
        return self._read(self._full_gpu(handle).power_limit_mw)

    @nvml_call("device")
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        """Energy since the driver loaded, in millijoules."""
        return self._read(self._full_gpu(handle).energy_mj)

    @nvml_call("device")
    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        """Core temperature in degrees Celsius (``NVML_TEMPERATURE_GPU``)."""
        gpu = self._full_gpu(handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._read(gpu.temperature_c)

    @nvml_call("device")
    def nvmlDeviceGetTemperatureV(self, handle: FakeHandle, sensor: int) -> int:
        """The versioned temperature call (``nvmlTemperature_v1``), in degrees Celsius."""
        gpu = self._full_gpu(handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._read(gpu.temperature_c)

    @nvml_call("device")
    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        """Current clock in MHz (graphics and SM share the SM value)."""
        gpu = self._full_gpu(handle)
        if clock_type in (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_GRAPHICS):
            return self._read(gpu.clock_sm_mhz)
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return self._read(gpu.clock_mem_mhz)
        raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)

    @nvml_call("device")
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        """Bit mask of active clock event reasons (``nvmlClocksEventReason*``)."""
        reasons = self._full_gpu(handle).clock_event_reasons
        return self._read(float(reasons) if reasons is not None else None)

    @nvml_call("device")
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:
        """The older name of :meth:`nvmlDeviceGetCurrentClocksEventReasons`."""
        reasons = self._full_gpu(handle).clock_event_reasons
        return self._read(float(reasons) if reasons is not None else None)

    @nvml_call("device")
    def nvmlDeviceGetTotalEccErrors(
        self, handle: FakeHandle, error_type: int, counter_type: int
    ) -> int:
        """ECC error count by type (corrected/uncorrected) and counter (volatile/aggregate)."""
        gpu = self._full_gpu(handle)
        if gpu.ecc is None:
            raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)
        kind = {
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED: "corrected",
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: "uncorrected",
        }.get(error_type)
        counter = {
            pynvml.NVML_VOLATILE_ECC: "volatile",
            pynvml.NVML_AGGREGATE_ECC: "aggregate",
        }.get(counter_type)
        if kind is None or counter is None:
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._read(gpu.ecc[(str(kind), str(counter))])

    @nvml_call("device")
    def nvmlDeviceGetPcieThroughput(self, handle: FakeHandle, counter: int) -> int:
        """PCIe throughput in KB/s over the last 20 ms (``NVML_PCIE_UTIL_TX/RX_BYTES``)."""
        gpu = self._full_gpu(handle)
        if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            return self._read(gpu.pcie_tx_kbps)
        if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            return self._read(gpu.pcie_rx_kbps)
        raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    # -- processes --------------------------------------------------------------------------------

    def _processes(self, handle: FakeHandle, kind: str) -> list[FakeProcessInfo]:
        gpu = self._gpu(handle)
        return [
            FakeProcessInfo(p.pid, p.used_bytes, NO_INSTANCE, NO_INSTANCE)
            for p in gpu.processes
            if p.kind == kind
        ]

    @nvml_call("device")
    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[FakeProcessInfo]:
        """Compute processes; ``usedGpuMemory`` may be ``None``."""
        return self._processes(handle, "compute")

    @nvml_call("device")
    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: FakeHandle) -> list[FakeProcessInfo]:
        """Versioned name of :meth:`nvmlDeviceGetComputeRunningProcesses`."""
        return self._processes(handle, "compute")

    @nvml_call("device")
    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeHandle) -> list[FakeProcessInfo]:
        """Graphics processes; ``usedGpuMemory`` may be ``None``."""
        return self._processes(handle, "graphics")

    @nvml_call("device")
    def nvmlDeviceGetProcessUtilization(
        self, handle: FakeHandle, last_seen: int
    ) -> list[FakeProcessUtilizationSample]:
        """Per-process samples newer than ``last_seen`` (module docstring)."""
        gpu = self._full_gpu(handle)
        if gpu.mig_mode == "enabled":
            raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)
        now = self.now()
        stamp = SAMPLE_EPOCH_US + int(now * 1e6)
        samples = [
            FakeProcessUtilizationSample(
                p.pid, stamp, round(min(max(evaluate(p.sm_util, now), 0.0), 100.0)), 0, 0, 0
            )
            for p in gpu.processes
            if p.sm_util is not None
        ]
        if not samples or stamp <= int(last_seen):
            raise_nvml(pynvml.NVML_ERROR_NOT_FOUND)
        return samples

    @nvml_call("device")
    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: FakeHandle) -> list[FakeProcessInfo]:
        """Versioned name of :meth:`nvmlDeviceGetGraphicsRunningProcesses`."""
        return self._processes(handle, "graphics")
