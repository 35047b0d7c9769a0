"""Reading a fake GPU's throughput and activity sources from its description.

``gpm: {sm_util, sm_occupancy, any_tensor_util, dram_bw_util, pcie_tx_per_sec,
pcie_rx_per_sec, nvlink_tx_per_sec, nvlink_rx_per_sec, links: {N: {nvlink_tx_per_sec,
nvlink_rx_per_sec}}, per_link}`` (GPM metrics: percent, MiB/s, NVLink per link; ``per_link:
false`` answers only the NVLink totals; leaving ``gpm`` out makes the GPU one without GPM),
``nvlink_throughput: {data_tx_kib, data_rx_kib, links: {N: {...}}}`` (the NVLink throughput
field values, KiB counters per link) and ``pcie_counters: {tx_bytes, rx_bytes, bits}`` (the
PCIe byte counter field values; ``bits`` 32, the default, answers them as the driver does, an
unsigned int that wraps at 2**32; 64 as an unsigned long long). Each is a reading (a constant,
a series or a counter); a metric left out answers NOT_SUPPORTED.
"""

from __future__ import annotations

from typing import Any

from toposcope.fake_nvml.fields import Fields
from toposcope.fake_nvml.values import Value

#: the throughput and activity fields of a GPU description
ACTIVITY_FIELDS = ("gpm", "nvlink_throughput", "pcie_counters")

#: GPM metrics in percent (at most 100)
GPM_PERCENT = ("sm_util", "sm_occupancy", "any_tensor_util", "dram_bw_util")
#: GPM metrics in MiB/s for the whole GPU
GPM_RATES = ("pcie_tx_per_sec", "pcie_rx_per_sec")
#: GPM metrics in MiB/s per NVLink
GPM_LINK_RATES = ("nvlink_tx_per_sec", "nvlink_rx_per_sec")
#: NVLink throughput field values, KiB per link
NVLINK_COUNTERS = ("data_tx_kib", "data_rx_kib")
#: PCIe byte counter field values
PCIE_COUNTERS = ("tx_bytes", "rx_bytes")
#: the widths a PCIe byte counter can have: 32 as driver 580 answers on an H200
#: (``tests/fixtures/real-gpu``), 64 for a counter that never wraps in practice
PCIE_COUNTER_BITS = (32, 64)


def _given(
    fields: Fields, names: tuple[str, ...], maximum: float | None = None
) -> dict[str, Value]:
    """The readings among ``names`` that the mapping gives (left out: not supported)."""
    return {name: value for name in names if (value := fields.value(name, maximum)) is not None}


def _by_link(fields: Fields, names: tuple[str, ...]) -> dict[int, dict[str, Value]]:
    """The ``links: {N: {...}}`` overrides of a mapping."""
    overrides = fields.raw("links") or {}
    if not isinstance(overrides, dict):
        raise fields.error(fields.path_of("links"), "expected a mapping of link number")
    by_link: dict[int, dict[str, Value]] = {}
    for key, raw in overrides.items():
        if isinstance(key, bool) or not isinstance(key, int) or key < 0:
            raise fields.error(fields.path_of("links"), f"link {key!r} is not a link number")
        sub = Fields(fields.source, fields.path_of(f"links.{key}"), raw, names)
        by_link[key] = _given(sub, names)
    return by_link


def parse_activity(fields: Fields) -> dict[str, Any]:
    """The :class:`~.spec.FakeGpu` throughput and activity keyword arguments of one GPU."""
    found: dict[str, Any] = {}
    gpm = fields.child("gpm", (*GPM_PERCENT, *GPM_RATES, *GPM_LINK_RATES, "links", "per_link"))
    if gpm is not None:
        found["gpm"] = {
            **_given(gpm, GPM_PERCENT, 100.0),
            **_given(gpm, (*GPM_RATES, *GPM_LINK_RATES)),
        }
        found["gpm_by_link"] = _by_link(gpm, GPM_LINK_RATES)
        found["gpm_per_link"] = gpm.boolean("per_link", True)
    links = fields.child("nvlink_throughput", (*NVLINK_COUNTERS, "links"))
    if links is not None:
        found["nvlink_throughput"] = _given(links, NVLINK_COUNTERS)
        found["nvlink_throughput_by_link"] = _by_link(links, NVLINK_COUNTERS)
    pcie = fields.child("pcie_counters", (*PCIE_COUNTERS, "bits"))
    if pcie is not None:
        found["pcie_counters"] = _given(pcie, PCIE_COUNTERS)
        bits = pcie.integer("bits", 32)
        if bits not in PCIE_COUNTER_BITS:
            raise pcie.error(pcie.path_of("bits"), f"must be 32 or 64, got {bits}")
        found["pcie_counter_bits"] = bits
    return found
