"""Counters of a simulated node integrated over time: job progress and steps
(:mod:`~toposcope.sim.job_steps`), CPU seconds per CPU,
numastat pages, each workload's memory traffic (:mod:`~toposcope.sim.memory_traffic`), GPU
energy, and GPU traffic and activity
(:class:`~toposcope.sim.cluster.SimCluster` calls :func:`integrate` whenever a node is read or
changes).

Between two events every job runs at a constant speed, so the integrals are exact; a
workload's pause (checkpoint-restore) cuts the interval where it ends. Counters advance in
the clock's counter time (``scale``: :meth:`~toposcope.sim.clock.SimClock.counter_scale`).
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise

from toposcope.sim.cluster_state import MEMORY_CHURN_PER_SECOND, PAGE, SimNode, SimWorkload
from toposcope.sim.gpu_activity import GpuLoad, gpu_loads, gpu_watts
from toposcope.sim.gpu_traffic import GpuCounters, gpu_flows
from toposcope.sim.job_steps import steps_in
from toposcope.sim.memory_traffic import add_traffic
from toposcope.sim.model import placement
from toposcope.sim.placement import Footprint, memory_layout

#: Each workload's (thread node, memory node) page shares on a node.
Layout = dict[str, dict[tuple[int, int], float]]


def node_memory_layout(node: SimNode, workloads: Mapping[str, SimWorkload]) -> Layout:
    """Each placed workload's (thread node, memory node) page shares on ``node``, after
    full NUMA nodes spilled (:func:`~toposcope.sim.placement.memory_layout`).
    """
    names: list[str] = []
    jobs: list[Footprint] = []
    for name in sorted(node.workloads):
        workload = workloads[name]
        if workload.allocation is not None:
            names.append(name)
            jobs.append((workload.spec.memory_bytes, workload.allocation, workload.spec.threads))
    return dict(zip(names, memory_layout(jobs, node.template), strict=True))


def integrate(
    node: SimNode, workloads: Mapping[str, SimWorkload], until: float, scale: float
) -> None:
    """Advance one node's counters, and its workloads' progress and CPU seconds, from
    ``node.last_time`` to ``until``.
    """
    start = node.last_time
    if until <= start:
        return
    template = node.template
    layout = node_memory_layout(node, workloads)
    for name in node.workloads:
        workload = workloads[name]
        perf = workload.perf
        if perf is None or workload.allocation is None:
            continue
        active = until - max(start, workload.paused_until)
        if active <= 0:
            continue
        if not perf.stalled:
            workload.progress += active / perf.slowdown
            if workload.spec.base_throughput > 0:
                workload.steps += steps_in(name, active * scale, perf.slowdown, until)
        spec = workload.spec
        seconds = perf.cpu_rate * active * scale
        workload.cpu_seconds += seconds
        cpus = placement(workload.allocation, template, spec.threads)[2]
        per_thread = seconds / len(cpus)
        for cpu in cpus:
            node.cpu_busy[cpu] = node.cpu_busy.get(cpu, 0.0) + per_thread
        if not perf.stalled:
            add_traffic(workload.memory_traffic, spec, perf, layout[name], seconds)
        if spec.memory_bytes and not perf.stalled:
            pages = spec.memory_bytes / PAGE * MEMORY_CHURN_PER_SECOND * active * scale
            _count_pages(node, layout[name], pages)
    _integrate_gpus(node, workloads, start, until, scale)
    node.last_time = until


def _count_pages(node: SimNode, flows: dict[tuple[int, int], float], pages: float) -> None:
    """Add ``pages`` new pages, split by (thread node, memory node), to numastat."""
    for (source, target), weight in flows.items():
        amount = pages * weight
        stat = node.numastat[target]
        if source == target:
            stat["hit"] += amount
            stat["local"] += amount
        else:
            stat["miss"] += amount
            stat["other"] += amount
            node.numastat[source]["foreign"] += amount


def _integrate_gpus(
    node: SimNode, workloads: Mapping[str, SimWorkload], start: float, until: float, scale: float
) -> None:
    """Add each GPU's energy, traffic and activity from ``start`` to ``until``: its power
    (:func:`~toposcope.sim.gpu_activity.gpu_watts`) and flows
    (:func:`~toposcope.sim.gpu_traffic.gpu_flows`) are constant between the ends of the
    workloads' pauses, so the integrals are exact.
    """
    template = node.template
    if not template.gpus:
        return
    running = [
        (w.spec, w.allocation.gpus, w.perf, w.paused_until)
        for w in (workloads[n] for n in sorted(node.workloads))
        if w.perf is not None and w.allocation is not None
    ]
    cuts = sorted({start, until, *(p for *_, p in running if start < p < until)})
    for begin, end in pairwise(cuts):
        active = [(spec, gpus, perf) for spec, gpus, perf, paused in running if paused <= begin]
        loads = gpu_loads((gpus, perf.gpu_busy, perf.gpu_compute) for _, gpus, perf in active)
        flows = gpu_flows(template, active)
        seconds = (end - begin) * scale
        for gpu in template.gpus:
            watts = gpu_watts(template, loads.get(gpu.index, GpuLoad()))
            energy = node.gpu_energy.get(gpu.index, 0.0) + watts * (end - begin) * scale
            node.gpu_energy[gpu.index] = energy
        for index, flow in flows.items():
            node.gpu_counters.setdefault(index, GpuCounters()).add(flow, seconds)
