"""Readers of single sysfs and procfs files: text, integers, meminfo, distances, CPU sets.

Small files are read as ASCII and a file that does not exist or may not be read is
``None``, never an exception (sysfs differs between kernels and machines). CPU sets that
cannot be parsed raise :class:`~toposcope.errors.SourceError` naming the file, because every
locality decision rests on them; the topology builder (:mod:`toposcope.topology.sysfs`) and
the exporter's per-scrape sources share these readers.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from toposcope.cpulist import CPU_LIMIT, parse_cpulist, parse_cpumask
from toposcope.errors import SourceError
from toposcope.topology.model import check_id, parse_distance, parse_id

#: the builder's logger: these readers log on its behalf
LOG = logging.getLogger("toposcope.topology.sysfs")

_NODE_DIR_RE = re.compile(r"^node(\d+)$")
_CPU_DIR_RE = re.compile(r"^cpu(\d+)$")
# Values are at most 20 digits (a 64-bit counter); a longer number makes the line malformed.
_MEMINFO_RE = re.compile(r"^(?:Node\s+[0-9]+\s+)?([A-Za-z_()0-9]+):\s+([0-9]{1,20})(?:\s+kB)?\s*$")
# The same lines, matched over a whole file at once when only spaces and tabs separate fields.
_MEMINFO_WHOLE_RE = re.compile(
    r"^[ \t]*(?:Node[ \t]+[0-9]+[ \t]+)?([A-Za-z_()0-9]+):[ \t]+([0-9]{1,20})([ \t]+kB)?[ \t]*$",
    re.MULTILINE,
)


def read_text(path: Path) -> str | None:
    """Read a small sysfs/procfs file; ``None`` when it does not exist or cannot be read."""
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, NotADirectoryError, PermissionError, IsADirectoryError):
        return None
    except OSError as exc:
        LOG.debug("cannot read %s: %s", path, exc)
        return None


def read_int(path: Path) -> int | None:
    """Read a file holding one integer (decimal or ``0x`` hexadecimal); ``None`` if unusable."""
    text = read_text(path)
    if text is None:
        return None
    text = text.strip()
    try:
        return int(text, 0)
    except ValueError:
        return None


def read_id(path: Path, what: str, limit: int) -> int | None:
    """An id file (``physical_package_id``, ``core_id``): ``None`` when absent or ``-1``.

    Raises :class:`SourceError` naming the file when it holds anything but a whole number
    from 0 to ``limit`` or ``-1`` (:func:`~toposcope.topology.model.parse_id`).
    """
    text = read_text(path)
    if text is None:
        return None
    try:
        return parse_id(text.replace("\x00", ""), what, limit)
    except ValueError as exc:
        raise SourceError(f"{path}: {exc}") from None


def numbered_dir(entry: Path, number: str, what: str) -> int:
    """The number in a ``cpuN`` or ``nodeN`` directory's name, below
    :data:`~toposcope.cpulist.CPU_LIMIT` (:class:`SourceError` naming the directory).
    """
    try:
        return check_id(int(number), what, CPU_LIMIT - 1)
    except ValueError as exc:
        raise SourceError(f"{entry}: {exc}") from None


def parse_meminfo_lines(text: str) -> tuple[dict[str, int], list[str]]:
    """Parse ``/proc/meminfo`` or ``node*/meminfo`` into bytes (kB fields) or counts.

    Returns the values and the non-blank lines that are not ``Key: value [kB]`` (for the
    caller to log). HugePages_* counts stay counts.
    """
    body = text.strip()
    found = _MEMINFO_WHOLE_RE.findall(body)
    if len(found) == (body.count("\n") + 1 if body else 0):
        # every line is well formed (the usual case): one pass over the whole text
        return {key: int(n) * 1024 if kb else int(n) for key, n, kb in found}, []
    values: dict[str, int] = {}
    bad: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        match = _MEMINFO_RE.match(line)
        if not match:
            if line:
                bad.append(line)
            continue
        key, number = match.group(1), int(match.group(2))
        values[key] = number * 1024 if line.endswith("kB") else number
    return values, bad


def parse_distance_row(text: str) -> tuple[int, ...]:
    """Parse a node's ``distance`` file (``"10 21"``) into SLIT distances.

    Raises ``ValueError`` naming the first entry that is not a whole number from 0 to
    :data:`~toposcope.topology.model.MAX_NUMA_DISTANCE` (``inf``, ``nan``, ``-10``).
    """
    return tuple(parse_distance(entry) for entry in text.replace("\x00", "").split())


def parse_meminfo(text: str) -> dict[str, int]:
    """Parse a meminfo text into bytes or counts, skipping malformed lines."""
    return parse_meminfo_lines(text)[0]


def numa_dir(sysfs: Path) -> Path:
    """The directory listing NUMA nodes (``bus/node/devices`` preferred, as hwloc does)."""
    bus = sysfs / "bus" / "node" / "devices"
    return bus if bus.is_dir() else sysfs / "devices" / "system" / "node"


def cpu_dir(sysfs: Path) -> Path:
    """The directory listing CPUs (``bus/cpu/devices`` preferred)."""
    bus = sysfs / "bus" / "cpu" / "devices"
    return bus if bus.is_dir() else sysfs / "devices" / "system" / "cpu"


def node_dirs(sysfs: Path) -> dict[int, Path]:
    """NUMA node id -> its sysfs directory, for every node present (ids may be sparse).

    This lists directories, offline nodes included; :func:`build_from_sysfs` further keeps
    only the nodes :func:`online_nodes` lists. A node number at or above
    :data:`~toposcope.cpulist.CPU_LIMIT` is a :class:`SourceError` naming the directory.
    """
    base = numa_dir(sysfs)
    result: dict[int, Path] = {}
    try:
        entries = list(base.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return result
    for entry in entries:
        match = _NODE_DIR_RE.match(entry.name)
        if match:
            result[numbered_dir(entry, match.group(1), "NUMA node id")] = entry
    return dict(sorted(result.items()))


def parse_set(path: Path, text: str, mask: bool = False) -> tuple[int, ...]:
    """Parse a cpulist (or cpumask) read from ``path``; :class:`SourceError` when garbled.

    Trailing NUL bytes, which some snapshot tools leave after the newline, are ignored.
    """
    text = text.replace("\x00", "")
    try:
        return parse_cpumask(text) if mask else parse_cpulist(text)
    except ValueError as exc:
        kind = "cpumask" if mask else "cpulist"
        raise SourceError(f"malformed {kind} in {path}: {text.strip()[:80]!r}") from exc


def online_cpus(sysfs: Path) -> tuple[int, ...] | None:
    """CPUs listed in ``devices/system/cpu/online``; ``None`` when the file is absent.

    Raises :class:`SourceError` when the file exists but is not a cpulist.
    """
    path = sysfs / "devices" / "system" / "cpu" / "online"
    text = read_text(path)
    if text is None:
        return None
    return parse_set(path, text)


def online_nodes(sysfs: Path) -> tuple[int, ...] | None:
    """Node ids listed in ``devices/system/node/online``; ``None`` when the file is absent.

    Offline nodes keep a directory on some kernels; hwloc, like the kernel's allocator,
    only uses the nodes this file lists. Raises :class:`SourceError` when it is garbled.
    """
    path = sysfs / "devices" / "system" / "node" / "online"
    text = read_text(path)
    if text is None:
        return None
    return parse_set(path, text)


def node_cpus(node_path: Path) -> tuple[int, ...] | None:
    """CPUs the kernel lists for a node (``cpulist``, else the ``cpumap`` mask).

    ``None`` when the node has neither file; :class:`SourceError` when one is garbled.
    """
    path = node_path / "cpulist"
    text = read_text(path)
    if text is not None:
        return parse_set(path, text)
    path = node_path / "cpumap"
    mask = read_text(path)
    return parse_set(path, mask, mask=True) if mask is not None else None


def node_memory(node_path: Path) -> int:
    """``MemTotal`` of a node's ``meminfo`` in bytes; 0 (logged) when missing or garbled."""
    path = node_path / "meminfo"
    text = read_text(path)
    if text is None:
        LOG.debug("no %s; node memory unknown", path)
        return 0
    total = parse_meminfo(text).get("MemTotal")
    if total is None:
        LOG.warning("no readable MemTotal in %s; node memory taken as 0", path)
        return 0
    return total
