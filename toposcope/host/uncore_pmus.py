"""Uncore PMUs that count inter-socket link traffic, and the events to open on them.

The uncore PMUs are found under sysfs ``bus/event_source/devices``
(:func:`detect_uncore_pmus`); event encodings are built from each PMU's own ``format/*``
files (:func:`parse_format`, :func:`encode_config`), so the bit layout is the kernel's, not
ours. Which package a link leads to comes from the kernel's UPI topology files
(``uncore_upi_X/dieY`` holding ``upi_Z,die_W``, Linux 6.2+; a die is taken to be a package,
true on the one-die-per-package Xeons that have these files); without them a two-package
machine needs no map (the peer is the other package), and links of a larger machine that
cannot be attributed are skipped (:func:`link_peer`).

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
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from toposcope.cpulist import parse_cpulist
from toposcope.topology.sysfs_files import read_int, read_text

LOG = logging.getLogger("toposcope.host.perf_uncore")

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
