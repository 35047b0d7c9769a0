"""What a measurement on each simulated node reports: its run-to-run spread and its files.

The simulated peer-to-peer and memory bandwidth tests (:mod:`~toposcope.sim.p2p_measure`,
:mod:`~toposcope.sim.memory_measure`) each give a figure per pair with a seeded run-to-run
spread (:func:`run_spread`) and write a file per node for the advisor's ``NODE=FILE``
options; this is what they share.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from toposcope.sim.nodetemplate import NodeTemplate


def run_spread(test: str, node: str, a: int, b: int, spread: float) -> float:
    """A factor in ``[1 - spread, 1 + spread]`` seeded by the test, the node and the pair,
    so that a file is the same from one run to the next.
    """
    digest = hashlib.sha256(f"{test}:{node}:{a}:{b}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big")).uniform(1.0 - spread, 1.0 + spread)


def pair_text(header: str, rows: Iterable[tuple[int, int, float]], digits: int) -> str:
    """A pair-line file: ``# header``, then ``A B FIGURE`` a line with ``digits`` decimals."""
    lines = [f"# {header}"] + [f"{a} {b} {value:.{digits}f}" for a, b, value in rows]
    return "\n".join(lines) + "\n"


def write_pair_files(
    nodes: Mapping[str, NodeTemplate],
    directory: Path,
    suffix: str,
    rows_of: Callable[[str, NodeTemplate], list[tuple[int, int, float]]],
    header_of: Callable[[str], str],
    digits: int,
) -> dict[str, Path]:
    """Write the pair-line file (:func:`pair_text`) of each node whose measurement
    ``rows_of`` gives rows as ``directory/NAME.SUFFIX`` (a node with nothing to measure gets
    no file); return node name -> file.
    """
    directory.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, template in sorted(nodes.items()):
        rows = rows_of(name, template)
        if not rows:
            continue
        path = directory / f"{name}.{suffix}"
        path.write_text(pair_text(header_of(name), rows, digits), encoding="utf-8")
        written[name] = path
    return written
