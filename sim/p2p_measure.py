"""What a peer-to-peer bandwidth test would measure on a simulated node.

An operator who wants the advisor to price GPU pairs by what they carry runs a
peer-to-peer bandwidth test once per machine type (``nvbandwidth``'s unidirectional
device-to-device copies, or ``p2pBandwidthLatencyTest``) and hands the result to
``toposcope advise --p2p-bandwidth NODE=FILE``. On a simulated node the same test reads the
simulated hardware: each PCIe-joined pair's effective bandwidth under the truth in effect
(:func:`~toposcope.sim.model.pair_bandwidth`, GB/s each way), with the run-to-run spread
such a test shows (:data:`SPREAD`, drawn per node and pair, seeded, so a file is
reproducible). The file is in the advisor's pair-line form, ``GPU PEER GBPS``.

Nothing here is the advisor's: it is what the machine would answer a measurement, like the
GPU counters of :mod:`~toposcope.sim.gpu_traffic`.
"""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

from toposcope.sim.measured_files import pair_text, run_spread, write_pair_files
from toposcope.sim.model import pair_bandwidth
from toposcope.sim.nodetemplate import TIER_NVLINK, TIER_NVSWITCH, NodeTemplate

#: relative spread of a bandwidth test's figure between runs (a few per cent on an idle
#: machine: copies of 256 MiB repeated, the median reported)
SPREAD = 0.02


def measured_pairs(node: str, template: NodeTemplate) -> list[tuple[int, int, float]]:
    """(GPU, peer, GB/s each way) for every pair of ``template``'s GPUs joined by PCIe, as a
    bandwidth test on ``node`` would report them (under the truth in effect). NVLinked
    pairs are left out: their figure follows from the link count the topology names, while
    the PCIe paths' figures vary by platform (what the test is run for).
    """
    indexes = sorted(g.index for g in template.gpus)
    return [
        (a, b, pair_bandwidth(template, a, b) * run_spread("p2p", node, a, b, SPREAD))
        for a, b in combinations(indexes, 2)
        if template.link_tier(a, b)[0] not in (TIER_NVLINK, TIER_NVSWITCH)
    ]


#: the decimals a file gives each figure
DIGITS = 2


def _header(node: str) -> str:
    """The first line of a file measured on ``node``: what it holds, in which unit."""
    return f"peer-to-peer bandwidth measured on {node}, GB/s each way"


def p2p_text(node: str, template: NodeTemplate) -> str:
    """The pair-line file ``--p2p-bandwidth`` reads for ``node`` (empty for one GPU)."""
    return pair_text(_header(node), measured_pairs(node, template), DIGITS)


def write_p2p_files(nodes: dict[str, NodeTemplate], directory: Path) -> dict[str, Path]:
    """Write one measured file per node with a PCIe-joined GPU pair under ``directory``;
    return node name -> file.
    """
    return write_pair_files(nodes, directory, "p2p", measured_pairs, _header, DIGITS)
