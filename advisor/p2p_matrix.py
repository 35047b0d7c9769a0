"""Measured GPU-to-GPU bandwidth files (``--p2p-bandwidth NODE=FILE``), read strictly.

A file holds the bandwidth each way between GPUs of one machine, in GB/s, in one of two
forms (docs/advisor.md, "Measured link prices"):

* pair lines, ``GPU PEER GBPS`` (``0 1 26.3``), one pair a line, each pair at most once;
* one matrix as nvbandwidth prints its unidirectional device-to-device tests
  (``device_to_device_memcpy_read_ce`` and the like: a title ``memcpy CE GPU(row) ->
  GPU(column) bandwidth (GB/s)``, a header of GPU indexes, one row per GPU, ``N/A`` for a
  pair not measured) or as ``p2pBandwidthLatencyTest`` prints its ``Unidirectional
  P2P=Enabled Bandwidth`` matrix (header ``D\\D 0 1 ...``). The diagonal (a GPU's own
  memory) is skipped. nvbandwidth's preamble lines (version, driver, devices, ``Running``,
  ``SUM``) may stay in the file.

``#`` starts a comment. Anything else is an error naming ``FILE:LINE``: a host-to-device or
bidirectional matrix, a latency or P2P-disabled matrix, a second matrix, a row of the wrong
width, a figure that is not a positive number, a pair given twice. Files over
:data:`MAX_BYTES` are refused.
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

#: the largest file read (a matrix of 1,024 GPUs is about 10 MB; a machine has far fewer)
MAX_BYTES = 1 << 20
#: the highest GPU index accepted
MAX_GPU = 1023
#: the highest figure accepted, GB/s each way (NVLink 5 bonds move 900)
MAX_GBPS = 100_000.0

#: nvbandwidth's preamble and footer lines, left alone
_SKIPPED = re.compile(
    r"(nvbandwidth Version|Built from Git version|NOTE:|Additional system-specific|"
    r"CUDA Runtime Version|CUDA Driver Version|Driver Version|Device \d+:|Running |SUM |"
    r"Waiving |\[P2P \(Peer-to-Peer\) GPU Bandwidth Latency Test\])"
)
_GPU_TITLE = re.compile(r"memcpy (CE|SM) GPU\(rows?\) (->|<-|<->) GPU\(columns?\)")
_CPU_TITLE = re.compile(r"memcpy .*CPU\(")
_P2P_TITLE = re.compile(r"(Unidirectional|Bidirectional) P2P=(Enabled|Disabled) .*Matrix")


class MatrixError(UsageError):
    """A measured-bandwidth file is malformed (exit code 2); the message names FILE:LINE."""


@dataclass(frozen=True)
class P2pFile:
    """One file's pairs: ``(gpu, peer) -> Measured`` (each way as measured)."""

    path: str
    pairs: Mapping[tuple[int, int], Measured]


def _number(text: str, where: str) -> float | None:
    """A cell's GB/s (``None`` for ``N/A``)."""
    if text.upper() == "N/A":
        return None
    try:
        value = float(text)
    except ValueError:
        raise MatrixError(f"{where}: {text!r} is not a bandwidth in GB/s (or N/A)") from None
    if not math.isfinite(value) or value < 0 or value > MAX_GBPS:
        raise MatrixError(f"{where}: {text!r} is not a bandwidth between 0 and {MAX_GBPS:g}")
    return value


def _gpu(text: str, where: str) -> int:
    if not re.fullmatch(r"\d{1,4}", text) or int(text) > MAX_GPU:
        raise MatrixError(f"{where}: {text!r} is not a GPU index (0-{MAX_GPU})")
    return int(text)


class _Reader:
    """The state of one file's reading: the pairs found and the matrix being read."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pairs: dict[tuple[int, int], Measured] = {}
        self.columns: list[int] | None = None
        self.matrices = 0
        self.titled = False

    def add(self, a: int, b: int, gbps: float | None, where: str) -> None:
        if a == b or gbps is None:
            return
        if gbps == 0:
            raise MatrixError(f"{where}: 0 GB/s from GPU {a} to {b}: write N/A for no figure")
        if (a, b) in self.pairs:
            raise MatrixError(f"{where}: GPU {a} to {b} again ({self.pairs[(a, b)].origin})")
        self.pairs[(a, b)] = Measured(gbps, where)

    def title(self, line: str, where: str) -> bool:
        """Whether ``line`` is a matrix title (refused unless unidirectional GPU to GPU)."""
        if _CPU_TITLE.search(line):
            raise MatrixError(f"{where}: a host matrix; give a device-to-device test's")
        if (found := _GPU_TITLE.search(line)) is not None:
            if found.group(2) == "<->":
                raise MatrixError(f"{where}: a bidirectional matrix; give a unidirectional one")
            return True
        if (found := _P2P_TITLE.search(line)) is not None:
            if found.group(1) != "Unidirectional" or found.group(2) != "Enabled":
                raise MatrixError(
                    f"{where}: {found.group(1)} P2P={found.group(2)}: give the Unidirectional "
                    "P2P=Enabled bandwidth matrix"
                )
            return True
        if "latency" in line.lower():
            raise MatrixError(f"{where}: a latency matrix; give a bandwidth one")
        return False

    def line(self, words: Sequence[str], raw: str, where: str) -> None:
        if self.columns is not None and words and re.fullmatch(r"\d+", words[0]):
            self.row(words, where)
            return
        self.columns = None
        header = words[1:] if words and words[0] == "D\\D" else words
        if header and all(re.fullmatch(r"\d+", w) for w in header) and len(header) != 3:
            self.header(header, where)
        elif len(words) == 3 and not self.titled and self.matrices == 0:
            a, b = _gpu(words[0], where), _gpu(words[1], where)
            if a == b:
                raise MatrixError(f"{where}: GPU {a} to itself")
            self.add(a, b, _number(words[2], where), where)
        elif header and all(re.fullmatch(r"\d+", w) for w in header):
            self.header(header, where)
        else:
            raise MatrixError(f"{where}: not a pair line (GPU PEER GBPS) nor a matrix: {raw!r}")

    def header(self, header: Sequence[str], where: str) -> None:
        columns = [_gpu(w, where) for w in header]
        if columns != list(range(len(columns))):
            raise MatrixError(
                f"{where}: matrix header {' '.join(header)}: not the GPU indexes "
                f"0-{len(columns) - 1}"
            )
        if self.matrices or self.pairs:
            raise MatrixError(f"{where}: a second matrix (or pairs and a matrix): one a file")
        self.matrices += 1
        self.columns = columns

    def row(self, words: Sequence[str], where: str) -> None:
        assert self.columns is not None
        gpu = _gpu(words[0], where)
        cells = words[1:]
        if len(cells) != len(self.columns):
            raise MatrixError(
                f"{where}: GPU {gpu}'s row has {len(cells)} figure(s) for "
                f"{len(self.columns)} column(s)"
            )
        for peer, cell in zip(self.columns, cells, strict=True):
            self.add(gpu, peer, _number(cell, where), where)


def read_p2p_file(path: Path) -> P2pFile:
    """Read one measured-bandwidth file (:class:`MatrixError` with ``FILE:LINE`` if bad)."""
    reader = _Reader(str(path))
    for where, line, raw in measured_lines(path, MAX_BYTES, MatrixError):
        if not line:
            reader.columns = None
            continue
        if _SKIPPED.match(line):
            continue
        if reader.title(line, where):
            reader.titled = True
            reader.columns = None
            continue
        reader.line(line.split(), raw, where)
    if not reader.pairs:
        raise MatrixError(f"{path}: no GPU pair with a figure")
    return P2pFile(str(path), reader.pairs)


#: one ``--p2p-bandwidth NODE=FILE``: a node glob and its file's pairs
P2pOption = NodeFileOption[P2pFile]


def parse_option(text: str) -> P2pOption:
    """Parse and read ``NODE=FILE`` (:class:`UsageError` for a bad glob or file)."""
    return parse_node_file("--p2p-bandwidth", text, read_p2p_file)


def parse_options(texts: Iterable[str]) -> tuple[P2pOption, ...]:
    """Every ``--p2p-bandwidth`` option, read (the first matching a node wins)."""
    return tuple(parse_option(t) for t in texts)


def _on_node(node: NodeModel, source: P2pFile) -> dict[tuple[int, int], Measured]:
    known = {g.index for g in node.gpus}
    for a, b in source.pairs:
        for gpu in (a, b):
            if gpu not in known:
                where = source.pairs[(a, b)].origin
                have = ",".join(map(str, sorted(known)))
                raise UsageError(f"{where}: node {node.name} has no GPU {gpu} (it has {have})")
    return dict(source.pairs)


def with_measured_links(model: ClusterModel, options: Sequence[P2pOption]) -> ClusterModel:
    """``model`` with each node's measured pairs (the first option whose glob matches it;
    nodes without GPUs are left alone). A glob that matches no node is a note in the model.
    """

    def attach(node: NodeModel, option: P2pOption) -> NodeModel | None:
        if not node.gpus:
            return None
        return replace(node, measured_bandwidth=_on_node(node, option.file))

    return with_node_files(
        model, options, "--p2p-bandwidth", "node with GPUs", lambda f: f.path, attach
    )


def add_p2p_arguments(parser: argparse.ArgumentParser) -> None:
    """``--p2p-bandwidth NODE=FILE`` (repeatable): measured prices of GPU pairs."""
    parser.add_argument(
        "--p2p-bandwidth",
        action="append",
        default=[],
        metavar="NODE=FILE",
        help="GPU-to-GPU bandwidth measured on NODE (a name or glob, e.g. 'dgx-*'), GB/s each "
        "way: pair lines 'GPU PEER GBPS', or nvbandwidth's device_to_device_memcpy_*_ce or "
        "p2pBandwidthLatencyTest's unidirectional P2P=Enabled matrix; its pairs are priced by "
        "it instead of the topology (repeatable; the first match wins)",
    )
