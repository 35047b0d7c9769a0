"""Memory bandwidth per L3 domain from resctrl's MBM counters (Intel RDT, AMD PQoS).

With the ``resctrl`` filesystem mounted (``mount -t resctrl resctrl /sys/fs/resctrl``) on a
CPU with memory bandwidth monitoring, every monitoring group has
``mon_data/mon_L3_XX/mbm_total_bytes`` and ``mbm_local_bytes``: bytes of memory traffic
of the group's tasks, per L3 cache domain ``XX``, to all memory and to the domain's local
memory. With Sub-NUMA Clustering the kernel (6.11+) adds ``mon_L3_XX/mon_sub_L3_YY``
holding the same files per NUMA node ``YY``.

The host-wide figure is the sum over the root group and every top-level control group
(a CTRL_MON group's files already include its MON groups, kernel resctrl.rst). Groups come
and go, and a new group's counters start at 0, so the sum is accumulated from per-group
increases: it never goes backwards when a group is removed. A file reading
``Unavailable``/``Unassigned``/``Error`` is skipped for that scrape; its increase is
counted at the next good reading.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from toposcope.config import HostPaths
from toposcope.topology.sysfs_files import read_text

LOG = logging.getLogger(__name__)

_DOMAIN_RE = re.compile(r"^mon_L3_(\d+)$")
_SUB_DOMAIN_RE = re.compile(r"^mon_sub_L3_(\d+)$")
_NOT_GROUPS = frozenset({"info", "mon_groups", "mon_data"})


@dataclass(frozen=True, order=True)
class MbmDomain:
    """A monitoring domain: an L3 cache id, and the SNC node when the kernel splits it."""

    l3: int
    node: int | None = None


@dataclass(frozen=True)
class MbmTotals:
    """Host-wide MBM bytes of one domain since the exporter started reading (monotonic).

    ``remote_bytes`` is ``total - local``, held monotonic against read skew between the
    two files.
    """

    local_bytes: float
    remote_bytes: float


def _unescape_mount(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def resctrl_mount(paths: HostPaths) -> Path | None:
    """Where resctrl is mounted, resolved under ``rootfs``; ``None`` when it is not.

    Reads ``mountinfo`` of PID 1, then of ``self`` (the host's view first, as
    node_exporter does), and falls back to ``<rootfs>/sys/fs/resctrl`` when that
    directory has ``mon_data``.
    """
    for owner in ("1", "self"):
        text = read_text(paths.procfs / owner / "mountinfo")
        if text is None:
            continue
        for line in text.splitlines():
            left, sep, right = line.partition(" - ")
            fields = left.split()
            if sep and len(fields) >= 5 and right.split()[:1] == ["resctrl"]:
                return paths.in_rootfs(_unescape_mount(fields[4]))
    default = paths.in_rootfs("/sys/fs/resctrl")
    return default if (default / "mon_data").is_dir() else None


def read_counter(path: Path) -> int | None:
    """An MBM byte counter file's value, ``None`` when unreadable or not a number."""
    text = read_text(path)
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isdigit() else None


def domain_dirs(mon_data: Path) -> Iterator[tuple[MbmDomain, Path]]:
    """The monitoring domains of one group's ``mon_data`` and the directory of each."""
    return ResctrlMbm._domain_dirs(mon_data)


class ResctrlMbm:
    """Reads MBM ``mbm_total_bytes``/``mbm_local_bytes`` of every group under a resctrl root."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self._lock = threading.Lock()
        self._last: dict[tuple[str, MbmDomain, str], int] = {}
        self._sums: dict[tuple[MbmDomain, str], int] = {}
        self._remote: dict[MbmDomain, float] = {}

    def available(self) -> bool:
        """True when the root group shows at least one domain with both MBM files."""
        return any(
            (d / "mbm_total_bytes").exists() and (d / "mbm_local_bytes").exists()
            for _, d in self._domain_dirs(self.root / "mon_data")
        )

    def _groups(self) -> Iterator[tuple[str, Path]]:
        yield "", self.root / "mon_data"
        try:
            entries = sorted(self.root.iterdir())
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return
        for entry in entries:
            if entry.name not in _NOT_GROUPS and (entry / "mon_data").is_dir():
                yield entry.name, entry / "mon_data"

    @staticmethod
    def _domain_dirs(mon_data: Path) -> Iterator[tuple[MbmDomain, Path]]:
        try:
            entries = sorted(mon_data.iterdir())
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return
        for entry in entries:
            match = _DOMAIN_RE.match(entry.name)
            if match is None:
                continue
            l3 = int(match.group(1))
            try:
                subs = sorted(
                    (int(m.group(1)), p)
                    for p in entry.iterdir()
                    if (m := _SUB_DOMAIN_RE.match(p.name)) is not None
                )
            except (NotADirectoryError, PermissionError):
                continue
            if subs:
                for node, sub in subs:
                    yield MbmDomain(l3, node), sub
            else:
                yield MbmDomain(l3), entry

    def read(self) -> dict[MbmDomain, MbmTotals]:
        """Host-wide local and remote bytes per domain, accumulated across scrapes.

        The first reading counts everything the groups hold (since their creation); each
        later one adds per-group increases (a decrease means the group was recreated: its
        new value is the increase).
        """
        with self._lock:
            seen: set[tuple[str, MbmDomain, str]] = set()
            for group, mon_data in self._groups():
                for domain, path in self._domain_dirs(mon_data):
                    for kind in ("total", "local"):
                        value = read_counter(path / f"mbm_{kind}_bytes")
                        if value is None:
                            continue
                        key = (group, domain, kind)
                        seen.add(key)
                        previous = self._last.get(key)
                        increase = value - previous if previous is not None else value
                        if increase < 0:
                            increase = value
                        self._last[key] = value
                        self._sums[(domain, kind)] = self._sums.get((domain, kind), 0) + increase
            for key in [k for k in self._last if k not in seen and not (self.root / k[0]).exists()]:
                del self._last[key]
            result: dict[MbmDomain, MbmTotals] = {}
            domains = sorted({domain for domain, _ in self._sums})
            for domain in domains:
                total = self._sums.get((domain, "total"))
                local = self._sums.get((domain, "local"))
                if total is None or local is None:
                    continue
                remote = max(self._remote.get(domain, 0.0), float(total - local))
                self._remote[domain] = remote
                result[domain] = MbmTotals(local_bytes=float(local), remote_bytes=remote)
            return result
