"""The fake NVML's throughput and activity calls: GPM and the field values behind them.

GPM (``nvmlGpmQueryDeviceSupport``, ``nvmlGpmSampleAlloc``/``Get``/``Free``,
``nvmlGpmMetricsGet``) follows the GPU's ``gpm`` readings: a metric's value is its reading at
the second sample's fake time, as if it had held over the interval. A GPU without ``gpm``
says it does not support GPM and refuses samples with NOT_SUPPORTED, as a pre-Hopper GPU
does; with ``gpm_per_link`` false only the NVLink totals answer.
``nvmlDeviceGetFieldValues`` answers ``NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES`` from
``pcie_counters`` (as an unsigned int wrapping at 2**32, the way driver 580 answers them on
an H200, unless the description gives ``bits: 64``) and
``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX`` per link (the scope id; ``0xFFFFFFFF`` sums every
link) from ``nvlink_throughput``; any other field, or one the
description leaves out, answers NOT_SUPPORTED in its entry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pynvml

from toposcope.fake_nvml.activity_structs import (
    FakeFieldValue,
    FakeGpmMetricsGet,
    FakeGpmSample,
    FakeGpmSupport,
    FakeValue,
)
from toposcope.fake_nvml.base import FakeNvmlBase, nvml_call, raise_nvml
from toposcope.fake_nvml.spec import FakeGpu
from toposcope.fake_nvml.structs import FakeHandle
from toposcope.fake_nvml.values import Value, evaluate

#: GPM metric id -> the ``gpm`` reading that answers it (whole-GPU metrics).
_GPM_METRICS: dict[int, str] = {
    pynvml.NVML_GPM_METRIC_SM_UTIL: "sm_util",
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy",
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "any_tensor_util",
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram_bw_util",
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: "pcie_tx_per_sec",
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: "pcie_rx_per_sec",
}
_GPM_NVLINK_TOTALS: dict[int, str] = {
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: "nvlink_tx_per_sec",
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: "nvlink_rx_per_sec",
}
_GPM_FIRST_LINK = int(pynvml.NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC)
_GPM_LINKS = 18
_PCIE_FIELDS: dict[int, str] = {
    pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: "tx_bytes",
    pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: "rx_bytes",
}
_NVLINK_FIELDS: dict[int, str] = {
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: "data_tx_kib",
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: "data_rx_kib",
}
#: the scope id that asks for the sum over every link
ALL_LINKS = 0xFFFFFFFF


def _link_reading(
    default: Value | None, overrides: Mapping[int, Mapping[str, Value]], link: int, name: str
) -> Value | None:
    """A link's reading: its own override, else the GPU's reading for every link."""
    return overrides.get(link, {}).get(name, default)


class ActivityCalls(FakeNvmlBase):
    """GPM samples and metrics, and the field values of PCIe and NVLink byte counters."""

    #: the request structure callers fill for :meth:`nvmlGpmMetricsGet`, as in the bindings
    c_nvmlGpmMetricsGet_t = FakeGpmMetricsGet

    # -- GPM --------------------------------------------------------------------------------

    @nvml_call("device")
    def nvmlGpmQueryDeviceSupport(self, handle: FakeHandle) -> FakeGpmSupport:
        """Whether the GPU supports GPM (its description has ``gpm``)."""
        gpu = self._full_gpu(handle)
        return FakeGpmSupport(
            version=int(pynvml.NVML_GPM_SUPPORT_VERSION),
            isSupportedDevice=1 if gpu.gpm is not None else 0,
        )

    @nvml_call("system")
    def nvmlGpmSampleAlloc(self) -> FakeGpmSample:
        """A new, empty GPM sample (free it with :meth:`nvmlGpmSampleFree`)."""
        sample = FakeGpmSample()
        with self._lock:
            self._gpm_samples = [s for s in self._gpm_samples if not s.freed]
            self._gpm_samples.append(sample)
        return sample

    @nvml_call("system")
    def nvmlGpmSampleFree(self, sample: FakeGpmSample) -> None:
        """Free a GPM sample; freeing one twice is INVALID_ARGUMENT."""
        if not isinstance(sample, FakeGpmSample) or sample.freed:
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        sample.freed = True

    @nvml_call("device")
    def nvmlGpmSampleGet(self, handle: FakeHandle, sample: FakeGpmSample) -> FakeGpmSample:
        """Take a GPM sample of the GPU now (NOT_SUPPORTED without GPM)."""
        gpu = self._full_gpu(handle)
        if gpu.gpm is None:
            raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not isinstance(sample, FakeGpmSample) or sample.freed:
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        sample.gpu = gpu.index
        sample.taken_at = self.now()
        return sample

    @nvml_call("system")
    def nvmlGpmMetricsGet(self, request: FakeGpmMetricsGet) -> FakeGpmMetricsGet:
        """Fill each asked metric between two samples of one GPU, in its own return code."""
        first, second = request.sample1, request.sample2
        if (
            not isinstance(request, FakeGpmMetricsGet)
            or request.version != pynvml.NVML_GPM_METRICS_GET_VERSION
            or not 0 <= request.numMetrics <= len(request.metrics)
            or first is None
            or second is None
            or first.freed
            or second.freed
            or first.gpu is None
            or first.gpu != second.gpu
            or first.taken_at is None
            or second.taken_at is None
            or second.taken_at < first.taken_at
        ):
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self._gpus[first.gpu]
        for slot in request.metrics[: request.numMetrics]:
            value = self._gpm_metric(gpu, slot.metricId, second.taken_at)
            if value is None:
                slot.nvmlReturn, slot.value = pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0
            else:
                slot.nvmlReturn, slot.value = pynvml.NVML_SUCCESS, value
        return request

    def _gpm_metric(self, gpu: FakeGpu, metric: int, at: float) -> float | None:
        readings = gpu.gpm or {}
        if metric in _GPM_METRICS:
            value = readings.get(_GPM_METRICS[metric])
            return evaluate(value, at) if value is not None else None
        links = len(gpu.nvlinks or ())
        if metric in _GPM_NVLINK_TOTALS:
            name = _GPM_NVLINK_TOTALS[metric]
            per_link = [
                _link_reading(readings.get(name), gpu.gpm_by_link, link, name)
                for link in range(links)
                if (gpu.nvlinks or ())[link].active
            ]
            given = [evaluate(v, at) for v in per_link if v is not None]
            return sum(given) if given else None
        offset = metric - _GPM_FIRST_LINK
        if 0 <= offset < 2 * _GPM_LINKS:
            link, name = offset // 2, ("nvlink_tx_per_sec" if offset % 2 else "nvlink_rx_per_sec")
            if link >= links or not gpu.gpm_per_link:
                return None
            value = _link_reading(readings.get(name), gpu.gpm_by_link, link, name)
            return evaluate(value, at) if value is not None else None
        return None

    # -- field values ----------------------------------------------------------------------

    @nvml_call("device")
    def nvmlDeviceGetFieldValues(
        self, handle: FakeHandle, field_ids: Sequence[int | tuple[int, int]]
    ) -> list[FakeFieldValue]:
        """One entry per ``field id`` or ``(field id, scope id)``, each with its return code."""
        gpu = self._full_gpu(handle)
        now = self.now()
        answers: list[FakeFieldValue] = []
        for item in field_ids:
            field_id, scope = item if isinstance(item, tuple) else (item, 0)
            code, value = self._field(gpu, field_id, scope, now)
            value_type = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            if field_id in _PCIE_FIELDS and gpu.pcie_counter_bits == 32:
                value_type, value = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, value % 2**32
            answers.append(
                FakeFieldValue(
                    fieldId=field_id,
                    scopeId=scope,
                    timestamp=int(now * 1e6),
                    latencyUsec=0,
                    valueType=int(value_type),
                    nvmlReturn=code,
                    value=FakeValue(ullVal=value, uiVal=value % 2**32),
                )
            )
        return answers

    def _field(self, gpu: FakeGpu, field_id: int, scope: int, now: float) -> tuple[int, int]:
        """``(return code, value)`` of one field value entry."""
        unsupported = (int(pynvml.NVML_ERROR_NOT_SUPPORTED), 0)
        if field_id in _PCIE_FIELDS:
            reading = (gpu.pcie_counters or {}).get(_PCIE_FIELDS[field_id])
            if reading is None:
                return unsupported
            return int(pynvml.NVML_SUCCESS), round(evaluate(reading, now))
        if field_id not in _NVLINK_FIELDS or gpu.nvlink_throughput is None:
            return unsupported
        name = _NVLINK_FIELDS[field_id]
        links = len(gpu.nvlinks or ())
        wanted = range(links) if scope == ALL_LINKS else [scope]
        if scope != ALL_LINKS and not 0 <= scope < links:
            return int(pynvml.NVML_ERROR_INVALID_ARGUMENT), 0
        overrides = gpu.nvlink_throughput_by_link
        readings = [
            _link_reading(gpu.nvlink_throughput.get(name), overrides, link, name) for link in wanted
        ]
        given = [round(evaluate(v, now)) for v in readings if v is not None]
        if not given:
            return unsupported
        return int(pynvml.NVML_SUCCESS), sum(given)
