"""GPU throughput and activity: PCIe and NVLink bytes, SM, tensor and DRAM activity.

Each quantity of :data:`~.records.ACTIVITY_QUANTITIES` comes from the best source the GPU
answers, in this order:

* ``gpm``: GPU Performance Monitoring (Hopper and later). Every reading takes a GPM sample
  (``nvmlGpmSampleAlloc`` + ``nvmlGpmSampleGet``) and asks ``nvmlGpmMetricsGet`` for the
  metrics between it and the previous reading's sample: ``SM_UTIL``, ``SM_OCCUPANCY``,
  ``ANY_TENSOR_UTIL``, ``DRAM_BW_UTIL`` (percent, published as ratios), ``PCIE_TX/RX_PER_SEC``
  and ``NVLINK_Lx_TX/RX_PER_SEC`` per link (``NVLINK_TOTAL_TX/RX_PER_SEC`` where no link
  answers), in MiB/s. GPM needs two samples, so its quantities are undecided at the first
  reading and appear from the second on. Its rates are averages over the whole interval
  between the two samples, so rate x interval, added to a counter kept here from the
  exporter's start, counts every byte.
* ``field_values``: ``nvmlDeviceGetFieldValues`` with ``NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES``
  (drivers from r550) and ``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX`` with the link as
  scope id (KiB): the driver's own counters, published as they are (in bytes).
* ``pcie_throughput``: ``nvmlDeviceGetPcieThroughput`` (KB/s over 20 ms), sampled in the
  background by :class:`~.threads.PcieSampler`, which integrates it into its own counter
  (an estimate; see there). PCIe only.

A quantity no source answers is ``none``: no value series, only the source row saying so.
Every call goes through :meth:`~.library.NvmlLibrary.call` and every per-entry return code
of the batched calls through :meth:`~.library.NvmlLibrary.answered`, so ``NotSupported``
means absent (and is not asked again) and a lost GPU raises ``DeviceUnhealthy``; the GPU is
then left out of the reading and its GPM state dropped. After a re-initialisation the GPM
samples of the old library are let go without being freed (their handles are stale).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

from toposcope.errors import SourceError
from toposcope.host.nvml.errors import DeviceUnhealthy
from toposcope.host.nvml.library import NvmlLibrary
from toposcope.host.nvml.records import (
    ACTIVITY_QUANTITIES,
    ACTIVITY_RATIOS,
    GpuActivity,
    GpuDevice,
)
from toposcope.host.nvml.threads import PcieSampler

#: Bytes in a MiB (GPM rates) and a KiB (field value counters).
MIB = 1048576.0
KIB = 1024.0
#: The links GPM has per-link metrics for (``NVML_GPM_METRIC_NVLINK_L0`` .. ``L17``).
GPM_LINKS = 18

#: GPM metric of each ratio quantity.
GPM_RATIO_METRICS: dict[str, int] = {
    "sm_active": pynvml.NVML_GPM_METRIC_SM_UTIL,
    "sm_occupancy": pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    "tensor_active": pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    "dram_active": pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
}
GPM_PCIE_METRICS: dict[str, int] = {
    "tx": pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    "rx": pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
}
GPM_NVLINK_TOTAL_METRICS: dict[str, int] = {
    "tx": pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
    "rx": pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
}
FI_PCIE_FIELDS: dict[str, int] = {
    "tx": pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
    "rx": pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
}
FI_NVLINK_FIELDS: dict[str, int] = {
    "tx": pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    "rx": pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
}
_PCIE_FIELD_IDS = frozenset(FI_PCIE_FIELDS.values())
_DIRECTIONS = ("tx", "rx")


#: Value types of field values too narrow for a byte counter: driver 580 answers the PCIe
#: byte counters as 32-bit unsigned ints (``tests/fixtures/real-gpu``), which wrap every
#: second or so under load, far faster than any scrape interval can follow.
NARROW_VALUE_TYPES = frozenset(
    {
        int(pynvml.NVML_VALUE_TYPE_UNSIGNED_INT),
        int(pynvml.NVML_VALUE_TYPE_SIGNED_INT),
        int(pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT),
    }
)


def gpm_link_metric(link: int, direction: str) -> int:
    """The GPM metric id of one NVLink's rate (``NVML_GPM_METRIC_NVLINK_L<link>_<dir>_PER_SEC``)."""
    first = pynvml.NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC
    return int(first) + 2 * link + (1 if direction == "tx" else 0)


def field_number(entry: Any) -> float:
    """The value of an ``nvmlFieldValue_t`` as a number, read by its ``valueType``."""
    member = {
        pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
    }.get(int(entry.valueType), "ullVal")
    return float(getattr(entry.value, member))


@dataclass(frozen=True)
class _GpmSample:
    """The GPM sample a GPU's next reading is measured from."""

    sample: Any
    taken_at: float
    generation: int


@dataclass(frozen=True)
class _Gpm:
    """What GPM gave in one reading: ``values`` is ``None`` while waiting for a second sample."""

    values: dict[int, float] | None
    elapsed: float


class ActivityReader:
    """Reads :class:`~.records.GpuActivity` of healthy GPUs (see the module docstring).

    Keeps each GPU's last GPM sample and the byte counters it integrates from GPM rates;
    :meth:`latest` hands the last reading to the workloads collector. Thread-safe.
    """

    def __init__(self, library: NvmlLibrary) -> None:
        self._library = library
        self._lock = threading.Lock()
        self._samples: dict[int, _GpmSample] = {}
        self._gpm_support: dict[int, tuple[int, bool]] = {}
        self._totals: dict[tuple[int, str, int | None, str], float] = {}
        self._latest: dict[int, GpuActivity] = {}

    def latest(self) -> dict[int, GpuActivity]:
        """The last reading of every GPU by index (empty before the first)."""
        with self._lock:
            return dict(self._latest)

    def read(
        self, devices: Sequence[GpuDevice], pcie: PcieSampler | None = None
    ) -> dict[int, GpuActivity]:
        """Read every device with a handle now; a GPU that fails unhealthy is left out.

        ``pcie`` is the background PCIe sampler, the last source for PCIe bytes. Raises
        :class:`~.errors.NvmlNotReady` when NVML itself needs re-initialisation.
        """
        with self._lock:
            read = {device.index for device in devices if device.handle is not None}
            for index in sorted(set(self._samples) - read):
                self._drop(index)
            found: dict[int, GpuActivity] = {}
            for device in devices:
                if device.handle is None:
                    continue
                try:
                    found[device.index] = self._read(device, pcie)
                except DeviceUnhealthy:
                    self._drop(device.index)
            self._latest = found
            return dict(found)

    def _drop(self, index: int) -> None:
        """Let a GPU's GPM sample go (it was not read, or failed): counting restarts after."""
        kept = self._samples.pop(index, None)
        if kept is not None and kept.generation == self._library.generation:
            self._free(kept.sample, index)

    def close(self) -> None:
        """Free the GPM samples kept (before NVML shuts down)."""
        with self._lock:
            for index in sorted(self._samples):
                self._drop(index)

    # -- one GPU ---------------------------------------------------------------------------

    def _read(self, device: GpuDevice, pcie: PcieSampler | None) -> GpuActivity:
        sources: dict[str, str] = {}
        ratios: list[tuple[str, float]] = []
        gpm = self._gpm(device)
        for quantity in ACTIVITY_RATIOS:
            if gpm is None:
                sources[quantity] = "none"
            elif gpm.values is not None:
                value = gpm.values.get(GPM_RATIO_METRICS[quantity])
                sources[quantity] = "none" if value is None else "gpm"
                if value is not None:
                    ratios.append((quantity, min(max(value / 100.0, 0.0), 1.0)))
        pcie_bytes: list[tuple[str, float]] = []
        nvlink_bytes: list[tuple[int | None, str, float]] = []
        fields: dict[tuple[int, int], float] | None = None
        if gpm is None or gpm.values is not None:
            if self._gpm_pcie(device, gpm, pcie_bytes):
                sources["pcie_bytes"] = "gpm"
            else:
                fields = self._field_values(device)
                other = self._other_pcie(device, fields, pcie, pcie_bytes)
                if other is not None:
                    sources["pcie_bytes"] = other
            if not device.nvlinks:
                sources["nvlink_bytes"] = "none"
            elif self._gpm_nvlink(device, gpm, nvlink_bytes):
                sources["nvlink_bytes"] = "gpm"
            else:
                if fields is None:
                    fields = self._field_values(device)
                sources["nvlink_bytes"] = self._fi_nvlink(device, fields, nvlink_bytes)
        return GpuActivity(
            index=device.index,
            sources=tuple((q, sources[q]) for q in ACTIVITY_QUANTITIES if q in sources),
            pcie_bytes=tuple(pcie_bytes),
            nvlink_bytes=tuple(nvlink_bytes),
            ratios=tuple(ratios),
        )

    def _count(
        self, index: int, quantity: str, link: int | None, direction: str, added: float
    ) -> float:
        key = (index, quantity, link, direction)
        total = self._totals.get(key, 0.0) + max(added, 0.0)
        self._totals[key] = total
        return total

    def _gpm_pcie(self, device: GpuDevice, gpm: _Gpm | None, out: list[tuple[str, float]]) -> bool:
        if gpm is None or gpm.values is None:
            return False
        for direction in _DIRECTIONS:
            rate = gpm.values.get(GPM_PCIE_METRICS[direction])
            if rate is not None:
                added = rate * MIB * gpm.elapsed
                out.append((direction, self._count(device.index, "pcie", None, direction, added)))
        return bool(out)

    def _gpm_nvlink(
        self, device: GpuDevice, gpm: _Gpm | None, out: list[tuple[int | None, str, float]]
    ) -> bool:
        if gpm is None or gpm.values is None:
            return False
        for link in device.nvlinks:
            for direction in _DIRECTIONS:
                rate = (
                    gpm.values.get(gpm_link_metric(link, direction)) if link < GPM_LINKS else None
                )
                if rate is not None:
                    total = self._count(
                        device.index, "nvlink", link, direction, rate * MIB * gpm.elapsed
                    )
                    out.append((link, direction, total))
        if out:
            return True
        for direction in _DIRECTIONS:
            rate = gpm.values.get(GPM_NVLINK_TOTAL_METRICS[direction])
            if rate is not None:
                total = self._count(
                    device.index, "nvlink", None, direction, rate * MIB * gpm.elapsed
                )
                out.append((None, direction, total))
        return bool(out)

    def _other_pcie(
        self,
        device: GpuDevice,
        fields: dict[tuple[int, int], float],
        pcie: PcieSampler | None,
        out: list[tuple[str, float]],
    ) -> str | None:
        """PCIe bytes from field values, else the sampler; ``None`` while the sampler has
        not answered for the GPU yet (undecided), ``none`` when neither can give them.
        """
        for direction in _DIRECTIONS:
            value = fields.get((FI_PCIE_FIELDS[direction], 0))
            if value is not None:
                out.append((direction, value))
        if out:
            return "field_values"
        if pcie is None or all(
            self._library.is_unsupported(device.index, f"pcie_{d}") for d in _DIRECTIONS
        ):
            return "none"
        sample = pcie.latest(device.index)
        if sample is None:
            return None
        if self._library.clock() - sample.taken_at <= pcie.max_age:
            for direction, total in (("tx", sample.tx_bytes_total), ("rx", sample.rx_bytes_total)):
                if total is not None:
                    out.append((direction, total))
        return "pcie_throughput"

    def _fi_nvlink(
        self,
        device: GpuDevice,
        fields: dict[tuple[int, int], float],
        out: list[tuple[int | None, str, float]],
    ) -> str:
        for link in device.nvlinks:
            for direction in _DIRECTIONS:
                value = fields.get((FI_NVLINK_FIELDS[direction], link))
                if value is not None:
                    out.append((link, direction, value * KIB))
        return "field_values" if out else "none"

    # -- NVML ------------------------------------------------------------------------------

    def _field_values(self, device: GpuDevice) -> dict[tuple[int, int], float]:
        """The PCIe and NVLink counters the GPU answers, by ``(field id, scope id)``."""
        index, generation = device.index, device.generation
        wanted = [(FI_PCIE_FIELDS[d], 0) for d in _DIRECTIONS] + [
            (FI_NVLINK_FIELDS[d], link) for link in device.nvlinks for d in _DIRECTIONS
        ]
        wanted = [w for w in wanted if not self._library.is_unsupported(index, _fi_key(*w))]
        if not wanted:
            return {}
        answer = self._library.call(
            "nvmlDeviceGetFieldValues",
            device.handle,
            wanted,
            gpu=index,
            field="field_values",
            generation=generation,
        )
        found: dict[tuple[int, int], float] = {}
        for (field_id, scope), entry in zip(wanted, answer or (), strict=False):
            key = _fi_key(field_id, scope)
            if not self._library.answered(
                entry.nvmlReturn,
                "nvmlDeviceGetFieldValues",
                gpu=index,
                field=key,
                generation=generation,
            ):
                continue
            if field_id in _PCIE_FIELD_IDS and int(entry.valueType) in NARROW_VALUE_TYPES:
                self._library.set_unusable(index, key, "a 32-bit counter, it wraps within a scrape")
                continue
            found[(field_id, scope)] = field_number(entry)
        return found

    def _gpm_supported(self, device: GpuDevice) -> bool:
        known = self._gpm_support.get(device.index)
        if known is not None and known[0] == device.generation:
            return known[1]
        support = self._library.call(
            "nvmlGpmQueryDeviceSupport",
            device.handle,
            gpu=device.index,
            field="gpm",
            generation=device.generation,
        )
        supported = support is not None and bool(int(support.isSupportedDevice))
        self._gpm_support[device.index] = (device.generation, supported)
        return supported

    def _gpm(self, device: GpuDevice) -> _Gpm | None:
        """GPM's metrics since the previous sample; ``None`` when the GPU has no GPM."""
        index, generation = device.index, device.generation
        previous = self._samples.pop(index, None)
        if previous is not None and previous.generation != generation:
            previous = None
        if not self._gpm_supported(device):
            if previous is not None:
                self._free(previous.sample, index)
            return None
        try:
            sample = self._take_sample(device)
        except DeviceUnhealthy:
            if previous is not None:
                self._free(previous.sample, index)
            raise
        if sample is None:
            if previous is not None:
                self._free(previous.sample, index)
            return None
        now = self._library.clock()
        self._samples[index] = _GpmSample(sample, now, generation)
        if previous is None:
            return _Gpm(None, 0.0)
        try:
            values = self._metrics(device, previous.sample, sample)
        finally:
            self._free(previous.sample, index)
        return _Gpm(values, max(now - previous.taken_at, 0.0))

    def _take_sample(self, device: GpuDevice) -> Any:
        index, generation = device.index, device.generation
        sample = self._library.call(
            "nvmlGpmSampleAlloc", gpu=index, field="gpm_sample", generation=generation
        )
        if sample is None:
            return None
        try:
            taken = self._library.call(
                "nvmlGpmSampleGet",
                device.handle,
                sample,
                gpu=index,
                field="gpm_sample",
                generation=generation,
            )
        except DeviceUnhealthy:
            self._free(sample, index)
            raise
        if taken is None:
            self._free(sample, index)
            return None
        return sample

    def _metrics(self, device: GpuDevice, first: Any, second: Any) -> dict[int, float]:
        index, generation = device.index, device.generation
        wanted = [*GPM_RATIO_METRICS.values(), *GPM_PCIE_METRICS.values()]
        if device.nvlinks:
            wanted += [*GPM_NVLINK_TOTAL_METRICS.values()]
            wanted += [
                gpm_link_metric(link, d)
                for link in device.nvlinks
                if link < GPM_LINKS
                for d in _DIRECTIONS
            ]
        wanted = [m for m in wanted if not self._library.is_unsupported(index, _gpm_key(m))]
        request = self._library.backend.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1 = first
        request.sample2 = second
        for slot, metric in enumerate(wanted):
            request.metrics[slot].metricId = metric
        answer = self._library.call(
            "nvmlGpmMetricsGet", request, gpu=index, field="gpm_metrics", generation=generation
        )
        if answer is None:
            return {}
        values: dict[int, float] = {}
        for slot, metric in enumerate(wanted):
            entry = answer.metrics[slot]
            if self._library.answered(
                entry.nvmlReturn,
                "nvmlGpmMetricsGet",
                gpu=index,
                field=_gpm_key(metric),
                generation=generation,
            ):
                values[metric] = float(entry.value)
        return values

    def _free(self, sample: Any, index: int) -> None:
        try:
            self._library.call("nvmlGpmSampleFree", sample, gpu=index, quiet=True)
        except (DeviceUnhealthy, SourceError):
            return


def _fi_key(field_id: int, scope: int) -> str:
    return f"field_value_{field_id}_{scope}"


def _gpm_key(metric: int) -> str:
    return f"gpm_metric_{metric}"
