"""The fake NVML's health calls: row remapping, retired pages, NVLink and PCIe error counters.

Each answers from the description's health fields over the fake clock; a GPU whose
description leaves a signal out answers ``NOT_SUPPORTED``, as a GPU without that feature
does (retired pages on Ampere and later, row remapping before it, NVLink counters on a GPU
without NVLink). Tests make a signal go bad with ``set_value`` or inject NVML errors into
these calls like into any other.
"""

from __future__ import annotations

from collections.abc import Mapping

import pynvml

from toposcope.fake_nvml.base import FakeNvmlBase, nvml_call, raise_nvml
from toposcope.fake_nvml.spec import FakeGpu
from toposcope.fake_nvml.structs import FakeHandle
from toposcope.fake_nvml.values import Value

_RETIREMENT_CAUSES = {
    pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: "single_bit",
    pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: "double_bit",
}
_NVLINK_COUNTERS = {
    pynvml.NVML_NVLINK_ERROR_DL_REPLAY: "replay",
    pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: "recovery",
    pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: "crc_flit",
    pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA: "crc_data",
}


class HealthCalls(FakeNvmlBase):
    """``nvmlDeviceGetRemappedRows``, retired pages, NVLink error and PCIe replay counters."""

    def _count(self, values: Mapping[str, Value] | None, key: str | None) -> int:
        """One counter of a health mapping (NOT_SUPPORTED without the mapping)."""
        if values is None:
            raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if key is None:
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._read(values.get(key, 0.0))

    @nvml_call("device")
    def nvmlDeviceGetRemappedRows(self, handle: FakeHandle) -> tuple[int, int, int, int]:
        """``(correctable rows, uncorrectable rows, remap pending, remap failed)``."""
        gpu = self._full_gpu(handle)
        rows = gpu.remapped_rows
        return (
            self._count(rows, "correctable"),
            self._count(rows, "uncorrectable"),
            int(gpu.row_remap_pending),
            int(gpu.row_remap_failed),
        )

    @nvml_call("device")
    def nvmlDeviceGetRetiredPages(self, handle: FakeHandle, cause: int) -> list[int]:
        """Addresses of the pages retired for ``cause`` (made up, one 64 KiB page each)."""
        gpu = self._full_gpu(handle)
        count = self._count(gpu.retired_pages, _RETIREMENT_CAUSES.get(cause))
        return [0x1000_0000 + cause * 0x100_0000 + page * 0x10000 for page in range(count)]

    @nvml_call("device")
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: FakeHandle) -> int:
        """``NVML_FEATURE_ENABLED`` while a retired page waits for the next reset."""
        gpu = self._full_gpu(handle)
        if gpu.retired_pages is None:
            raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)
        enabled = gpu.retired_pages_pending
        return int(pynvml.NVML_FEATURE_ENABLED if enabled else pynvml.NVML_FEATURE_DISABLED)

    @nvml_call("device")
    def nvmlDeviceGetNvLinkErrorCounter(self, handle: FakeHandle, link: int, counter: int) -> int:
        """One NVLink error counter of one link (replay, recovery, CRC flit, CRC data)."""
        gpu = self._full_gpu(handle)
        if gpu.nvlinks is None or gpu.nvlink_errors is None:
            raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(gpu.nvlinks):
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._count(_link_errors(gpu, link), _NVLINK_COUNTERS.get(counter))

    @nvml_call("device")
    def nvmlDeviceGetPcieReplayCounter(self, handle: FakeHandle) -> int:
        """PCIe replays since the driver loaded."""
        return self._read(self._full_gpu(handle).pcie_replays)


def _link_errors(gpu: FakeGpu, link: int) -> Mapping[str, Value]:
    """The error counters of one link: the GPU-wide ones, overridden for this link."""
    return {**(gpu.nvlink_errors or {}), **gpu.nvlink_errors_by_link.get(link, {})}
