"""What a simulated GPU reports: utilisation as NVML defines it, compute share, and power.

NVML's ``utilization.gpu`` (``nvmlDeviceGetUtilizationRates``) is the percent of time over
the past sample period during which one or more kernels was executing on the GPU. It says
nothing about how many SMs those kernels keep busy: a collective (NCCL all-reduce) kernel
that spins while its data crawls over a slow link counts as fully busy, while a GPU waiting
for its input pipeline (the host loading and copying the next batch) counts as idle. So a
job bound by communication shows high utilisation on real hardware, and a job starved by
its data loader shows low utilisation.

The simulator follows that definition: each workload's
:attr:`~toposcope.sim.model.Performance.gpu_busy` (compute plus communication kernels) adds
up per GPU to the utilisation, capped at 1, and its
:attr:`~toposcope.sim.model.Performance.gpu_compute` (compute kernels alone, the SM-heavy
part) to the compute share that power, memory utilisation and PCIe traffic follow (NCCL
kernels use a few thread blocks per GPU and draw little power: an assumption, no published
figure). A paused workload (checkpoint-restore under way) runs no kernel.

Each process's part of a GPU's time (NVML's per-process samples, ``smUtil`` of
``nvmlDeviceGetProcessUtilization``) follows the same definition: :func:`process_shares` gives
each running workload's process its ``gpu_busy`` on every GPU it holds, what it actually runs
there after its slowdown (its compute rate ``gpu_demand / slowdown``, plus its collective
kernels), so the shares of the workloads time-slicing a GPU add up to the GPU's utilisation
(scaled down together where they would pass 1, as the utilisation is capped).

The power model is one function, :func:`gpu_watts`, used both for the instantaneous power
gauge and for the energy counter the cluster integrates between events
(:meth:`~toposcope.sim.cluster.SimCluster.node_snapshot`), so ``rate(energy)`` equals the
mean power at every state and at every ``--speed``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from toposcope.sim.nodetemplate import NodeTemplate

#: Share of the span between idle power and the power limit that a fully busy GPU draws
#: (training rarely reaches the limit; assumption).
BUSY_POWER_SHARE = 0.9


@dataclass(frozen=True)
class GpuLoad:
    """One GPU's activity: ``busy`` (any kernel running, NVML's utilisation) and
    ``compute`` (compute kernels), both shares of time in ``[0, 1]``.
    """

    busy: float = 0.0
    compute: float = 0.0


def gpu_loads(workloads: Iterable[tuple[Sequence[int], float, float]]) -> dict[int, GpuLoad]:
    """Per GPU index, the summed activity of the workloads given as ``(GPUs held, busy
    share, compute share)`` (running, not paused), each share capped at 1.
    """
    busy: dict[int, float] = {}
    compute: dict[int, float] = {}
    for gpus, b, c in workloads:
        for gpu in gpus:
            busy[gpu] = busy.get(gpu, 0.0) + b
            compute[gpu] = compute.get(gpu, 0.0) + c
    return {g: GpuLoad(min(busy[g], 1.0), min(compute[g], 1.0)) for g in busy}


def process_shares(
    workloads: Iterable[tuple[int, Sequence[int], float]],
) -> dict[int, dict[int, float]]:
    """Per GPU index, each process's share of the GPU's time, from the running workloads
    given as ``(pid, GPUs held, busy share)``: its busy share, all of a GPU's scaled by the
    same factor where they add up past 1 (see the module docstring).
    """
    found: dict[int, dict[int, float]] = {}
    for pid, gpus, busy in workloads:
        for gpu in gpus:
            mine = found.setdefault(gpu, {})
            mine[pid] = mine.get(pid, 0.0) + busy
    for shares in found.values():
        total = sum(shares.values())
        if total > 1.0:
            for pid in shares:
                shares[pid] /= total
    return found


def gpu_watts(template: NodeTemplate, load: GpuLoad) -> float:
    """The power a GPU of ``template`` draws under ``load``: its idle power plus
    :data:`BUSY_POWER_SHARE` of the span to its limit in proportion to its compute share.
    """
    idle = template.gpu_idle_watts
    span = template.gpu_power_limit_watts - idle
    return idle + load.compute * span * BUSY_POWER_SHARE
