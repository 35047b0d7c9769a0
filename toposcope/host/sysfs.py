"""Per-scrape readers of sysfs: NUMA node memory, numastat counters and L3 cache domains.

The topology builder (:mod:`toposcope.topology.sysfs`) reads what rarely changes; this
module reads what changes on every scrape. It reuses that module's helpers
(``parse_meminfo_lines``, ``node_dirs``, ``read_int``) so both agree on paths and units; the
per-scrape files are read as bytes with ``os.open``/``os.read`` (no ``pathlib`` on the
scrape path). Units are converted
here, once: meminfo ``kB`` fields become bytes, hugepage counts become bytes. numastat
values stay counts of pages, as the kernel reports them.

Malformed lines (a garbled ``numastat`` or ``meminfo`` line) are skipped with a warning
logged once per file and line, and the rest of the file is still used, so one bad line
never blanks a node. A file that is missing or unreadable gives ``None``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from toposcope.cpulist import parse_cpulist
from toposcope.host.procfs import read_or_none
from toposcope.topology.sysfs_files import (
    cpu_dir,
    node_dirs,
    numa_dir,
    parse_meminfo_lines,
    read_int,
)

LOG = logging.getLogger(__name__)

#: ``node*/numastat`` keys and the ``result`` label each becomes (numastat(8) wording).
NUMASTAT_RESULTS: Mapping[str, str] = {
    "numa_hit": "hit",
    "numa_miss": "miss",
    "numa_foreign": "foreign",
    "interleave_hit": "interleave_hit",
    "local_node": "local",
    "other_node": "other",
}

#: ``node*/meminfo`` keys and the ``type`` label of toposcope_numa_memory_pages_bytes.
MEMINFO_PAGE_TYPES: Mapping[str, str] = {
    "FilePages": "file",
    "AnonPages": "anon",
    "Shmem": "shmem",
    "Slab": "slab",
}

# A count has at most 20 digits (64 bits); a longer one makes the line malformed.
_NUMASTAT_LINE_RE = re.compile(r"^([a-z_]+)\s+([0-9]{1,20})$")
_HUGEPAGES_DIR_RE = re.compile(r"^hugepages-(\d+)kB$")
_CPU_DIR_RE = re.compile(r"^cpu(\d+)$")


def parse_numastat(text: str) -> tuple[dict[str, int], list[str]]:
    """Parse ``node*/numastat`` (``numa_hit 420476`` lines) into counts of pages.

    Returns the values and the non-blank lines that were not ``key count`` (for the
    caller to log); keys are the kernel's (``numa_hit``, ``other_node``, ...).
    """
    values: dict[str, int] = {}
    bad: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        match = _NUMASTAT_LINE_RE.match(line)
        if match is None:
            bad.append(line)
            continue
        values[match.group(1)] = int(match.group(2))
    return values, bad


@dataclass(frozen=True)
class NodeMemory:
    """Memory of one NUMA node from ``node*/meminfo`` (and its hugepage pools), in bytes.

    ``used_bytes`` is the kernel's ``MemUsed`` (``MemTotal - MemFree``), computed when the
    line is absent. ``pages_bytes`` maps a page type (``file``, ``anon``, ``shmem``,
    ``slab``, ``hugepages``) to bytes; types the file does not show are absent. Matches
    ``numastat -m`` for the same node.
    """

    node: int
    total_bytes: int | None
    free_bytes: int | None
    used_bytes: int | None
    pages_bytes: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeNumastat:
    """Page-allocation counters of one NUMA node from ``node*/numastat`` (``numastat -n``).

    ``counts`` maps the ``result`` label (``hit``, ``miss``, ``foreign``, ``local``,
    ``other``, ``interleave_hit``) to a number of pages since boot; absent keys were not
    in the file.
    """

    node: int
    counts: Mapping[str, int]


class _NodeFiles(NamedTuple):
    """The files of one node directory read on every scrape, as ``os.open`` paths."""

    meminfo: str
    numastat: str
    #: ``(hugepages-<size>kB/nr_hugepages path, bytes per page)`` for each pool size
    hugepages: tuple[tuple[str, int], ...]


class SysfsNodes:
    """Reads NUMA node memory and allocation counters under a sysfs root (``--path.sysfs``).

    What does not change between scrapes (which node directories exist, which are online,
    each node's hugepage pool sizes) is kept while the node directory's modification time
    and ``devices/system/node/online`` stay the same (one ``stat`` and one small read per
    scrape); the figures themselves are read on every call.
    """

    def __init__(self, sysfs: Path | str) -> None:
        self.sysfs = Path(sysfs)
        self._numa_dir = numa_dir(self.sysfs)
        self._online_path = os.path.join(self.sysfs, "devices", "system", "node", "online")
        self._warned: set[tuple[Path, str]] = set()
        self._key: tuple[int | None, bytes | None] | None = None
        self._ids: list[int] = []
        self._files: dict[int, _NodeFiles] = {}

    def _warn_once(self, path: Path | str, line: str) -> None:
        key = (Path(path), line)
        if key in self._warned:
            return
        self._warned.add(key)
        LOG.warning("skipping malformed line in %s: %r", path, line)

    def _change_key(self) -> tuple[int | None, bytes | None]:
        try:
            mtime: int | None = os.stat(self._numa_dir).st_mtime_ns
        except OSError:
            mtime = None
        return mtime, read_or_none(self._online_path)

    def node_ids(self) -> list[int]:
        """Online NUMA node ids that have a directory (sorted; empty without NUMA).

        Nodes missing from ``devices/system/node/online`` (offline nodes keep a directory on
        some kernels) are left out, as the topology leaves them out; without that file, or
        with a garbled one (warned about once), every directory counts.
        """
        key = self._change_key()
        if key != self._key:
            self._ids = self._online_ids(key[1])
            self._files = {node: self._read_layout(node) for node in self._ids}
            self._key = key
        return list(self._ids)

    def _online_ids(self, online_data: bytes | None) -> list[int]:
        ids = list(node_dirs(self.sysfs))
        if online_data is None:
            return ids
        text = online_data.decode("ascii", "replace")
        try:
            online = set(parse_cpulist(text))
        except ValueError:
            self._warn_once(self._online_path, text.strip())
            return ids
        return [n for n in ids if n in online]

    def _read_layout(self, node: int) -> _NodeFiles:
        base = os.path.join(self._numa_dir, f"node{node}")
        pools: list[tuple[str, int]] = []
        try:
            names = sorted(os.listdir(os.path.join(base, "hugepages")))
        except OSError:
            names = []
        for name in names:
            match = _HUGEPAGES_DIR_RE.match(name)
            if match is not None:
                count_path = os.path.join(base, "hugepages", name, "nr_hugepages")
                pools.append((count_path, int(match.group(1)) * 1024))
        return _NodeFiles(
            os.path.join(base, "meminfo"), os.path.join(base, "numastat"), tuple(pools)
        )

    def _node_files(self, node: int) -> _NodeFiles | None:
        files = self._files.get(node)
        if files is not None:
            return files
        if not (self._numa_dir / f"node{node}").is_dir():
            return None
        return self._read_layout(node)

    def node_memory(self, node: int) -> NodeMemory | None:
        """The node's meminfo in bytes; ``None`` when ``meminfo`` is missing or unreadable."""
        files = self._node_files(node)
        if files is None:
            return None
        data = read_or_none(files.meminfo)
        if data is None:
            LOG.debug("no readable %s", files.meminfo)
            return None
        values, bad = parse_meminfo_lines(data.decode("ascii", "replace"))
        for line in bad:
            self._warn_once(files.meminfo, line)
        total = values.get("MemTotal")
        free = values.get("MemFree")
        used = values.get("MemUsed")
        if used is None and total is not None and free is not None:
            used = total - free
        pages = {label: values[key] for key, label in MEMINFO_PAGE_TYPES.items() if key in values}
        huge = self._hugepages_bytes(files, values.get("HugePages_Total"))
        if huge is not None:
            pages["hugepages"] = huge
        return NodeMemory(node, total, free, used, pages)

    @staticmethod
    def _hugepages_bytes(files: _NodeFiles, total_pages: int | None) -> int | None:
        """Bytes in the node's hugepage pools: sum of ``nr_hugepages`` x size over sizes.

        Falls back to ``0`` when there is no pool directory and meminfo says
        ``HugePages_Total: 0``; ``None`` when the size cannot be known.
        """
        total: int | None = None
        for count_path, page_bytes in files.hugepages:
            data = read_or_none(count_path)
            try:
                count = int(data, 0) if data is not None else None
            except ValueError:
                count = None
            if count is None:
                continue
            total = (total or 0) + count * page_bytes
        if total is None and total_pages == 0:
            return 0
        return total

    def node_numastat(self, node: int) -> NodeNumastat | None:
        """The node's numastat counters; ``None`` when the file is missing or unreadable."""
        files = self._node_files(node)
        if files is None:
            return None
        data = read_or_none(files.numastat)
        if data is None:
            LOG.debug("no readable %s", files.numastat)
            return None
        values, bad = parse_numastat(data.decode("ascii", "replace"))
        for line in bad:
            self._warn_once(files.numastat, line)
        counts = {NUMASTAT_RESULTS[k]: v for k, v in values.items() if k in NUMASTAT_RESULTS}
        return NodeNumastat(node, counts)

    def numastat(self) -> dict[int, NodeNumastat]:
        """numastat of every node that has a readable file, keyed by node id."""
        result: dict[int, NodeNumastat] = {}
        for node in self.node_ids():
            reading = self.node_numastat(node)
            if reading is not None:
                result[node] = reading
        return result

    def l3_cache_cpus(self) -> dict[int, tuple[int, ...]]:
        """L3 cache id -> the CPUs sharing it, from ``cpu*/cache/index*/{level,id}``.

        This is the domain resctrl numbers ``mon_L3_XX`` by. CPUs whose cache directories
        have no ``id`` file (kernels before 4.14) are left out, so the map may be empty.
        """
        domains: dict[int, set[int]] = {}
        base = cpu_dir(self.sysfs)
        try:
            entries = list(base.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return {}
        for entry in entries:
            match = _CPU_DIR_RE.match(entry.name)
            if match is None:
                continue
            cpu = int(match.group(1))
            try:
                caches = list((entry / "cache").iterdir())
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            for cache in caches:
                if not cache.name.startswith("index") or read_int(cache / "level") != 3:
                    continue
                cache_id = read_int(cache / "id")
                if cache_id is not None:
                    domains.setdefault(cache_id, set()).add(cpu)
        return {cache_id: tuple(sorted(cpus)) for cache_id, cpus in sorted(domains.items())}
