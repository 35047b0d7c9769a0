"""The resctrl filesystem of a simulated node: memory bandwidth monitoring per workload.

On a real host with Intel RDT or AMD PQoS memory bandwidth monitoring, ``resctrl`` mounted
at ``/sys/fs/resctrl`` holds one MON group per monitored workload
(``mon_groups/<group>/tasks`` lists its threads) with ``mon_data/mon_L3_XX/mbm_total_bytes``
and ``mbm_local_bytes``: the memory traffic of the group's threads running in L3 domain
``XX``, to all memory and to the domain's own. The root group's files count every task.

:class:`ResctrlTree` writes that for a simulated node: one L3 domain per NUMA node with CPUs
(the L3 id each CPU's ``cache/index3/id`` gives, written into the template's shared CPU
directory), one MON group per workload named after its pid, and the counters from each
workload's memory traffic (:mod:`toposcope.sim.memory_traffic`). The root's counters are
the sum of the groups', plus what earlier workloads moved, so they never go backwards.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from toposcope.sim.cluster_state import WorkloadSnapshot
from toposcope.sim.nodetemplate import NodeTemplate
from toposcope.sim.paths import contained, remove_contained


class ResctrlTree:
    """``sys/fs/resctrl`` of one node and the L3 cache ids of its template's CPUs."""

    def __init__(
        self, root: Path, template: NodeTemplate, cpu_dir: Path, write: Callable[[str, str], None]
    ) -> None:
        self.root = root
        self._write = write
        self._base = root / "sys/fs/resctrl"
        cpu_node = {cpu: template.numa_of_cpu(cpu) for cpu in template.cpus}
        self._domains = sorted(set(cpu_node.values()))
        for cpu, numa in cpu_node.items():
            cache = cpu_dir / f"cpu{cpu}/cache/index3"
            if not (cache / "id").exists():
                os.makedirs(cache, exist_ok=True)
                write(str(cache / "level"), "3\n")
                write(str(cache / "id"), f"{numa}\n")
        os.makedirs(self._base / "mon_groups", exist_ok=True)
        self._gone: dict[tuple[int, str], float] = {}
        self._last: dict[int, dict[tuple[int, str], float]] = {}
        self._groups: dict[int, Path] = {}
        self._make_domains(self._base)
        self._write_counters(self._base, {})

    def add(self, pid: int, tids: Iterable[int]) -> None:
        """A MON group for the workload of ``pid`` holding its threads ``tids``."""
        group = contained(self.root, self._base / "mon_groups" / f"w{pid}")
        os.makedirs(group, exist_ok=True)
        self._write(str(group / "tasks"), "".join(f"{tid}\n" for tid in tids))
        self._groups[pid] = group
        self._last[pid] = {}
        self._make_domains(group)
        self._write_counters(group, {})

    def remove(self, pid: int) -> None:
        """Drop the group of ``pid``; what it counted stays in the root's counters."""
        for key, value in self._last.pop(pid, {}).items():
            self._gone[key] = self._gone.get(key, 0.0) + value
        group = self._groups.pop(pid, None)
        if group is not None:
            remove_contained(self.root, group)

    def update(self, workloads: Iterable[tuple[int, WorkloadSnapshot]]) -> None:
        """Write each group's counters from its workload's memory traffic, and the root's."""
        total = dict(self._gone)
        for pid, workload in workloads:
            if pid not in self._last:
                continue
            traffic = dict(workload.memory_traffic)
            self._last[pid] = traffic
            self._write_counters(self._groups[pid], traffic)
            for key, value in traffic.items():
                total[key] = total.get(key, 0.0) + value
        self._write_counters(self._base, total)

    def _make_domains(self, group: Path) -> None:
        for numa in self._domains:
            os.makedirs(group / "mon_data" / f"mon_L3_{numa:02d}", exist_ok=True)

    def _write_counters(self, group: Path, traffic: dict[tuple[int, str], float]) -> None:
        for numa in self._domains:
            domain = group / "mon_data" / f"mon_L3_{numa:02d}"
            local = int(traffic.get((numa, "local"), 0.0))
            remote = int(traffic.get((numa, "remote"), 0.0))
            self._write(str(domain / "mbm_local_bytes"), f"{local}\n")
            self._write(str(domain / "mbm_total_bytes"), f"{local + remote}\n")
