"""Measured memory bandwidth between NUMA nodes (``--memory-bandwidth NODE=FILE``), read
strictly.

numa-pinning prices a pin from the workload's measured memory traffic (resctrl MBM) and two
figures of the machine: what one busy core streams from its local memory, and what a byte
from another node's memory costs on top of a local one (``local / remote bandwidth - 1``).
Without a file both are the advisor's round figures (11 GB/s, 0.65 at the farthest SLIT
distance, scaled by distance); machines differ from them by tens of per cent, and so do the
pins' estimates. An operator who measures them once per machine type hands the result over
here, as ``--p2p-bandwidth`` does for GPU pairs (docs/advisor.md, "Measured memory
bandwidth"). A file holds one of two forms:

* pair lines, ``CPU_NODE MEMORY_NODE GBPS`` (``0 1 5.2``): what *one core* on ``CPU_NODE``
  streams from ``MEMORY_NODE``'s memory, GB/s (STREAM triad with one thread, bound with
  ``numactl --physcpubind=CPU --membind=MEMORY_NODE``), each pair at most once, every CPU
  node with its local figure (``0 0 GBPS``). Both figures come from it;
* the matrix Intel Memory Latency Checker prints for ``mlc --bandwidth_matrix`` (MB/s; a
  ``Numa node`` header of node ids, one row per CPU node, its preamble lines may stay). MLC
  drives every core of a node, so the matrix gives the remote costs (the ratios of its
  figures), not a core's bandwidth: that stays the setting's.

``#`` starts a comment. Anything else is an error naming ``FILE:LINE``: a latency matrix, a
second matrix, a row of the wrong width, a figure that is not a positive number, a pair given
twice, a CPU node without its local figure. Files over :data:`MAX_BYTES` are refused.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from toposcope.advisor.link_prices import Measured
from toposcope.advisor.model import ClusterModel, NodeModel
from toposcope.advisor.node_files import (
    NodeFileOption,
    measured_lines,
    parse_node_file,
    with_node_files,
)
from toposcope.errors import UsageError

#: the largest file read (a matrix of 1,024 NUMA nodes; a machine has far fewer)
MAX_BYTES = 1 << 20
#: the highest NUMA node id accepted
MAX_NODE = 1023
#: the highest figure accepted, GB/s (a socket of HBM moves a few TB/s)
MAX_GBPS = 100_000.0
#: MLC's preamble lines, left alone
_SKIPPED = re.compile(
    r"(Intel\(R\) Memory Latency Checker|Command line parameters|Using |Measuring Memory "
    r"Bandwidths|Bandwidths are in MB/sec|Memory Bandwidths? between nodes|Numa node$)",
    re.IGNORECASE,
)
_LATENCY = re.compile(r"latenc", re.IGNORECASE)
_MATRIX_HEADER = re.compile(r"Numa node\s+((?:\d+\s*)+)$", re.IGNORECASE)


class MemoryMatrixError(UsageError):
    """A memory-bandwidth file is malformed (exit code 2); the message names FILE:LINE."""


@dataclass(frozen=True)
class MemoryMatrix:
    """One machine's measured memory bandwidths: ``(cpu node, memory node) -> Measured``
    (GB/s), and whether the figures are one core's (pair lines) or a whole node's (MLC).
    """

    path: str
    pairs: Mapping[tuple[int, int], Measured]
    per_core: bool

    def remote_cost(self, cpu_node: int, memory_node: int) -> float | None:
        """``local / remote bandwidth - 1`` for threads on ``cpu_node`` reading
        ``memory_node``'s memory (0 when local; ``None`` when the pair was not measured).
        """
        if cpu_node == memory_node:
            return 0.0
        local = self.pairs.get((cpu_node, cpu_node))
        remote = self.pairs.get((cpu_node, memory_node))
        if local is None or remote is None:
            return None
        return max(0.0, local.gbps / remote.gbps - 1.0)

    def core_gbps(self, cpu_node: int) -> float | None:
        """What one core on ``cpu_node`` streams from local memory (``None`` for a whole
        node's figures or a node not measured).
        """
        local = self.pairs.get((cpu_node, cpu_node))
        return local.gbps if self.per_core and local is not None else None

    def nodes(self) -> set[int]:
        """Every NUMA node the file names, as CPU or memory node."""
        return {n for pair in self.pairs for n in pair}


def _node(text: str, where: str) -> int:
    if not re.fullmatch(r"\d{1,4}", text) or int(text) > MAX_NODE:
        raise MemoryMatrixError(f"{where}: {text!r} is not a NUMA node id (0-{MAX_NODE})")
    return int(text)


def _gbps(text: str, where: str, scale: float) -> float:
    try:
        value = float(text) * scale
    except ValueError:
        raise MemoryMatrixError(f"{where}: {text!r} is not a bandwidth") from None
    if not math.isfinite(value) or value <= 0 or value > MAX_GBPS:
        raise MemoryMatrixError(
            f"{where}: {text!r} is not a bandwidth above 0 and at most {MAX_GBPS:g} GB/s"
        )
    return value


class _Reader:
    """The state of one file's reading: the pairs found and the matrix being read."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pairs: dict[tuple[int, int], Measured] = {}
        self.columns: list[int] | None = None
        self.matrix = False

    def add(self, cpu: int, memory: int, gbps: float, where: str) -> None:
        if (cpu, memory) in self.pairs:
            raise MemoryMatrixError(
                f"{where}: node {cpu} to node {memory} again ({self.pairs[(cpu, memory)].origin})"
            )
        self.pairs[(cpu, memory)] = Measured(gbps, where)

    def line(self, line: str, where: str) -> None:
        if (header := _MATRIX_HEADER.fullmatch(line)) is not None:
            if self.matrix or self.pairs:
                raise MemoryMatrixError(f"{where}: a second matrix (or pairs and a matrix)")
            self.columns = [_node(w, where) for w in header.group(1).split()]
            self.matrix = True
            return
        words = line.split()
        if self.columns is not None:
            cpu = _node(words[0], where)
            if len(words) - 1 != len(self.columns):
                raise MemoryMatrixError(
                    f"{where}: node {cpu}'s row has {len(words) - 1} figure(s) for "
                    f"{len(self.columns)} column(s)"
                )
            for memory, cell in zip(self.columns, words[1:], strict=True):
                self.add(cpu, memory, _gbps(cell, where, 1e-3), where)
            return
        if len(words) != 3 or self.matrix:
            raise MemoryMatrixError(
                f"{where}: not a pair line (CPU_NODE MEMORY_NODE GBPS) nor an MLC "
                f"--bandwidth_matrix: {line!r}"
            )
        self.add(_node(words[0], where), _node(words[1], where), _gbps(words[2], where, 1), where)

    def finish(self) -> MemoryMatrix:
        if not self.pairs:
            raise MemoryMatrixError(f"{self.path}: no pair of NUMA nodes with a figure")
        for cpu in sorted({c for c, _ in self.pairs}):
            if (cpu, cpu) not in self.pairs:
                raise MemoryMatrixError(
                    f"{self.path}: node {cpu} has remote figures but no local one "
                    f"('{cpu} {cpu} GBPS'): a remote cost is local / remote - 1"
                )
        return MemoryMatrix(self.path, self.pairs, per_core=not self.matrix)


def read_memory_file(path: Path) -> MemoryMatrix:
    """Read one memory-bandwidth file (:class:`MemoryMatrixError` with ``FILE:LINE``)."""
    reader = _Reader(str(path))
    for where, line, _ in measured_lines(path, MAX_BYTES, MemoryMatrixError):
        if not line:
            reader.columns = None
            continue
        if _SKIPPED.match(line):
            continue
        if _LATENCY.search(line):
            raise MemoryMatrixError(f"{where}: a latency figure; give the bandwidth matrix")
        reader.line(line, where)
    return reader.finish()


#: one ``--memory-bandwidth NODE=FILE``: a node glob and its file's pairs
MemoryOption = NodeFileOption[MemoryMatrix]


def parse_memory_options(texts: Iterable[str]) -> tuple[MemoryOption, ...]:
    """Every ``--memory-bandwidth`` option, read (the first matching a node wins)."""
    return tuple(parse_node_file("--memory-bandwidth", t, read_memory_file) for t in texts)


def with_measured_memory(model: ClusterModel, options: Sequence[MemoryOption]) -> ClusterModel:
    """``model`` with each node's measured memory bandwidths (the first option whose glob
    matches it; nodes with one NUMA node are left alone). A file naming a NUMA node the node
    does not have is an error; a glob that matches no node is a note in the model.
    """

    def attach(node: NodeModel, option: MemoryOption) -> NodeModel | None:
        if len(node.numa_nodes) < 2:
            return None
        unknown = option.file.nodes() - {n.id for n in node.numa_nodes}
        if unknown:
            have = ",".join(str(n.id) for n in node.numa_nodes)
            raise UsageError(
                f"--memory-bandwidth {option.glob}={option.file.path}: node {node.name} has no "
                f"NUMA node {min(unknown)} (it has {have})"
            )
        return replace(node, measured_memory=option.file)

    return with_node_files(
        model, options, "--memory-bandwidth", "node with NUMA nodes", lambda f: f.path, attach
    )


def add_memory_arguments(parser: argparse.ArgumentParser) -> None:
    """``--memory-bandwidth NODE=FILE`` (repeatable): measured memory bandwidth between
    NUMA nodes.
    """
    parser.add_argument(
        "--memory-bandwidth",
        action="append",
        default=[],
        metavar="NODE=FILE",
        help="memory bandwidth between NUMA nodes measured on NODE (a name or glob): pair "
        "lines 'CPU_NODE MEMORY_NODE GBPS' of one core (single-thread STREAM under numactl), "
        "or Intel MLC's --bandwidth_matrix output; numa-pinning prices remote memory (and, "
        "from pair lines, a core's bandwidth) by it (repeatable; the first match wins)",
    )
