"""Memory bandwidth per monitored workload, from resctrl's MON groups.

A MON group (``<resctrl>/mon_groups/<name>``, or ``<resctrl>/<ctrl group>/mon_groups/
<name>``) monitors the threads its ``tasks`` file lists; its
``mon_data/mon_L3_XX/mbm_total_bytes`` and ``mbm_local_bytes`` count their memory traffic
per L3 domain (kernel ``Documentation/filesystems/resctrl.rst``). Container runtimes and
resource managers create such groups per container or job (containerd and CRI-O RDT classes,
``pqos --mon-pid``); :func:`read_mon_groups` reads every one, and :func:`attribute` gives
each group to the workload holding all its threads. A group whose threads belong to several
workloads, or to none kept, is left out: its traffic cannot be told apart.

Counters count from the group's creation; a recreated group starts again at 0, which a
rate over the series reads as a counter reset.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from toposcope.host.resctrl import MbmDomain, domain_dirs, read_counter
from toposcope.topology.sysfs_files import read_text

#: entries of the resctrl root that are not control groups
_NOT_GROUPS = frozenset({"info", "mon_groups", "mon_data"})
#: the most MON groups read per sample (a host runs at most a few hundred RMIDs)
MAX_GROUPS = 4096


@dataclass(frozen=True)
class MonGroup:
    """One MON group: its directory name, its threads and bytes per domain.

    ``traffic`` maps a domain to its (local, total) bytes; a domain whose files did not
    both read as numbers is absent.
    """

    name: str
    tasks: frozenset[int]
    traffic: dict[MbmDomain, tuple[int, int]]


def _tasks(path: Path) -> frozenset[int]:
    text = read_text(path) or ""
    return frozenset(int(word) for word in text.split() if word.isdigit())


def _group_dirs(root: Path) -> Iterator[Path]:
    parents = [root / "mon_groups"]
    try:
        entries = sorted(root.iterdir())
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return
    parents += [e / "mon_groups" for e in entries if e.name not in _NOT_GROUPS]
    for parent in parents:
        try:
            yield from sorted(p for p in parent.iterdir() if (p / "mon_data").is_dir())
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue


def read_mon_groups(root: Path) -> list[MonGroup]:
    """Every MON group under the resctrl mount ``root`` (at most :data:`MAX_GROUPS`)."""
    groups: list[MonGroup] = []
    for directory in _group_dirs(root):
        if len(groups) >= MAX_GROUPS:
            break
        traffic: dict[MbmDomain, tuple[int, int]] = {}
        for domain, path in domain_dirs(directory / "mon_data"):
            local = read_counter(path / "mbm_local_bytes")
            total = read_counter(path / "mbm_total_bytes")
            if local is not None and total is not None:
                traffic[domain] = (local, max(total, local))
        groups.append(MonGroup(directory.name, _tasks(directory / "tasks"), traffic))
    return groups


def attribute(groups: list[MonGroup], owner: Mapping[int, str]) -> dict[str, list[MonGroup]]:
    """Groups by the workload (``owner``: thread id -> workload) holding all their threads."""
    found: dict[str, list[MonGroup]] = {}
    for group in groups:
        owners = {owner.get(tid) for tid in group.tasks}
        if len(owners) == 1 and (name := owners.pop()) is not None:
            found.setdefault(name, []).append(group)
    return found


def domain_numa(
    domain: MbmDomain, l3_cpus: Mapping[int, tuple[int, ...]], cpu_node: Mapping[int, int]
) -> int | None:
    """The NUMA node of ``domain``: its SNC node, or the one node all its CPUs are in."""
    if domain.node is not None:
        return domain.node
    nodes = {cpu_node[c] for c in l3_cpus.get(domain.l3, ()) if c in cpu_node}
    return nodes.pop() if len(nodes) == 1 else None


def workload_traffic(
    groups: list[MonGroup], l3_cpus: Mapping[int, tuple[int, ...]], cpu_node: Mapping[int, int]
) -> dict[tuple[str, str], float]:
    """Bytes of ``groups`` by (NUMA node label, ``local``/``remote``), summed; a domain on no
    single NUMA node is left out.
    """
    found: dict[tuple[str, str], float] = {}
    for group in groups:
        for domain, (local, total) in group.traffic.items():
            numa = domain_numa(domain, l3_cpus, cpu_node)
            if numa is None:
                continue
            for locality, value in (("local", local), ("remote", total - local)):
                key = (str(numa), locality)
                found[key] = found.get(key, 0.0) + float(value)
    return found
