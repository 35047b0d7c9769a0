"""A running workload's measured NUMA sensitivity, from its memory traffic and CPU time.

numa-pinning's prior says how much a workload's step depends on where its memory is from a
constant (CRI-RM's 57.76 % for a CPU training job, a share of it for a job holding GPUs).
Where resctrl publishes the workload's memory traffic
(``toposcope_workload_memory_bandwidth_bytes_total``, local and remote), its own figures say
it instead:

* the *memory-bound share*: the bytes per second its threads read, against what the cores
  they keep busy stream from local memory (:data:`CORE_STREAM_GBPS` each): the share of its
  step the traffic would take were all of it local. A workload that moves little memory for
  its CPU time gains little from pinning, whatever its placement;
* what a remote byte costs on top of a local one, ``local / remote bandwidth - 1`` at the
  farthest SLIT distance (:data:`REMOTE_COST`), scaled by distance as the prior is
  (:func:`~toposcope.advisor.locality.distance_penalty`).

The remote part of its step that pinning saves is then ``remote share x memory-bound share
x remote cost``, and the gain ``saved / (1 - saved)``: the step shrinks by what it saves.
The figures are the advisor's own round figures (``docs/policies.md`` gives their sources),
not any simulator's.

Where the operator measured the machine's memory bandwidths (``--memory-bandwidth``,
:mod:`~toposcope.advisor.memory_matrix`), its figures replace both: a core's bandwidth is
the measured local figure of the nodes its threads run on (:func:`core_gbps_on`), and the
remote part is priced pair by pair, ``sum of c_a x m_b x (local_a / bandwidth_ab - 1)`` over
its CPU shares ``c`` and memory shares ``m`` (for a workload holding GPUs a page costs the
worse of that and its distance to the nearest of its GPUs' nodes), plus a share
(:data:`THREAD_SPREAD`) of it for each pair of its threads on different nodes
(:func:`matrix_cost`), instead of one remote share times a cost scaled by distance.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from toposcope.advisor.model import NodeModel, WorkloadModel
from toposcope.report.recommendation import Evidence

GIGA = 1e9
#: what one busy core streams from local memory (GB/s): STREAM triad with a single thread
#: on current two-socket Xeon and EPYC servers reaches about 11 GB/s
CORE_STREAM_GBPS = 11.0
#: local / remote bandwidth - 1 at the farthest SLIT distance: STREAM across a socket link
#: reaches about 60 % of local bandwidth (Intel Memory Latency Checker's bandwidth matrix on
#: two-socket Xeon Scalable servers)
REMOTE_COST = 0.65
#: the share of a remote page's cost that a pair of a workload's threads on different NUMA
#: nodes pays for the cache lines they share (an assumption: no published figure isolates
#: it; with measured bandwidths the rest of the pin's price is measured, and calibration
#: corrects this part)
THREAD_SPREAD = 0.33
#: the most of a step pinning is taken to save (keeps ``saved / (1 - saved)`` finite)
MAX_SAVED = 0.9


@dataclass(frozen=True)
class MeasuredMemoryShare:
    """A workload's measured memory-bound share and what it rests on: its local and remote
    memory traffic (bytes per second), the cores it kept busy, and the per-core stream
    bandwidth the share was taken against (GB/s).
    """

    share: float
    local_bytes_per_second: float
    remote_bytes_per_second: float
    cores: float
    core_gbps: float
    #: where ``core_gbps`` comes from: a ``--memory-bandwidth`` file, or "" (the setting)
    core_origin: str = ""

    @property
    def remote_fraction(self) -> float:
        """The share of its traffic that went to another NUMA node's memory."""
        total = self.local_bytes_per_second + self.remote_bytes_per_second
        return self.remote_bytes_per_second / total if total > 0 else 0.0

    def text(self) -> str:
        """One clause for a gain model: the share and its terms."""
        total = self.local_bytes_per_second + self.remote_bytes_per_second
        return (
            f"measured memory-bound share {self.share:.3f} ({total / GIGA:.2f} GB/s of memory "
            f"traffic, {self.remote_fraction:.0%} remote, over {self.cores:.2f} busy cores at "
            f"{self.core_gbps:.3g} GB/s each"
            + (f" measured in {self.core_origin}" if self.core_origin else "")
            + "; from resctrl MBM)"
        )

    def to_dict(self) -> dict[str, object]:
        """JSON form for a recommendation's ``current`` state."""
        return {
            "estimate": "measured",
            "share": round(self.share, 4),
            "local_bytes_per_second": round(self.local_bytes_per_second),
            "remote_bytes_per_second": round(self.remote_bytes_per_second),
            "cores": round(self.cores, 3),
            "core_gbps": round(self.core_gbps, 3),
            "core_gbps_source": "measured" if self.core_origin else "setting",
            "source": "resctrl",
        }

    def evidence(self, workload: WorkloadModel) -> list[Evidence]:
        """The share and its traffic as evidence values of ``workload``."""
        labels = {"node": workload.node, "workload": workload.name}
        return [
            Evidence("measured_memory_bound_share", labels, self.share),
            Evidence(
                "toposcope_workload_memory_bandwidth_bytes_total",
                {**labels, "locality": "local"},
                self.local_bytes_per_second,
            ),
            Evidence(
                "toposcope_workload_memory_bandwidth_bytes_total",
                {**labels, "locality": "remote"},
                self.remote_bytes_per_second,
            ),
        ]


def prior_basis(reason: str) -> dict[str, object]:
    """The ``current`` entry of a recommendation priced by the prior, and why."""
    return {"estimate": "prior", "reason": reason}


def core_gbps_on(
    node: NodeModel | None, cpu: Mapping[int, float], default: float
) -> tuple[float, str]:
    """What one core of a workload with CPU shares ``cpu`` streams from local memory, and
    the file it was measured in: the measured local figures of ``node``'s
    ``--memory-bandwidth`` pair lines weighted by ``cpu``; ``(default, "")`` where there is
    no such file, it gives a whole node's figures (MLC) or misses one of the nodes.
    """
    matrix = node.measured_memory if node is not None else None
    total = sum(cpu.values())
    if matrix is None or total <= 0:
        return default, ""
    figures = [(share, matrix.core_gbps(numa)) for numa, share in cpu.items() if share > 0]
    if any(gbps is None for _, gbps in figures):
        return default, ""
    return sum(share * (gbps or 0.0) for share, gbps in figures) / total, matrix.path


def matrix_cost(
    node: NodeModel,
    cpu: Mapping[int, float],
    memory: Mapping[int, float],
    gpu_nodes: Collection[int] = (),
    thread_spread: float = 0.0,
) -> float | None:
    """What a placement's remote memory costs a fully memory-bound workload, from ``node``'s
    measured bandwidths (``r_ab = local_a / bandwidth_ab - 1``), over its CPU shares ``c``
    and memory shares ``m``:

    * each (thread node ``a``, page node ``b``) pair costs ``c_a x m_b`` times its worst
      crossing: ``r_ab`` for the thread reading the page, and for a workload whose GPUs sit
      on ``gpu_nodes`` also ``min over g of r_gb``, the page read from the nearest of its
      GPUs' nodes on every host-to-device copy (the same socket link, not paid twice);
    * each pair of its threads on different nodes ``c_a x c_b x r_ab x thread_spread``: the
      cache lines they share cross the link too.

    ``None`` without a ``--memory-bandwidth`` file, without both shares, or with a pair the
    file does not give.
    """
    matrix = node.measured_memory
    if matrix is None or not cpu or not memory:
        return None
    used = {n: m for n, m in memory.items() if m > 0}
    far: dict[int, float] = {}
    for b in used:
        if gpu_nodes:
            found = [matrix.remote_cost(g, b) for g in gpu_nodes]
            if any(f is None for f in found):
                return None
            far[b] = min(f for f in found if f is not None)
        else:
            far[b] = 0.0
    total = 0.0
    threads = {a: c for a, c in cpu.items() if c > 0}
    for a, c in threads.items():
        for b, m in used.items():
            cost = matrix.remote_cost(a, b)
            if cost is None:
                return None
            total += c * m * max(cost, far[b])
        for b, other in threads.items():
            if b != a and thread_spread > 0:
                cost = matrix.remote_cost(a, b)
                if cost is None:
                    return None
                total += c * other * cost * thread_spread
    return total


@dataclass(frozen=True)
class MatrixPricing:
    """How a pin was priced from the node's measured memory bandwidths: the workload's
    measured memory-bound share, the NUMA nodes of its GPUs and the share of a remote page's
    cost a pair of its threads on different nodes pays (:func:`matrix_cost`), so that a plan
    whose memory does not all fit is priced on the same basis.
    """

    share: float
    gpu_nodes: frozenset[int]
    thread_spread: float

    def cost(
        self, node: NodeModel, cpu: Mapping[int, float], memory: Mapping[int, float]
    ) -> float | None:
        """The share of its step a placement costs (``None``: the file lacks a pair)."""
        found = matrix_cost(node, cpu, memory, self.gpu_nodes, self.thread_spread)
        return None if found is None else self.share * found


def measured_memory_share(
    workload: WorkloadModel, core_gbps: float = CORE_STREAM_GBPS, node: NodeModel | None = None
) -> MeasuredMemoryShare | str:
    """``workload``'s measured memory-bound share, or why there is none (then the prior
    stands): no memory traffic series, or no rate of its CPU time to weigh it against. A
    core's bandwidth is ``node``'s measured one where a ``--memory-bandwidth`` file gives it
    (:func:`core_gbps_on`), else ``core_gbps``.
    """
    traffic = workload.memory_bytes_per_second
    if not traffic:
        return "no memory traffic series (resctrl MBM) for it"
    cores = workload.cores_used()
    if cores is None or cores <= 0:
        return "memory traffic without a rate of its CPU time"
    local = traffic.get("local", 0.0)
    remote = traffic.get("remote", 0.0)
    core_gbps, origin = core_gbps_on(node, workload.cpu_shares(), core_gbps)
    share = min(1.0, (local + remote) / (cores * core_gbps * GIGA))
    return MeasuredMemoryShare(share, local, remote, cores, core_gbps, origin)
