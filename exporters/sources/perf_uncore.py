"""Inter-socket link traffic from uncore performance counters: Linux perf, or Intel PCM.

Two ways to read the same hardware counters (the data flits crossing each UPI/QPI link, or
AMD's data-fabric remote-link packets):

* :class:`UncoreLinkCounters` opens them itself with the ``perf_event_open(2)`` syscall
  (through ``ctypes``; no ``perf`` binary). The uncore PMUs are found under sysfs
  ``bus/event_source/devices`` (:func:`detect_uncore_pmus`); event encodings are built from
  each PMU's own ``format/*`` files, so the bit layout is the kernel's, not ours.
* :class:`PcmLinkTraffic` reads Intel PCM's ``pcm-sensor-server`` ``/metrics`` endpoint,
  for hosts where PCM already owns the counters.

Events used (the encodings and byte scales are those of Linux perf's pmu-events tables,
``tools/perf/pmu-events/arch/x86/<cpu>/uncore-interconnect.json`` and
``amdzen*/data-fabric.json``, and of Intel PCM ``src/cpucounters.cpp``):

=========  ======================================  ====================  ================
PMU        event                                   encoding              bytes per count
=========  ======================================  ====================  ================
UPI        ``UNC_UPI_TxL_FLITS.ALL_DATA``          event=0x02 umask=0x0f  64/9 (9 flits
                                                                          carry a 64 B line)
QPI        ``UNC_Q_TxL_FLITS_G0.DATA``             event=0x00 umask=0x02  8
amd_df     ``remote_outbound_data_controller_N``   event=0x7c7/0x807/     32
           (N = 0..3, Zen 1 to Zen 3)              0x847/0x887 umask=0x02
=========  ======================================  ====================  ================

Transmitted data is counted on each package, so every figure is *sent by* ``package``
*to* ``peer_package``. Which package a link leads to comes from the kernel's UPI
topology files (``uncore_upi_X/dieY`` holding ``upi_Z,die_W``, Linux 6.2+; a die is taken
to be a package, true on the one-die-per-package Xeons that have these files); without
them a two-package machine needs no map (the peer is the other package), and links of a
larger machine that cannot be attributed are skipped.

Reading the counters needs ``CAP_PERFMON`` (or ``CAP_SYS_ADMIN``) or
``kernel.perf_event_paranoid`` <= 0, because uncore events are system-wide. When that is
not granted, :meth:`UncoreLinkCounters.open` raises :class:`SourceError` saying so and
the cross-socket collector falls back to the next source.
"""

from __future__ import annotations

import ctypes
import errno
import http.client
import logging
import os
import platform
import re
import struct
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from prometheus_client.parser import text_string_to_metric_families

from toposcope.cpulist import parse_cpulist
from toposcope.errors import SourceError
from toposcope.topology.sysfs import read_int, read_text

LOG = logging.getLogger(__name__)

PmuKind = Literal["upi", "qpi", "amd_df"]

_PMU_NAME_RE = re.compile(r"^uncore_(upi|qpi)(?:_(\d+))?$")
_FORMAT_RE = re.compile(r"^(config[12]?):([\d,\-]+)$")
_DIE_FILE_RE = re.compile(r"^die(\d+)$")
_UPI_LINK_RE = re.compile(r"^upi_(\d+),die_(\d+)$")


# --------------------------------------------------------------------------- formats


@dataclass(frozen=True)
class FormatField:
    """One ``format/<name>`` file of a PMU: which ``perf_event_attr`` word and bits it fills.

    ``bits`` are ``(low, high)`` ranges, least significant part of the value first, as in
    ``config:0-7,32-35`` (AMD's 12-bit data-fabric event select).
    """

    target: str
    bits: tuple[tuple[int, int], ...]


def parse_format(text: str) -> FormatField:
    """Parse a PMU format descriptor such as ``config:0-7``, ``config:21`` or ``config1:0-31``.

    Raises ``ValueError`` for anything else.
    """
    match = _FORMAT_RE.match(text.strip())
    if match is None:
        raise ValueError(f"unrecognised PMU format {text.strip()!r}")
    ranges: list[tuple[int, int]] = []
    for part in match.group(2).split(","):
        low, _, high = part.partition("-")
        lo = int(low)
        hi = int(high) if high else lo
        if hi < lo:
            raise ValueError(f"unrecognised PMU format {text.strip()!r}")
        ranges.append((lo, hi))
    return FormatField(match.group(1), tuple(ranges))


def encode_config(formats: Mapping[str, FormatField], values: Mapping[str, int]) -> dict[str, int]:
    """Place named field values (``event``, ``umask``) into ``config``/``config1``/``config2``.

    Raises ``ValueError`` when the PMU lacks a field or a value does not fit its bits.
    """
    words = {"config": 0, "config1": 0, "config2": 0}
    for name, value in values.items():
        fmt = formats.get(name)
        if fmt is None:
            raise ValueError(f"PMU has no format field {name!r}")
        rest = value
        for lo, hi in fmt.bits:
            width = hi - lo + 1
            words[fmt.target] |= (rest & ((1 << width) - 1)) << lo
            rest >>= width
        if rest:
            raise ValueError(f"value {value:#x} does not fit format field {name!r}")
    return words


# --------------------------------------------------------------------------- detection


@dataclass(frozen=True)
class UncorePmu:
    """An uncore PMU that sees inter-socket link traffic.

    ``type`` is the ``perf_event_attr.type`` to open it with; ``cpus`` its ``cpumask``
    (one CPU per package or die: uncore events are opened on those CPUs). ``link`` is the
    link number of ``uncore_upi_X``/``uncore_qpi_X``; ``upi_links`` maps a die to the
    ``(link, die)`` at the other end, from the ``dieY`` files (empty when absent).
    """

    name: str
    kind: PmuKind
    type: int
    cpus: tuple[int, ...]
    formats: Mapping[str, FormatField]
    link: int | None = None
    upi_links: Mapping[int, tuple[int, int]] = field(default_factory=dict)


def _pmu_formats(path: Path) -> dict[str, FormatField]:
    formats: dict[str, FormatField] = {}
    try:
        entries = sorted((path / "format").iterdir())
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return formats
    for entry in entries:
        text = read_text(entry)
        if text is None:
            continue
        try:
            formats[entry.name] = parse_format(text)
        except ValueError:
            LOG.debug("ignoring PMU format %s: %r", entry, text.strip())
    return formats


def _upi_links(path: Path) -> dict[int, tuple[int, int]]:
    links: dict[int, tuple[int, int]] = {}
    try:
        entries = sorted(path.iterdir())
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return links
    for entry in entries:
        die = _DIE_FILE_RE.match(entry.name)
        if die is None:
            continue
        text = read_text(entry)
        target = _UPI_LINK_RE.match(text.strip()) if text is not None else None
        if target is not None:
            links[int(die.group(1))] = (int(target.group(1)), int(target.group(2)))
    return links


def detect_uncore_pmus(sysfs: Path | str) -> list[UncorePmu]:
    """Inter-socket link PMUs under ``<sysfs>/bus/event_source/devices``.

    Intel ``uncore_upi_*`` (Skylake-SP and later) and ``uncore_qpi_*`` (up to Broadwell-EP),
    AMD ``amd_df``. PMUs without a readable ``type`` or ``cpumask`` are left out.
    """
    base = Path(sysfs) / "bus" / "event_source" / "devices"
    try:
        entries = sorted(base.iterdir(), key=lambda p: p.name)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    pmus: list[UncorePmu] = []
    for entry in entries:
        kind: PmuKind
        link: int | None = None
        match = _PMU_NAME_RE.match(entry.name)
        if match is not None:
            kind = "upi" if match.group(1) == "upi" else "qpi"
            link = int(match.group(2)) if match.group(2) is not None else 0
        elif entry.name == "amd_df":
            kind = "amd_df"
        else:
            continue
        pmu_type = read_int(entry / "type")
        mask = read_text(entry / "cpumask")
        if pmu_type is None or mask is None:
            LOG.debug("PMU %s has no readable type or cpumask", entry.name)
            continue
        try:
            cpus = parse_cpulist(mask)
        except ValueError:
            LOG.debug("PMU %s has a malformed cpumask %r", entry.name, mask.strip())
            continue
        pmus.append(
            UncorePmu(
                name=entry.name,
                kind=kind,
                type=pmu_type,
                cpus=cpus,
                formats=_pmu_formats(entry),
                link=link,
                upi_links=_upi_links(entry) if kind == "upi" else {},
            )
        )
    return pmus


def link_peer(
    kind: PmuKind,
    upi_links: Mapping[int, tuple[int, int]],
    package: int,
    packages: Sequence[int],
) -> int | None:
    """The package at the far end of a link of ``package``, or ``None`` if unknown.

    ``upi_links`` is that link's die -> ``(link, die)`` map from ``uncore_upi_X/dieY``.

    Uses the UPI topology files when present (die = package), else the only other package
    of a two-package machine.
    """
    if kind == "upi" and package in upi_links:
        peer = upi_links[package][1]
        return peer if peer in packages and peer != package else None
    others = [p for p in packages if p != package]
    if len(others) == 1 and package in packages:
        return others[0]
    return None


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class LinkEvent:
    """An uncore event counting data sent over a link, and the bytes each count stands for."""

    name: str
    fields: Mapping[str, int]
    bytes_per_count: float


UPI_TX_DATA = LinkEvent("UNC_UPI_TxL_FLITS.ALL_DATA", {"event": 0x02, "umask": 0x0F}, 64 / 9)
QPI_TX_DATA = LinkEvent("UNC_Q_TxL_FLITS_G0.DATA", {"event": 0x00, "umask": 0x02}, 8.0)
AMD_DF_REMOTE_OUTBOUND: tuple[LinkEvent, ...] = tuple(
    LinkEvent(f"remote_outbound_data_controller_{i}", {"event": code, "umask": 0x02}, 32.0)
    for i, code in enumerate((0x7C7, 0x807, 0x847, 0x887))
)


@dataclass(frozen=True)
class CpuModel:
    """Vendor, family and model of the host CPU (``/proc/cpuinfo``)."""

    vendor: str
    family: int
    model: int


def read_cpu_model(procfs: Path | str) -> CpuModel | None:
    """The first processor's vendor/family/model from ``cpuinfo``; ``None`` if not shown."""
    text = read_text(Path(procfs) / "cpuinfo")
    if text is None:
        return None
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep:
            if found:
                break
            continue
        if key in ("vendor_id", "cpu family", "model") and key not in found:
            found[key] = value.strip()
    try:
        return CpuModel(found["vendor_id"], int(found["cpu family"]), int(found["model"]))
    except (KeyError, ValueError):
        return None


def _amd_df_supported(cpu: CpuModel | None) -> bool:
    """Zen 1/2 (family 0x17) and Zen 3 (family 0x19 outside the Zen 4 model ranges)."""
    if cpu is None or cpu.vendor != "AuthenticAMD":
        return False
    if cpu.family == 0x17:
        return True
    zen4 = (0x10 <= cpu.model <= 0x1F) or (0x60 <= cpu.model <= 0xAF)
    return cpu.family == 0x19 and not zen4


def link_events(kind: PmuKind, cpu: CpuModel | None) -> tuple[LinkEvent, ...]:
    """The events that count data sent over links of a PMU kind on this CPU (may be empty)."""
    if kind == "upi":
        return (UPI_TX_DATA,)
    if kind == "qpi":
        return (QPI_TX_DATA,)
    return AMD_DF_REMOTE_OUTBOUND if _amd_df_supported(cpu) else ()


# --------------------------------------------------------------------------- kernel interface


@dataclass(frozen=True)
class CounterEvent:
    """What one ``perf_event_open`` call opens: a PMU type, its config words, pid and CPU.

    ``pid=-1`` with a CPU counts everything on that CPU's package (uncore events).
    """

    pmu_type: int
    config: int
    cpu: int
    config1: int = 0
    config2: int = 0
    pid: int = -1


class CounterBackend(Protocol):
    """The kernel boundary: opens, reads and closes counters. Tests pass a fake of this."""

    def open(self, event: CounterEvent) -> int:
        """Open a counting event and return a handle; raise ``OSError`` as the syscall does."""
        ...

    def read(self, handle: int) -> int:
        """The counter's current 64-bit value."""
        ...

    def close(self, handle: int) -> None:
        """Release the counter."""
        ...


class _PerfEventAttr(ctypes.Structure):
    """``struct perf_event_attr`` up to ``config2`` (``PERF_ATTR_SIZE_VER1``, 72 bytes)."""

    _fields_ = (
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
        ("config2", ctypes.c_uint64),
    )


#: ``__NR_perf_event_open`` per architecture (asm/unistd*.h).
PERF_EVENT_OPEN_SYSCALL: Mapping[str, int] = {
    "x86_64": 298,
    "amd64": 298,
    "i386": 336,
    "i686": 336,
    "aarch64": 241,
    "riscv64": 241,
}
_PERF_FLAG_FD_CLOEXEC = 8


class PerfEventOpen:
    """The real backend: ``perf_event_open(2)`` via ``libc.syscall``, then ``read``/``close``."""

    def __init__(self, machine: str | None = None) -> None:
        self.machine = machine or platform.machine()
        self._number = PERF_EVENT_OPEN_SYSCALL.get(self.machine)
        libc = ctypes.CDLL(None, use_errno=True)
        self._syscall = libc.syscall
        self._syscall.restype = ctypes.c_long

    def open(self, event: CounterEvent) -> int:
        """Open ``event`` counting from now; ``OSError`` carries the syscall's errno."""
        if self._number is None:
            raise OSError(errno.ENOSYS, f"perf_event_open syscall number unknown on {self.machine}")
        attr = _PerfEventAttr()
        attr.type = event.pmu_type
        attr.size = ctypes.sizeof(_PerfEventAttr)
        attr.config = event.config
        attr.config1 = event.config1
        attr.config2 = event.config2
        fd = self._syscall(
            ctypes.c_long(self._number),
            ctypes.byref(attr),
            ctypes.c_int(event.pid),
            ctypes.c_int(event.cpu),
            ctypes.c_int(-1),
            ctypes.c_ulong(_PERF_FLAG_FD_CLOEXEC),
        )
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return int(fd)

    def read(self, handle: int) -> int:
        """The counter value (``read_format`` 0: one native-endian u64)."""
        data = os.read(handle, 8)
        if len(data) != 8:
            raise OSError(errno.EIO, f"short read of {len(data)} bytes from a perf counter")
        value: int = struct.unpack("=Q", data)[0]
        return value

    def close(self, handle: int) -> None:
        """Close the counter's file descriptor."""
        os.close(handle)


def perf_event_paranoid(procfs: Path | str) -> int | None:
    """``kernel.perf_event_paranoid`` (``None`` when the file is absent)."""
    return read_int(Path(procfs) / "sys" / "kernel" / "perf_event_paranoid")


# --------------------------------------------------------------------------- perf source


@dataclass(frozen=True)
class _PlannedCounter:
    pmu: str
    event_name: str
    package: int
    peer: int
    bytes_per_count: float
    event: CounterEvent


class UncoreLinkCounters:
    """Bytes sent between packages over their links, from uncore counters opened here.

    Built from the detected PMUs and the CPU -> package map; :meth:`open` opens every
    counter (all or nothing) and :meth:`read` returns ``{(package, peer_package): bytes}``
    counted since :meth:`open`, a monotonic counter for the exporter's lifetime.
    """

    name = "uncore"
    measured = True

    def __init__(
        self,
        pmus: Sequence[UncorePmu],
        cpu_package: Mapping[int, int],
        backend: CounterBackend,
        cpu_model: CpuModel | None = None,
        paranoid: int | None = None,
    ) -> None:
        self._backend = backend
        self._paranoid = paranoid
        self._handles: list[tuple[_PlannedCounter, int]] = []
        packages = sorted(set(cpu_package.values()))
        plan: list[_PlannedCounter] = []
        reasons: list[str] = []
        for pmu in pmus:
            events = link_events(pmu.kind, cpu_model)
            if not events:
                reasons.append(f"{pmu.name}: no known link-traffic event for this CPU model")
                continue
            for cpu in pmu.cpus:
                package = cpu_package.get(cpu)
                if package is None:
                    reasons.append(f"{pmu.name}: CPU {cpu} of its cpumask has no package")
                    continue
                peer = link_peer(pmu.kind, pmu.upi_links, package, packages)
                if peer is None:
                    reasons.append(f"{pmu.name}: no peer package known for package {package}")
                    continue
                for event in events:
                    try:
                        words = encode_config(pmu.formats, event.fields)
                    except ValueError as exc:
                        reasons.append(f"{pmu.name}: {exc}")
                        continue
                    plan.append(
                        _PlannedCounter(
                            pmu.name,
                            event.name,
                            package,
                            peer,
                            event.bytes_per_count,
                            CounterEvent(
                                pmu_type=pmu.type,
                                config=words["config"],
                                config1=words["config1"],
                                config2=words["config2"],
                                cpu=cpu,
                            ),
                        )
                    )
        for reason in reasons:
            LOG.debug("uncore: %s", reason)
        if not plan:
            detail = "; ".join(reasons) if reasons else "no uncore link PMU"
            raise SourceError(f"no usable uncore link counter ({detail})")
        self._plan = tuple(plan)

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """The ``(package, peer_package)`` pairs this source measures."""
        return sorted({(c.package, c.peer) for c in self._plan})

    def open(self) -> None:
        """Open every planned counter; on a failure close those opened, raise ``SourceError``."""
        if self._handles:
            return
        opened: list[tuple[_PlannedCounter, int]] = []
        for counter in self._plan:
            try:
                handle = self._backend.open(counter.event)
            except OSError as exc:
                for _, done in opened:
                    self._backend.close(done)
                hint = ""
                if exc.errno in (errno.EACCES, errno.EPERM):
                    hint = (
                        f" (kernel.perf_event_paranoid={self._paranoid}; uncore counters need "
                        "CAP_PERFMON or CAP_SYS_ADMIN, or perf_event_paranoid <= 0)"
                    )
                raise SourceError(
                    f"perf_event_open of {counter.event_name} on {counter.pmu} CPU "
                    f"{counter.event.cpu} failed: {exc.strerror or exc}{hint}"
                ) from exc
            opened.append((counter, handle))
        self._handles = opened

    def read(self) -> dict[tuple[int, int], float]:
        """Bytes sent from ``package`` to ``peer_package`` since the counters were opened."""
        if not self._handles:
            self.open()
        totals: dict[tuple[int, int], float] = {}
        for counter, handle in self._handles:
            try:
                count = self._backend.read(handle)
            except OSError as exc:
                raise SourceError(
                    f"reading {counter.event_name} on {counter.pmu} CPU {counter.event.cpu}"
                ) from exc
            key = (counter.package, counter.peer)
            totals[key] = totals.get(key, 0.0) + count * counter.bytes_per_count
        return totals

    def close(self) -> None:
        """Close every open counter."""
        for _, handle in self._handles:
            self._backend.close(handle)
        self._handles = []


# --------------------------------------------------------------------------- Intel PCM

_PCM_INCOMING_PREFIX = "Incoming_Data_Traffic_On_Link_"
_PCM_INCOMING_RE = re.compile(r"^Incoming_Data_Traffic_On_Link_(\d+)$")


def parse_pcm_incoming(text: str) -> dict[tuple[int, int], float]:
    """``{(socket, link): bytes}`` from pcm-sensor-server's Prometheus text.

    PCM prints, per socket and UPI/QPI link, ``Incoming_Data_Traffic_On_Link_<N>{aggregate=
    "system",source="uncore",socket="<S>"} <bytes>``: data bytes received by socket S on
    link N since the daemon started (``getIncomingQPILinkBytes``: 64 B per received data
    packet, from the ``RxL_FLITS`` data-flit counters). Only those lines are handed to the
    parser, so PCM's many other series (some with names the text format does not allow)
    cannot break it.
    """
    lines = [line for line in text.splitlines() if line.startswith(_PCM_INCOMING_PREFIX)]
    result: dict[tuple[int, int], float] = {}
    if not lines:
        return result
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            match = _PCM_INCOMING_RE.match(sample.name)
            socket = sample.labels.get("socket", "")
            if match is None or not socket.isdigit():
                continue
            key = (int(socket), int(match.group(1)))
            result[key] = result.get(key, 0.0) + float(sample.value)
    return result


def pcm_metrics_url(url: str) -> str:
    """The ``/metrics`` URL of a pcm-sensor-server given as ``http://host:port`` or in full."""
    parts = urllib.parse.urlsplit(url)
    if parts.path in ("", "/"):
        parts = parts._replace(path="/metrics")
    return urllib.parse.urlunsplit(parts)


class PcmClient:
    """Fetches pcm-sensor-server's Prometheus text (``GET /metrics``, 2 s timeout)."""

    def __init__(self, url: str, timeout: float = 2.0) -> None:
        self.url = pcm_metrics_url(url)
        self.timeout = timeout

    def fetch(self) -> str:
        """The endpoint's body; ``SourceError`` names the URL when it cannot be read."""
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout) as response:
                body: bytes = response.read()
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise SourceError(f"reading {self.url}: {exc}") from exc
        return body.decode("utf-8", errors="replace")


class PcmLinkTraffic:
    """Bytes between packages from PCM's per-link incoming data traffic.

    Bytes received by socket S on link N are attributed to ``(peer, S)``: sent by the
    package at the far end of link N. The far end comes from the kernel's UPI topology
    files (``upi_links``: uncore_upi link number -> die -> (link, die); PCM numbers links
    like the kernel) or, on two-package machines, is the other package. PCM's socket ids
    are taken to be the kernel's package ids.
    """

    name = "pcm"
    measured = True

    def __init__(
        self, client: PcmClient, upi_links: Mapping[int, Mapping[int, tuple[int, int]]]
    ) -> None:
        self._client = client
        self._upi_links = upi_links
        self._skipped: set[tuple[int, int]] = set()

    def read(self, packages: Sequence[int]) -> dict[tuple[int, int], float]:
        """``{(package, peer_package): bytes}`` sent from package to peer since PCM started."""
        incoming = parse_pcm_incoming(self._client.fetch())
        if not incoming:
            raise SourceError(f"{self._client.url} has no Incoming_Data_Traffic_On_Link_* series")
        totals: dict[tuple[int, int], float] = {}
        for (socket, link), value in sorted(incoming.items()):
            links = self._upi_links.get(link, {})
            sender = link_peer("upi", links, socket, packages)
            if sender is None:
                if (socket, link) not in self._skipped:
                    self._skipped.add((socket, link))
                    LOG.warning(
                        "pcm: cannot tell where link %d of socket %d leads; skipped", link, socket
                    )
                continue
            key = (sender, socket)
            totals[key] = totals.get(key, 0.0) + value
        return totals
