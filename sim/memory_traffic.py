"""A simulated job's memory traffic, as resctrl's memory bandwidth monitoring counts it.

A job's NUMA sensitivity ``s`` is the share of its step bound by memory bandwidth
(:mod:`toposcope.sim.model`): while that part runs, its busy cores stream memory at
``memory_stream_gbps`` each (the truth's figure) when the memory is local, and take longer,
not move more bytes, when it is remote. A GPU job's input pipeline also reads host memory
for ``input_memory x i`` of its step (``i`` its input weight). Both shares are of the step
at local speed, so the bytes a CPU second moves are

``memory_stream_gbps x (s / numa + input_memory x i / input)``

with ``numa`` and ``input`` the job's current NUMA and input factors: the slower its remote
accesses make it, the fewer bytes each second moves. The bytes are split over (thread node,
memory node) pairs by the job's thread shares times its page shares: *local* where both are
one node, *remote* otherwise, counted on the thread's node as an MBM domain counts its
tasks' traffic
(``mbm_total_bytes``, ``mbm_local_bytes``).

What the advisor reads is only these counters and the CPU seconds, never ``s`` or the
figure above.
"""

from __future__ import annotations

from collections.abc import Mapping

from toposcope.sim.jobs import JobSpec
from toposcope.sim.model import Performance
from toposcope.sim.truth_params import truth

#: bytes per GB, as memory bandwidth is quoted (decimal)
GB = 1e9
#: the two localities of a domain's traffic
LOCALITIES = ("local", "remote")


def bytes_per_cpu_second(spec: JobSpec, perf: Performance) -> float:
    """Bytes of memory traffic per CPU second of ``spec`` running at ``perf`` (module
    docstring).
    """
    t = truth()
    numa = perf.factors.get("numa", 1.0) or 1.0
    inputs = perf.factors.get("input", 1.0) or 1.0
    share = spec.numa_sensitivity / numa
    if spec.gpus > 0:
        share += t.weight("input_memory") * spec.input_intensity / inputs
    return t.weight("memory_stream_gbps") * GB * max(0.0, share)


def split_traffic(
    total: float, flows: Mapping[tuple[int, int], float]
) -> dict[tuple[int, str], float]:
    """``total`` bytes split into (thread node, ``local``/``remote``) amounts: every thread
    reads the whole working set, as the model's NUMA factor has it, so the pair (thread node
    ``a``, memory node ``b``) gets the share of the threads on ``a`` times that of the pages
    on ``b`` (both the margins of the page ``flows``).
    """
    found: dict[tuple[int, str], float] = {}
    weight = sum(flows.values())
    if total <= 0 or weight <= 0:
        return found
    threads: dict[int, float] = {}
    memory: dict[int, float] = {}
    for (source, target), share in flows.items():
        threads[source] = threads.get(source, 0.0) + share / weight
        memory[target] = memory.get(target, 0.0) + share / weight
    for source, t_share in threads.items():
        for target, m_share in memory.items():
            key = (source, "local" if source == target else "remote")
            found[key] = found.get(key, 0.0) + total * t_share * m_share
    return found


def add_traffic(
    counters: dict[tuple[int, str], float],
    spec: JobSpec,
    perf: Performance,
    flows: Mapping[tuple[int, int], float],
    cpu_seconds: float,
) -> None:
    """Add the traffic of ``cpu_seconds`` of ``spec`` at ``perf`` to ``counters``."""
    amounts = split_traffic(bytes_per_cpu_second(spec, perf) * cpu_seconds, flows)
    for key, amount in amounts.items():
        counters[key] = counters.get(key, 0.0) + amount
