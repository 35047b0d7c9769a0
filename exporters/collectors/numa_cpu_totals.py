"""The ``numa_cpu`` collector's memory: every CPU's highest ticks per mode, summed per node.

:class:`CpuTotals` folds each ``/proc/stat`` reading into what it keeps per CPU (the node the
CPU was first placed on and its highest tick count per mode; a CPU that goes offline keeps
its last figures, one that comes back continues from them) and returns the per-node sums.

Two ways to the same sums. While the same CPUs are listed with the same modes scrape after
scrape (the usual case), the reading's columns (:class:`~toposcope.host.procfs.
CpuTicks`) are folded and summed a mode at a time, with a few list operations over all CPUs
at once (:class:`_Columns`). Any other reading (a CPU that comes or goes, lines of different
lengths) is folded CPU by CPU into the per-CPU table, from which the columns are built again.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from toposcope.host.procfs import CpuTicks

#: Picks one node's CPUs out of a column of ticks.
Pick = Callable[[list[int]], Sequence[int]]


def _fold(into: list[int], values: Sequence[int], combine: Callable[[int, int], int]) -> None:
    """Combine ``values`` into ``into`` position by position; a longer ``values`` (a kernel
    line with more modes) extends it.
    """
    for i, value in enumerate(values):
        if i < len(into):
            into[i] = combine(into[i], value)
        else:
            into.append(value)


def _picker(indices: Sequence[int]) -> Pick:
    """A function taking the items at ``indices`` (ascending) out of a list at C speed: a
    slice when they are consecutive (a node's CPUs usually are), else an item getter.
    """
    first, last = indices[0], indices[-1]
    if last - first + 1 == len(indices):
        return operator.itemgetter(slice(first, last + 1))
    return operator.itemgetter(*indices)


@dataclass
class _Columns:
    """The kept ticks of the CPUs a regular reading lists, one list per mode in the reading's
    CPU order, with what each node sums.
    """

    cpus: list[int]
    nodes: list[int]
    columns: list[list[int]]
    #: per node (ascending), the function picking its CPUs out of a column
    picks: list[tuple[int, Pick]]
    #: per node, the kept ticks of its CPUs this reading does not list (offline ones)
    rest: dict[int, list[int]]

    def fold(self, reading: CpuTicks) -> dict[int, list[int]] | None:
        """Fold ``reading`` in and return the node sums; ``None`` (nothing changed) when it
        does not list the same CPUs with the same modes.
        """
        columns = reading.columns
        if columns is None or len(columns) != len(self.columns) or reading.cpus != self.cpus:
            return None
        for new, kept in zip(columns, self.columns, strict=True):
            if not all(map(operator.ge, new, kept)):  # a mode stepped back somewhere
                new[:] = map(max, new, kept)
        self.columns = columns
        sums = {node: [sum(pick(column)) for column in columns] for node, pick in self.picks}
        for node, kept_sum in self.rest.items():
            _fold(sums.setdefault(node, []), kept_sum, operator.add)
        return sums


class CpuTotals:
    """Every CPU's highest ticks per mode, and their sums per NUMA node (not thread-safe: the
    collector holds a lock around :meth:`fold`).
    """

    def __init__(self) -> None:
        #: per CPU: the node it was first placed on and its highest ticks per mode; stale
        #: while ``_columns`` is set (the columns hold the listed CPUs' figures then)
        self._kept: dict[int, tuple[int, list[int]]] = {}
        self._columns: _Columns | None = None

    def fold(self, reading: CpuTicks, cpu_node: Mapping[int, int]) -> dict[int, list[int]]:
        """Fold ``reading`` in and return the sums of the kept ticks per node (a node with
        no placed CPU is absent). A CPU seen for the first time is placed with ``cpu_node``;
        one it cannot place is not counted (and looked up again next time).
        """
        if self._columns is not None:
            sums = self._columns.fold(reading)
            if sums is not None:
                return sums
            self._write_back(self._columns)
            self._columns = None
        sums = self._fold_each(reading.by_cpu(), cpu_node)
        self._columns = self._make_columns(reading)
        return sums

    def _write_back(self, columns: _Columns) -> None:
        """Put the columns' figures back into the per-CPU table."""
        rows = zip(*columns.columns, strict=True)
        for cpu, node, row in zip(columns.cpus, columns.nodes, rows, strict=True):
            self._kept[cpu] = (node, list(row))

    def _fold_each(
        self, ticks: Mapping[int, Sequence[int]], cpu_node: Mapping[int, int]
    ) -> dict[int, list[int]]:
        kept_all = self._kept
        for cpu, reading in ticks.items():
            previous = kept_all.get(cpu)
            if previous is None:
                node = cpu_node.get(cpu)
                if node is not None:
                    kept_all[cpu] = (node, list(reading))
                continue
            kept = previous[1]
            if len(kept) == len(reading):
                kept[:] = map(max, kept, reading)
            else:
                _fold(kept, reading, max)
        sums: dict[int, list[int]] = {}
        for node, kept in kept_all.values():
            _fold(sums.setdefault(node, []), kept, operator.add)
        return sums

    def _make_columns(self, reading: CpuTicks) -> _Columns | None:
        """The columns for the next reading when it lists the same CPUs as ``reading``: every
        one of them placed and kept with as many modes as the reading has.
        """
        if reading.columns is None:
            return None
        width = len(reading.columns)
        listed = [self._kept.get(cpu) for cpu in reading.cpus]
        if any(entry is None or len(entry[1]) != width for entry in listed):
            return None
        entries = [entry for entry in listed if entry is not None]
        nodes = [node for node, _ in entries]
        by_node: dict[int, list[int]] = {}
        for index, node in enumerate(nodes):
            by_node.setdefault(node, []).append(index)
        cpus = set(reading.cpus)
        rest: dict[int, list[int]] = {}
        for cpu, (node, kept) in self._kept.items():
            if cpu not in cpus:
                _fold(rest.setdefault(node, []), kept, operator.add)
        return _Columns(
            cpus=list(reading.cpus),
            nodes=nodes,
            columns=[list(column) for column in zip(*(kept for _, kept in entries), strict=True)],
            picks=[(node, _picker(indices)) for node, indices in sorted(by_node.items())],
            rest=rest,
        )
