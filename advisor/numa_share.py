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
"""

from __future__ import annotations

from dataclasses import dataclass

from toposcope.advisor.model import WorkloadModel
from toposcope.report.recommendation import Evidence

GIGA = 1e9
#: what one busy core streams from local memory (GB/s): STREAM triad with a single thread
#: on current two-socket Xeon and EPYC servers reaches about 11 GB/s
CORE_STREAM_GBPS = 11.0
#: local / remote bandwidth - 1 at the farthest SLIT distance: STREAM across a socket link
#: reaches about 60 % of local bandwidth (Intel Memory Latency Checker's bandwidth matrix on
#: two-socket Xeon Scalable servers)
REMOTE_COST = 0.65
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
            f"{self.core_gbps:g} GB/s each; from resctrl MBM)"
        )

    def to_dict(self) -> dict[str, object]:
        """JSON form for a recommendation's ``current`` state."""
        return {
            "estimate": "measured",
            "share": round(self.share, 4),
            "local_bytes_per_second": round(self.local_bytes_per_second),
            "remote_bytes_per_second": round(self.remote_bytes_per_second),
            "cores": round(self.cores, 3),
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


def measured_memory_share(
    workload: WorkloadModel, core_gbps: float = CORE_STREAM_GBPS
) -> MeasuredMemoryShare | str:
    """``workload``'s measured memory-bound share, or why there is none (then the prior
    stands): no memory traffic series, or no rate of its CPU time to weigh it against.
    """
    traffic = workload.memory_bytes_per_second
    if not traffic:
        return "no memory traffic series (resctrl MBM) for it"
    cores = workload.cores_used()
    if cores is None or cores <= 0:
        return "memory traffic without a rate of its CPU time"
    local = traffic.get("local", 0.0)
    remote = traffic.get("remote", 0.0)
    share = min(1.0, (local + remote) / (cores * core_gbps * GIGA))
    return MeasuredMemoryShare(share, local, remote, cores, core_gbps)
