"""Per-scrape reader of RDMA NIC ports: ``/sys/class/infiniband/<device>/ports/<n>/``.

Every RDMA device the kernel knows (InfiniBand HCAs, RoCE NICs, iWARP) has a directory
under ``class/infiniband`` with ``fw_ver``, ``board_id`` and ``hca_type`` and a ``ports/``
directory; each port has ``state`` and ``phys_state`` (``"4: ACTIVE"``), ``rate``
(``"200 Gb/sec (4X HDR)"``), ``link_layer`` (``InfiniBand`` or ``Ethernet``) and three
counter directories (``Documentation/ABI/stable/sysfs-class-infiniband``):

- ``counters/``: the IBTA PortCounters (``symbol_error``, ``port_rcv_errors``,
  ``link_downed``, ...; fixed widths, see :data:`COUNTER_BITS`) and the traffic counters
  ``port_{xmit,rcv}_{data,packets}``, which are 32-bit on HCAs without extended counters
  (they then stop at 4294967295) and 64-bit where the kernel reads PortCountersExtended;
- ``counters_ext/`` (kernels before 4.5): the 64-bit ``port_{xmit,rcv}_{data,packets}_64``;
- ``hw_counters/`` (mlx5, irdma, ...): driver counters such as ``out_of_buffer``.

``*_data`` counters count 4-octet words: bytes are the value times 4, as node_exporter and
``perfquery`` compute them. Values are kept as read (words, not bytes) in
:class:`IbPort`; :func:`port_traffic` turns them into bytes and packets, preferring the
64-bit counter where both exist.

Only the counters published are read (:data:`ERROR_COUNTERS`, :data:`HW_ERROR_COUNTERS` and
the traffic counters): each read of a ``counters/`` file sends a performance-management
query to the HCA (and a ``hw_counters/`` read refreshes the driver's statistics from the
firmware once their ``lifespan``, 10 ms by default, has passed), so the rest are not asked
for.

Reading is bounded: at most :data:`MAX_DEVICES` devices and :data:`MAX_PORTS` ports each are
looked at, each file read up to :data:`MAX_FILE_BYTES`, and a counter is a decimal of at
most 20 digits below 2^64. A file that is missing, too long or malformed is left out
(warned about once); a port whose ``state`` cannot be read is left out, never the whole
device.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from toposcope.host.processes import read_all
from toposcope.identity.workload import bounded_label_value
from toposcope.topology.nics import ib_rate_gbps, ib_state_pair

LOG = logging.getLogger(__name__)

#: At most this many devices under ``class/infiniband`` are read (in name order).
MAX_DEVICES = 64
#: At most this many ports per device (HCAs have 1 or 2; a switch up to 255).
MAX_PORTS = 256
#: A sysfs attribute file longer than this is not one of these files.
MAX_FILE_BYTES = 256
#: The largest counter value (64 bits).
COUNTER_MAX = 2**64 - 1
#: The fastest rate believed, in Gb/s (an 8-lane 1.6 Tb/s port is far below it).
MAX_RATE_GBPS = 100_000.0

#: Width in bits of each IBTA PortCounters attribute exposed in ``counters/``; a counter at
#: its width's maximum has stopped counting (the IBTA counters saturate, never wrap). The
#: traffic counters are 32 bits only where the HCA lacks extended counters.
COUNTER_BITS: Mapping[str, int] = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
    "port_xmit_data": 32,
    "port_rcv_data": 32,
    "port_xmit_packets": 32,
    "port_rcv_packets": 32,
    "port_xmit_wait": 32,
}

#: The traffic counters of ``counters/``, their 64-bit ``counters_ext/`` twins, and the
#: ``(quantity, direction)`` each gives.
TRAFFIC_COUNTERS: tuple[tuple[str, str, str, str], ...] = (
    ("port_xmit_data", "port_xmit_data_64", "bytes", "tx"),
    ("port_rcv_data", "port_rcv_data_64", "bytes", "rx"),
    ("port_xmit_packets", "port_xmit_packets_64", "packets", "tx"),
    ("port_rcv_packets", "port_rcv_packets_64", "packets", "rx"),
)

#: The error counters of ``counters/`` (IBTA PortCounters, and ``port_rcv_discards``, which
#: some drivers add).
ERROR_COUNTERS: tuple[str, ...] = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_rcv_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
)

#: The error counters of ``hw_counters/`` (mlx5's names; other drivers share most of them):
#: transport retries and timeouts, receive buffer exhaustion, completion errors.
HW_ERROR_COUNTERS: tuple[str, ...] = (
    "duplicate_request",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "req_cqe_error",
    "req_remote_access_errors",
    "req_remote_invalid_request",
    "resp_cqe_error",
    "resp_local_length_error",
    "resp_remote_access_errors",
    "rnr_nak_retry_err",
)

#: The files read from ``counters/`` and ``counters_ext/``.
_COUNTERS_READ = (*ERROR_COUNTERS, *(t[0] for t in TRAFFIC_COUNTERS))
_EXT_READ = tuple(t[1] for t in TRAFFIC_COUNTERS)

#: Octets per unit of the ``*_data`` counters (they count 4-octet words).
OCTETS_PER_DATA_UNIT = 4

_DEVICE_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_COUNTER_RE = re.compile(rb"^\s*([0-9]{1,20})\s*$")
_WORD_RE = re.compile(r"^[A-Za-z][A-Za-z0-9 _-]{0,31}$")
_PORT_RE = re.compile(r"^[0-9]{1,3}$")


@dataclass(frozen=True)
class IbPort:
    """One port of an RDMA device, as read (counter values in the kernel's units).

    ``state``/``phys_state`` are the names after the id (``ACTIVE``, ``LinkUp``);
    ``rate_bytes_per_second`` is ``rate`` in Gb/s times 125,000,000 (node_exporter's
    conversion), ``None`` when unreadable. The counter maps hold the readable files of
    ``counters/``, ``counters_ext/`` and ``hw_counters/`` this reader asks for, by file name.
    """

    device: str
    port: int
    state_id: int
    state: str
    phys_state_id: int | None = None
    phys_state: str = ""
    rate_bytes_per_second: int | None = None
    link_layer: str = ""
    counters: Mapping[str, int] = field(default_factory=dict)
    counters_ext: Mapping[str, int] = field(default_factory=dict)
    hw_counters: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class IbDevice:
    """One RDMA device: its identity files (``""`` when absent) and its readable ports."""

    name: str
    board_id: str
    firmware_version: str
    hca_type: str
    ports: tuple[IbPort, ...]


@dataclass(frozen=True)
class PortTraffic:
    """A port's traffic in bytes and packets, by ``(quantity, direction)``.

    ``values`` maps ``("bytes", "tx")`` etc. to a count since the counter was last reset,
    from ``counters_ext/*_64`` where present, else from ``counters/``. ``saturated`` maps
    each fixed-width ``counters/`` file the published figures come from (the traffic
    counters used and the error counters of :data:`ERROR_COUNTERS`) to whether it stands at
    its width's maximum, where it has stopped counting.
    """

    values: Mapping[tuple[str, str], int]
    saturated: Mapping[str, bool]


def port_traffic(port: IbPort) -> PortTraffic:
    """Bytes and packets sent and received by ``port``, and which counters are stuck.

    The 64-bit ``counters_ext`` counter is preferred to the ``counters`` one; ``*_data``
    becomes bytes (times 4). A 32-bit traffic counter at 4294967295 is reported as
    saturated: its figure is a floor, not the traffic.
    """
    values: dict[tuple[str, str], int] = {}
    saturated: dict[str, bool] = {}
    for name, name_64, quantity, direction in TRAFFIC_COUNTERS:
        scale = OCTETS_PER_DATA_UNIT if quantity == "bytes" else 1
        extended = port.counters_ext.get(name_64)
        if extended is not None:
            values[(quantity, direction)] = extended * scale
            continue
        value = port.counters.get(name)
        if value is not None:
            values[(quantity, direction)] = value * scale
            saturated[name] = value == 2 ** COUNTER_BITS[name] - 1
    for name in ERROR_COUNTERS:
        bits = COUNTER_BITS.get(name)
        value = port.counters.get(name)
        if bits is not None and value is not None:
            saturated[name] = value == 2**bits - 1
    return PortTraffic(values, dict(sorted(saturated.items())))


class InfiniBandClass:
    """Reads every RDMA device and port under a sysfs root (``--path.sysfs``).

    Cheap when there is nothing: one failed ``listdir`` of ``class/infiniband``.
    """

    def __init__(self, sysfs: Path | str) -> None:
        self.sysfs = Path(sysfs)
        self.root = os.path.join(self.sysfs, "class", "infiniband")
        self._warned: set[tuple[str, str]] = set()

    def _warn_once(self, path: str, why: str) -> None:
        key = (path, why)
        if key not in self._warned:
            self._warned.add(key)
            LOG.warning("skipping %s: %s", path, why)

    def present(self) -> bool:
        """Whether ``class/infiniband`` exists (the kernel has RDMA support loaded)."""
        return os.path.isdir(self.root)

    def devices(self) -> list[IbDevice]:
        """Every readable device, sorted by name (empty when there is no RDMA device)."""
        names = self._listing(self.root, _DEVICE_NAME_RE, MAX_DEVICES)
        return [self._device(name) for name in names]

    def _listing(self, path: str, pattern: re.Pattern[str], limit: int) -> list[str]:
        try:
            entries = sorted(os.listdir(path))
        except OSError:
            return []
        names = [name for name in entries if pattern.match(name)]
        for name in entries:
            if not pattern.match(name):
                self._warn_once(os.path.join(path, name), "not a name this reader accepts")
        if len(names) > limit:
            self._warn_once(path, f"more than {limit} entries, the rest left out")
        return names[:limit]

    def _read(self, path: str) -> bytes | None:
        try:
            data = read_all(path, MAX_FILE_BYTES + 1)
        except OSError:
            return None
        if len(data) > MAX_FILE_BYTES:
            self._warn_once(path, f"over {MAX_FILE_BYTES} bytes")
            return None
        return data

    def _text(self, path: str) -> str:
        data = self._read(path)
        if data is None:
            return ""
        return bounded_label_value(data.decode("utf-8", "replace").strip())

    def _device(self, name: str) -> IbDevice:
        base = os.path.join(self.root, name)
        ports_dir = os.path.join(base, "ports")
        port_names = self._listing(ports_dir, _PORT_RE, MAX_PORTS)
        ports = [self._port(name, ports_dir, number) for number in port_names]
        return IbDevice(
            name=name,
            board_id=self._text(os.path.join(base, "board_id")),
            firmware_version=self._text(os.path.join(base, "fw_ver")),
            hca_type=self._text(os.path.join(base, "hca_type")),
            ports=tuple(sorted((p for p in ports if p is not None), key=lambda p: p.port)),
        )

    def _state(self, path: str) -> tuple[int, str] | None:
        data = self._read(path)
        if data is None:
            return None
        pair = ib_state_pair(data.decode("ascii", "replace"))
        if pair is None:
            self._warn_once(path, f"not 'id: NAME': {data[:40]!r}")
        return pair

    def _rate(self, path: str) -> int | None:
        data = self._read(path)
        if data is None:
            return None
        gbps = ib_rate_gbps(data.decode("ascii", "replace"))
        if gbps is None or gbps > MAX_RATE_GBPS:
            self._warn_once(path, f"not a rate in Gb/sec: {data[:40]!r}")
            return None
        return int(gbps * 125_000_000)

    def _counters(self, path: str, names: Iterable[str]) -> dict[str, int]:
        values: dict[str, int] = {}
        for name in names:
            file_path = os.path.join(path, name)
            data = self._read(file_path)
            if data is None:
                continue
            match = _COUNTER_RE.match(data)
            value = int(match.group(1)) if match is not None else COUNTER_MAX + 1
            if value > COUNTER_MAX:
                # "N/A (no PMA)" on ports without a performance-management agent
                if b"N/A" not in data:
                    self._warn_once(file_path, f"not a counter: {data[:40]!r}")
                continue
            values[name] = value
        return values

    def _port(self, device: str, ports_dir: str, number: str) -> IbPort | None:
        base = os.path.join(ports_dir, number)
        state = self._state(os.path.join(base, "state"))
        if state is None:
            return None
        phys = self._state(os.path.join(base, "phys_state"))
        layer_data = self._read(os.path.join(base, "link_layer"))
        layer = layer_data.decode("ascii", "replace").strip() if layer_data is not None else ""
        return IbPort(
            device=device,
            port=int(number),
            state_id=state[0],
            state=state[1],
            phys_state_id=phys[0] if phys is not None else None,
            phys_state=phys[1] if phys is not None else "",
            rate_bytes_per_second=self._rate(os.path.join(base, "rate")),
            link_layer=layer if _WORD_RE.match(layer) else "",
            counters=self._counters(os.path.join(base, "counters"), _COUNTERS_READ),
            counters_ext=self._counters(os.path.join(base, "counters_ext"), _EXT_READ),
            hw_counters=self._counters(os.path.join(base, "hw_counters"), HW_ERROR_COUNTERS),
        )
