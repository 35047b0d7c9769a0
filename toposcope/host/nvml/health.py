"""The GPU health signals operators page on, read through NvmlLibrary.call.

Row remapping (``nvmlDeviceGetRemappedRows``: correctable and uncorrectable remapped rows, a
remap pending until the next reset, a remap that failed), retired pages
(``nvmlDeviceGetRetiredPages`` by cause, ``nvmlDeviceGetRetiredPagesPendingStatus``), NVLink
error counters per link (``nvmlDeviceGetNvLinkErrorCounter``: replay, recovery, CRC flit and
CRC data) and the PCIe replay counter (``nvmlDeviceGetPcieReplayCounter``). A GPU that does
not support one of them (retired pages on Ampere and later, row remapping before it) leaves
that signal out: absent, never zero. Equivalent commands: ``nvidia-smi -q -d
ROW_REMAPPER,PAGE_RETIREMENT``, ``nvidia-smi nvlink -e``, ``nvidia-smi -q -d PCIE``.
"""

from __future__ import annotations

from typing import Any

import pynvml

from toposcope.host.nvml.library import NvmlLibrary
from toposcope.host.nvml.records import GpuDevice, GpuHealth

#: Page retirement causes as published in ``cause``, with their NVML values.
RETIREMENT_CAUSES: tuple[tuple[str, int], ...] = (
    ("single_bit", pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
    ("double_bit", pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
)
#: NVLink error counters as published in ``error_type``, with their NVML values.
NVLINK_ERROR_COUNTERS: tuple[tuple[str, int], ...] = (
    ("replay", pynvml.NVML_NVLINK_ERROR_DL_REPLAY),
    ("recovery", pynvml.NVML_NVLINK_ERROR_DL_RECOVERY),
    ("crc_flit", pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT),
    ("crc_data", pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA),
)


class HealthReader(NvmlLibrary):
    """Reads :class:`GpuHealth` of a full GPU (see the module docstring)."""

    def read_health(self, device: GpuDevice) -> GpuHealth:
        """Every health signal of ``device`` NVML supports; unhealthy errors propagate."""
        index, handle, generation = device.index, device.handle, device.generation

        def ask(name: str, *args: Any, field: str | None = None) -> Any:
            return self.call(name, handle, *args, gpu=index, field=field, generation=generation)

        rows = ask("nvmlDeviceGetRemappedRows")
        remapped: tuple[tuple[str, int], ...] = ()
        pending: bool | None = None
        failed: bool | None = None
        if rows is not None:
            correctable, uncorrectable, is_pending, failure = (int(v) for v in rows)
            remapped = (("correctable", correctable), ("uncorrectable", uncorrectable))
            pending, failed = bool(is_pending), bool(failure)
        retired: list[tuple[str, int]] = []
        for cause, code in RETIREMENT_CAUSES:
            pages = ask("nvmlDeviceGetRetiredPages", code, field=f"retired_pages_{cause}")
            if pages is not None:
                retired.append((cause, len(pages)))
        retired_pending = ask("nvmlDeviceGetRetiredPagesPendingStatus")
        link_errors: list[tuple[int, str, int]] = []
        for link in device.nvlinks:
            for error_type, counter in NVLINK_ERROR_COUNTERS:
                count = ask(
                    "nvmlDeviceGetNvLinkErrorCounter",
                    link,
                    counter,
                    field=f"nvlink{link}_{error_type}",
                )
                if count is not None:
                    link_errors.append((link, error_type, int(count)))
        replays = ask("nvmlDeviceGetPcieReplayCounter")
        return GpuHealth(
            remapped_rows=remapped,
            row_remap_pending=pending,
            row_remap_failed=failed,
            retired_pages=tuple(retired),
            retired_pages_pending=(
                int(retired_pending) == int(pynvml.NVML_FEATURE_ENABLED)
                if retired_pending is not None
                else None
            ),
            nvlink_errors=tuple(link_errors),
            pcie_replays=int(replays) if replays is not None else None,
        )
