"""What a single-thread memory bandwidth test would measure on a simulated node.

An operator who wants numa-pinning to price remote memory by the machine rather than by the
advisor's round figures runs STREAM with one thread, bound in turn to a core of each NUMA
node and to each node's memory (``numactl --physcpubind=CPU --membind=NODE``), once per
machine type, and hands the figures to ``toposcope advise --memory-bandwidth NODE=FILE``. On
a simulated node the same test reads the simulated hardware: what a busy core streams from
local memory (the truth's ``memory_stream_gbps``) divided, for another node's memory, by
one plus the truth's remote cost at the pair's SLIT distance (what a job's threads pay in
:func:`~toposcope.sim.model.evaluate`), with the run-to-run spread such a test shows
(:data:`SPREAD`, seeded per node and pair so a file is reproducible). The file is in the
advisor's pair-line form, ``CPU_NODE MEMORY_NODE GBPS``.

Nothing here is the advisor's: it is what the machine would answer a measurement, like the
peer-to-peer figures of :mod:`~toposcope.sim.p2p_measure`.
"""

from __future__ import annotations

from pathlib import Path

from toposcope.sim.measured_files import pair_text, run_spread, write_pair_files
from toposcope.sim.nodetemplate import NodeTemplate
from toposcope.sim.truth_params import truth

#: relative spread of a STREAM figure between runs (a few per cent: the best of ten
#: repetitions, as STREAM reports)
SPREAD = 0.02


def measured_memory(node: str, template: NodeTemplate) -> list[tuple[int, int, float]]:
    """(CPU node, memory node, GB/s) for every NUMA node with CPUs and every NUMA node, as a
    single-thread bandwidth test on ``node`` would report them (under the truth in effect);
    empty for a machine of one NUMA node.
    """
    ids = sorted(template.numa_ids)
    if len(ids) < 2:
        return []
    t = truth()
    local = t.weight("memory_stream_gbps")
    return [
        (
            a,
            b,
            local
            / (1.0 + t.remote_cost(template.distance(a, b)))
            * run_spread("stream", node, a, b, SPREAD),
        )
        for a in ids
        if template.node_cpus(a)
        for b in ids
    ]


#: the decimals a file gives each figure
DIGITS = 3


def _header(node: str) -> str:
    """The first line of a file measured on ``node``: what it holds, in which unit."""
    return f"single-thread STREAM triad measured on {node}, GB/s (CPU_NODE MEMORY_NODE GBPS)"


def memory_text(node: str, template: NodeTemplate) -> str:
    """The pair-line file ``--memory-bandwidth`` reads for ``node``."""
    return pair_text(_header(node), measured_memory(node, template), DIGITS)


def write_memory_files(nodes: dict[str, NodeTemplate], directory: Path) -> dict[str, Path]:
    """Write one measured file per node with two NUMA nodes or more under ``directory``;
    return node name -> file.
    """
    return write_pair_files(nodes, directory, "stream", measured_memory, _header, DIGITS)
