"""A simulated GPU's traffic and activity counters as its fake NVML answers them.

The cluster integrates each GPU's bytes and activity (:class:`~toposcope.sim.gpu_traffic.
GpuCounters`) exactly between events; on every update of a node the fake NVML's readings are
set from them (:class:`~toposcope.sim.nodefs.NodeExporter`), in the form the GPU's model has:

* without GPM (before Hopper): the field values' byte counters, :func:`field_value_readings`:
  ``pcie_counters`` (bytes) and ``nvlink_throughput`` per link (KiB). Each is the counter's
  value at the update, held until the next one: every scrape updates the node first, so the
  exporter reads the exact integral, and a job that stops or moves between two scrapes can
  never make a counter go back (a ramp at the last rate could overshoot);
* with GPM: :func:`gpm_readings`, the counters' change since the previous update divided by
  the counter time between them, as GPM averages its metrics over the interval between two
  samples (each scrape takes one right after the update): percent for SM, occupancy, tensor
  and DRAM activity, MiB/s for PCIe and each NVLink.

A GPU's traffic to an NVLinked peer is spread evenly over the links that reach it
(:func:`~toposcope.sim.nvml_descriptions.nvlink_lanes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toposcope.sim.gpu_traffic import GpuCounters

#: Bytes in a MiB (GPM rates) and a KiB (NVLink throughput field values).
MIB = 1048576.0
KIB = 1024.0

#: A GPU's NVLinked peers -> the indices of its links that reach each.
Lanes = Mapping[int, tuple[int, ...]]


def per_link(lanes: Lanes, by_peer: Mapping[int, float]) -> dict[int, float]:
    """Per NVLink index, its share of the amounts sent to (or received from) each peer."""
    links: dict[int, float] = {}
    for peer, amount in by_peer.items():
        reach = lanes.get(peer, ())
        for link in reach:
            links[link] = links.get(link, 0.0) + amount / len(reach)
    return links


def field_value_readings(counters: GpuCounters, lanes: Lanes) -> dict[str, Any]:
    """The ``pcie_counters`` and ``nvlink_throughput_by_link`` readings of a GPU without
    GPM: its byte counters now (see the module docstring).
    """
    tx, rx = per_link(lanes, counters.nvlink_tx), per_link(lanes, counters.nvlink_rx)
    return {
        "pcie_counters": {"tx_bytes": counters.pcie_tx, "rx_bytes": counters.pcie_rx},
        "nvlink_throughput_by_link": {
            link: {"data_tx_kib": tx.get(link, 0.0) / KIB, "data_rx_kib": rx.get(link, 0.0) / KIB}
            for link in sorted(set(tx) | set(rx))
        },
    }


def _since(now: Mapping[int, float], before: Mapping[int, float]) -> dict[int, float]:
    """Per peer, what a per-peer counter added since ``before``."""
    return {peer: value - before.get(peer, 0.0) for peer, value in now.items()}


def gpm_readings(
    now: GpuCounters, before: GpuCounters, seconds: float, lanes: Lanes
) -> dict[str, Any]:
    """The ``gpm`` and ``gpm_by_link`` readings of a GPU with GPM: the means of its flows
    over the ``seconds`` (> 0) of counter time from ``before`` to ``now``.
    """

    def percent(added: float) -> float:
        return min(max(added / seconds * 100.0, 0.0), 100.0)

    def mib_per_second(added: float) -> float:
        return max(added / seconds / MIB, 0.0)

    tx = per_link(lanes, _since(now.nvlink_tx, before.nvlink_tx))
    rx = per_link(lanes, _since(now.nvlink_rx, before.nvlink_rx))
    return {
        "gpm": {
            "sm_util": percent(now.sm_active - before.sm_active),
            "sm_occupancy": percent(now.sm_occupancy - before.sm_occupancy),
            "any_tensor_util": percent(now.tensor_active - before.tensor_active),
            "dram_bw_util": percent(now.dram_active - before.dram_active),
            "pcie_tx_per_sec": mib_per_second(now.pcie_tx - before.pcie_tx),
            "pcie_rx_per_sec": mib_per_second(now.pcie_rx - before.pcie_rx),
            "nvlink_tx_per_sec": 0.0,
            "nvlink_rx_per_sec": 0.0,
        },
        "gpm_by_link": {
            link: {
                "nvlink_tx_per_sec": mib_per_second(tx.get(link, 0.0)),
                "nvlink_rx_per_sec": mib_per_second(rx.get(link, 0.0)),
            }
            for link in sorted(set(tx) | set(rx))
        },
    }
