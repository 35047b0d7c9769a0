"""A simulated node's NICs in its sysfs tree, with port counters that follow its network jobs.

Every NIC of the node's template is written where a real node's kernel shows it, pointing at
its PCI function (which :mod:`toposcope.sim.machines` places behind the PCIe switch of its
GPUs), so that the exporter's topology, its ``infiniband`` collector and node_exporter read
them as they read a real node:

* an RDMA device (``mlx5_N``): ``class/infiniband/<dev>/{device, fw_ver, board_id,
  hca_type, node_type}`` and one port, ``ports/1/{state, phys_state, rate, link_layer, lid}``
  (``4: ACTIVE``, ``5: LinkUp`` where the scenario's fabric cables the NIC to a switch or
  lists no ports for the node; ``1: DOWN``, ``3: Disabled`` for a NIC it leaves uncabled, as
  a site disables the ports it does not use so that they raise no alert)
  with ``counters/`` (the IBTA error counters, all 0, and the 32-bit traffic counters,
  which stop at their maximum as old HCAs' do) and ``counters_ext/`` (the 64-bit
  ``port_{xmit,rcv}_{data,packets}_64``; ``*_data`` count 4-byte words);
* any other NIC (``eth0``): ``class/net/<if>/{device, type, dev_port, operstate, speed}``;
* per RDMA device ``class/infiniband_verbs/uverbsN/ibdev``, and a part of a multi-node job
  holds every ``/dev/infiniband/uverbsN`` open (:meth:`NicTree.uverbs_files`), as NCCL does
  without ``NCCL_IB_HCA``, so the exporter sees which HCAs each rank may use.

Traffic: a workload that is a part of a multi-node job (``network``: the scenario's
``fabric.multi_node_jobs``, :mod:`toposcope.sim.scenario_fabric`) sends and receives
:data:`NET_BYTES_PER_GPU` x its ``comm_intensity`` per second for each GPU it holds, through
that GPU's nearest cabled RDMA NICs (behind the same PCIe switch, else on its NUMA node, else
any cabled one), split evenly between them, while it runs (not while paused). The counters
add the current rates times the counter time since the previous update, so a change between
two scrapes is counted from the second one: close enough for rates and dashboards, not an
exact integral.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Container, Iterable
from pathlib import Path

from toposcope.sim.cluster_state import NodeSnapshot, WorkloadSnapshot
from toposcope.sim.nodetemplate import NicSpec, NodeTemplate

#: bytes per second each GPU of a multi-node job moves through the network at comm_intensity 1
NET_BYTES_PER_GPU = 10e9
#: bytes per packet (the InfiniBand MTU most fabrics run)
MTU_BYTES = 4096
#: the IBTA link word of each signalling rate (4 lanes)
_RATE_WORDS = {100: "4X EDR", 200: "4X HDR", 400: "4X NDR", 800: "4X XDR"}
#: the error counters of ``counters/``, all 0 on a healthy simulated port
ERROR_FILES = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
)
_MAX_32 = 2**32 - 1
_MAX_64 = 2**64 - 1
_RDMA_NAME = re.compile(r"mlx[45]_[0-9]{1,3}")
#: an interface name (IFNAMSIZ) and a PCI bus id: anything else is not written
_INTERFACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")
_BUS_ID = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", re.IGNORECASE)


def is_rdma(nic: NicSpec) -> bool:
    """Whether a template NIC is an RDMA device (``mlx5_N``) rather than a plain interface."""
    return _RDMA_NAME.fullmatch(nic.name) is not None


def nearest_nics(
    template: NodeTemplate, cabled: Collection[str] | None = None
) -> dict[int, tuple[str, ...]]:
    """Each GPU's nearest RDMA NICs among the ``cabled`` ones (``None``: all): behind its
    switch, else on its NUMA node, else all of them.
    """
    rdma = [nic for nic in template.nics if is_rdma(nic) and (cabled is None or nic.name in cabled)]
    nearest: dict[int, tuple[str, ...]] = {}
    for gpu in template.gpus:
        same_switch = [n.name for n in rdma if gpu.switch is not None and n.switch == gpu.switch]
        same_node = [n.name for n in rdma if n.numa_node == gpu.numa_node]
        nearest[gpu.index] = tuple(same_switch or same_node or [n.name for n in rdma])
    return nearest


def nic_rates(
    nearest: dict[int, tuple[str, ...]],
    workloads: Iterable[WorkloadSnapshot],
    network: Container[str],
) -> dict[str, float]:
    """Bytes per second through each RDMA NIC now (each direction; see the module docstring)."""
    rates: dict[str, float] = {}
    for workload in workloads:
        if workload.name not in network or workload.paused:
            continue
        per_gpu = NET_BYTES_PER_GPU * workload.spec.comm_intensity
        for gpu in workload.allocation.gpus:
            nics = nearest.get(gpu, ())
            for nic in nics:
                rates[nic] = rates.get(nic, 0.0) + per_gpu / len(nics)
    return rates


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="ascii")


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    os.symlink(target, path)


class NicTree:
    """The NICs of one simulated node under ``<root>/sys/class`` (see the module docstring).

    ``network`` names the workloads that are parts of multi-node jobs (any container: a
    live view answers for parts that appear later, as a Slurm job's do when it is submitted);
    ``cabled`` the NICs that reach a switch (``None``: all).
    """

    def __init__(
        self,
        root: Path,
        template: NodeTemplate,
        network: Container[str],
        cabled: Collection[str] | None = None,
    ) -> None:
        self._class = root / "sys" / "class"
        self._nearest = nearest_nics(template, cabled)
        self._network = network
        self._cabled = cabled
        self._rdma = [
            nic for nic in template.nics if is_rdma(nic) and _BUS_ID.fullmatch(nic.pci_bus_id)
        ]
        self._bytes = {nic.name: 0.0 for nic in self._rdma}
        self._verbs: list[str] = []
        self._time: float | None = None
        for number, nic in enumerate(template.nics):
            if _BUS_ID.fullmatch(nic.pci_bus_id) is None:
                continue
            if is_rdma(nic):
                self._write_rdma(nic, number)
            elif _INTERFACE.fullmatch(nic.name) is not None:
                self._write_net(nic)
        self._write_counters()

    def uverbs_files(self, workload: str) -> list[str]:
        """The ``/dev/infiniband/uverbsN`` files a workload's process holds open: every RDMA
        device for a part of a multi-node job (NCCL opens each HCA it may use, all of them
        without ``NCCL_IB_HCA``), none for any other workload.
        """
        if workload not in self._network:
            return []
        return [f"/dev/infiniband/uverbs{number}" for number in range(len(self._rdma))]

    def _write_rdma(self, nic: NicSpec, number: int) -> None:
        verbs = self._class / "infiniband_verbs" / f"uverbs{len(self._verbs)}"
        self._verbs.append(nic.name)
        _write(verbs / "ibdev", f"{nic.name}\n")
        base = self._class / "infiniband" / nic.name
        _link(base / "device", f"../../../bus/pci/devices/{nic.pci_bus_id}")
        _write(base / "fw_ver", "20.39.1002\n")
        _write(base / "board_id", "MT_0000000223\n")
        _write(base / "hca_type", "MT4123\n")
        _write(base / "node_type", "1: CA\n")
        port = base / "ports" / "1"
        up = self._cabled is None or nic.name in self._cabled
        _write(port / "state", "4: ACTIVE\n" if up else "1: DOWN\n")
        _write(port / "phys_state", "5: LinkUp\n" if up else "3: Disabled\n")
        word = _RATE_WORDS.get(nic.speed_gbps, "4X")
        _write(port / "rate", f"{nic.speed_gbps} Gb/sec ({word})\n")
        _write(port / "link_layer", "InfiniBand\n")
        _write(port / "lid", f"0x{number + 1:x}\n")
        for name in ERROR_FILES:
            _write(port / "counters" / name, "0\n")

    def _write_net(self, nic: NicSpec) -> None:
        base = self._class / "net" / nic.name
        _link(base / "device", f"../../../bus/pci/devices/{nic.pci_bus_id}")
        _write(base / "type", "1\n")
        _write(base / "dev_port", "0\n")
        _write(base / "operstate", "up\n")
        _write(base / "speed", f"{nic.speed_gbps * 1000}\n")

    def update(self, snap: NodeSnapshot) -> None:
        """Add the traffic since the previous update and write the counters."""
        if self._time is not None and snap.counter_time > self._time:
            seconds = snap.counter_time - self._time
            for nic, rate in nic_rates(self._nearest, snap.workloads, self._network).items():
                self._bytes[nic] += rate * seconds
        self._time = snap.counter_time
        self._write_counters()

    def _write_counters(self) -> None:
        for nic in self._rdma:
            port = self._class / "infiniband" / nic.name / "ports" / "1"
            words = min(int(self._bytes[nic.name] / 4), _MAX_64)
            packets = min(int(self._bytes[nic.name] / MTU_BYTES), _MAX_64)
            for direction in ("xmit", "rcv"):
                _write(port / "counters_ext" / f"port_{direction}_data_64", f"{words}\n")
                _write(port / "counters_ext" / f"port_{direction}_packets_64", f"{packets}\n")
                _write(port / "counters" / f"port_{direction}_data", f"{min(words, _MAX_32)}\n")
                _write(
                    port / "counters" / f"port_{direction}_packets", f"{min(packets, _MAX_32)}\n"
                )
