"""What a simulated GPU moves and how busy its SMs are, from the performance model's jobs.

Per GPU, :func:`gpu_flows` gives the bytes per second over PCIe and to each NVLinked peer,
and the SM, occupancy, tensor and DRAM activity (shares of time), of the running jobs
holding it; :class:`GpuCounters` integrates them over time (the cluster does, between
events, :mod:`toposcope.sim.cluster_counters`), so that the counters a node's fake NVML
answers are the simulated hardware's own.

**Links.** A multi-GPU job exchanges gradients each step in a ring (NCCL's default within a
node): each GPU sends to the next GPU of the job in index order and receives from the
previous one, at the job's exchange rate (:func:`~toposcope.sim.model.exchange_rate`: a
step moves the same bytes on any link, so a job slowed by a slow link moves them fewer times
per second). A pair whose link tier is an NVSwitch or direct NVLinks carries them over
NVLink; any other pair (one PCIe switch, the host bridge, a socket's fabric, across sockets)
over PCIe, both ways. The input pipeline's copies add PCIe traffic in proportion to the
compute share: ``host_to_gpu`` GB/s received and ``gpu_to_host`` sent at full compute.

**Activity.** While a job's compute kernels run (its compute share,
:attr:`~toposcope.sim.model.Performance.gpu_compute`) its GPUs' SMs are ``sm_active`` busy,
their warps ``sm_occupancy``, tensor pipes ``tensor_active`` and memory ``dram_active``; its
collective kernels (the rest of its busy time) keep ``collective_sm_share`` of the SMs
active and nothing else. So a job slowed by communication shows lower SM activity than the
same job on NVLink, though NVML's utilisation calls both busy. Sharers of a GPU add up,
each share capped at 1. All figures are the truth's ``gpu`` parameters (``sim/truth.yaml``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from toposcope.sim.jobs import JobSpec
from toposcope.sim.model import Performance, exchange_rate
from toposcope.sim.nodetemplate import TIER_NVLINK, TIER_NVSWITCH, NodeTemplate
from toposcope.sim.truth_params import truth

#: Bytes in a (decimal) GB, the truth's bandwidth unit.
GB = 1e9
#: The activity shares, in the order of :class:`GpuFlow`'s fields.
ACTIVITY = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")

#: A running job on a node: its spec, the GPUs it holds and how it performs.
RunningJob = tuple[JobSpec, Sequence[int], Performance]


@dataclass(frozen=True)
class GpuFlow:
    """One GPU's traffic (bytes per second) and activity (shares of time) at one instant.

    ``nvlink_tx`` / ``nvlink_rx`` map each NVLinked peer GPU to the bytes sent to / received
    from it per second.
    """

    pcie_tx: float = 0.0
    pcie_rx: float = 0.0
    nvlink_tx: Mapping[int, float] = field(default_factory=dict)
    nvlink_rx: Mapping[int, float] = field(default_factory=dict)
    sm_active: float = 0.0
    sm_occupancy: float = 0.0
    tensor_active: float = 0.0
    dram_active: float = 0.0


@dataclass
class GpuCounters:
    """One GPU's flows integrated over time: bytes (PCIe, and NVLink per peer) and
    share-seconds of each activity (divided by the seconds elapsed: the mean share).
    """

    pcie_tx: float = 0.0
    pcie_rx: float = 0.0
    nvlink_tx: dict[int, float] = field(default_factory=dict)
    nvlink_rx: dict[int, float] = field(default_factory=dict)
    sm_active: float = 0.0
    sm_occupancy: float = 0.0
    tensor_active: float = 0.0
    dram_active: float = 0.0

    def add(self, flow: GpuFlow, seconds: float) -> None:
        """Add ``seconds`` of ``flow``."""
        self.pcie_tx += flow.pcie_tx * seconds
        self.pcie_rx += flow.pcie_rx * seconds
        for peer, rate in flow.nvlink_tx.items():
            self.nvlink_tx[peer] = self.nvlink_tx.get(peer, 0.0) + rate * seconds
        for peer, rate in flow.nvlink_rx.items():
            self.nvlink_rx[peer] = self.nvlink_rx.get(peer, 0.0) + rate * seconds
        self.sm_active += flow.sm_active * seconds
        self.sm_occupancy += flow.sm_occupancy * seconds
        self.tensor_active += flow.tensor_active * seconds
        self.dram_active += flow.dram_active * seconds

    def copy(self) -> GpuCounters:
        """An independent copy (for a snapshot)."""
        return GpuCounters(
            self.pcie_tx,
            self.pcie_rx,
            dict(self.nvlink_tx),
            dict(self.nvlink_rx),
            self.sm_active,
            self.sm_occupancy,
            self.tensor_active,
            self.dram_active,
        )


@dataclass
class _Sums:
    """A GPU's flow while it is being summed over jobs."""

    pcie_tx: float = 0.0
    pcie_rx: float = 0.0
    nvlink_tx: dict[int, float] = field(default_factory=dict)
    nvlink_rx: dict[int, float] = field(default_factory=dict)
    activity: list[float] = field(default_factory=lambda: [0.0] * len(ACTIVITY))

    def flow(self) -> GpuFlow:
        sm, occupancy, tensor, dram = (min(share, 1.0) for share in self.activity)
        return GpuFlow(
            self.pcie_tx, self.pcie_rx, self.nvlink_tx, self.nvlink_rx, sm, occupancy, tensor, dram
        )


def _over_nvlink(template: NodeTemplate, a: int, b: int) -> bool:
    """Whether GPUs ``a`` and ``b`` exchange over NVLink (an NVSwitch or direct links)."""
    return template.link_tier(a, b)[0] in (TIER_NVSWITCH, TIER_NVLINK)


def gpu_flows(template: NodeTemplate, jobs: Iterable[RunningJob]) -> dict[int, GpuFlow]:
    """Per GPU index held by a running (not paused) job, its flow (see the module docstring);
    a GPU no job runs on is idle (absent).
    """
    t = truth()
    sm, occupancy, tensor, dram, collective_sm, to_gpu, from_gpu = (
        t.gpu_figure(name)
        for name in (
            "sm_active",
            "sm_occupancy",
            "tensor_active",
            "dram_active",
            "collective_sm_share",
            "host_to_gpu",
            "gpu_to_host",
        )
    )
    sums: dict[int, _Sums] = {}
    for spec, held, perf in jobs:
        if perf.stalled:
            continue
        gpus = sorted(set(held))
        compute = perf.gpu_compute
        collective = max(perf.gpu_busy - compute, 0.0)
        shares = (
            compute * sm + collective * collective_sm,
            compute * occupancy,
            compute * tensor,
            compute * dram,
        )
        rate = exchange_rate(spec, perf.slowdown) * GB if len(gpus) > 1 else 0.0
        for position, gpu in enumerate(gpus):
            mine = sums.setdefault(gpu, _Sums())
            mine.activity = [a + b for a, b in zip(mine.activity, shares, strict=True)]
            mine.pcie_rx += compute * to_gpu * GB
            mine.pcie_tx += compute * from_gpu * GB
            if not rate:
                continue
            after = gpus[(position + 1) % len(gpus)]
            before = gpus[position - 1]
            if _over_nvlink(template, gpu, after):
                mine.nvlink_tx[after] = mine.nvlink_tx.get(after, 0.0) + rate
            else:
                mine.pcie_tx += rate
            if _over_nvlink(template, gpu, before):
                mine.nvlink_rx[before] = mine.nvlink_rx.get(before, 0.0) + rate
            else:
                mine.pcie_rx += rate
    return {gpu: found.flow() for gpu, found in sums.items()}
