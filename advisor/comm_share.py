"""A running workload's measured communication share, from its GPUs' link traffic and SM
activity.

The link models of gpu-placement and job-migration rest on a prior: how much a job's step
time depends on its GPU links (``sensitivity``, Gandiva's figures). Where the GPUs publish
traffic and activity (``toposcope_gpu_{pcie,nvlink}_bytes_total`` and
``toposcope_gpu_sm_active_ratio``, or dcgm-exporter's ``DCGM_FI_PROF_*``), a job's own
figures say how busy its links are:

* link utilisation: per GPU, the bytes per second it sends and receives over PCIe against
  the capacity of the PCIe path its GPU set crosses (:data:`PCIE_CAPACITY_GBPS`, by the set's
  worst link), and over NVLink against its NVLinks (:data:`NVLINK_GBPS` per link, the widest
  bond to a peer of the set); the busiest link of the busiest GPU, as a synchronous job
  waits for its slowest GPU;
* the measured share: the link utilisation, at most the time the SMs were not busy
  (``1 - sm_active``): a job cannot wait on its links for longer than its SMs sit idle.
  Without SM activity (GPUs before Hopper without DCGM's profiling) it is the link
  utilisation alone;
* communication-bound: links busy (:data:`BOUND_LINK_UTILISATION`) while SMs are mostly
  idle (:data:`BOUND_SM_ACTIVE`).

The capacities are the advisor's own round figures (``docs/policies.md`` gives their
sources), not any simulator's. A GPU other workloads hold too reports the whole GPU's
figures, so the share is then an upper bound (``shared``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from toposcope.advisor.model import ClusterModel, NodeModel, WorkloadModel
from toposcope.report.recommendation import Evidence
from toposcope.topology.model import LinkType

GIGA = 1e9
#: what a GPU's PCIe path carries, both directions together (GB/s), by the worst link of
#: its GPU set (``None``: one GPU, only its own x16 link): a Gen4 x16 link moves about 25 GB/s
#: each way; peer traffic through a host bridge about 20, across the socket link about 12
PCIE_CAPACITY_GBPS: dict[LinkType | None, float] = {
    None: 50.0,
    LinkType.NVLINK: 50.0,
    LinkType.PIX: 50.0,
    LinkType.PXB: 50.0,
    LinkType.PHB: 40.0,
    LinkType.NODE: 40.0,
    LinkType.SYS: 24.0,
}
#: one NVLink, both directions together (GB/s): 25 GB/s each way on NVLink 2, 3 and 4
NVLINK_GBPS = 50.0
#: link utilisation from which a workload with mostly idle SMs is communication-bound
BOUND_LINK_UTILISATION = 0.4
#: SM activity under which a workload with busy links is communication-bound
BOUND_SM_ACTIVE = 0.4

_LINKS_RE = re.compile(r"NV(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class MeasuredShare:
    """A workload's measured communication share and what it rests on.

    ``pcie_bytes_per_second`` and ``nvlink_bytes_per_second`` are the busiest GPU's; the
    capacities are those the utilisation was taken against (GB/s); ``sm_active`` the mean
    over its GPUs (``None``: not published); ``source`` where the figures came from;
    ``pcie_each_way_bytes_per_second`` the busiest GPU's smaller PCIe direction (``None``:
    directions not published apart).
    """

    share: float
    link_utilisation: float
    worst_link: LinkType | None
    pcie_bytes_per_second: float
    nvlink_bytes_per_second: float
    pcie_capacity_gbps: float
    nvlink_capacity_gbps: float
    sm_active: float | None
    shared: bool
    source: str
    pcie_each_way_bytes_per_second: float | None = None

    @property
    def bound(self) -> bool:
        """Busy links while the SMs are mostly idle (unknown SM activity: not bound)."""
        return (
            self.link_utilisation >= BOUND_LINK_UTILISATION
            and self.sm_active is not None
            and self.sm_active < BOUND_SM_ACTIVE
        )

    def text(self) -> str:
        """One clause for a gain model: the share and its terms."""
        sm = f"SM active {self.sm_active:.2f}" if self.sm_active is not None else "no SM activity"
        worst = str(self.worst_link) if self.worst_link is not None else "one GPU"
        nvlink = (
            f", NVLink {self.nvlink_bytes_per_second / GIGA:.1f} of "
            f"{self.nvlink_capacity_gbps:g} GB/s"
            if self.nvlink_bytes_per_second > 0 or self.worst_link == LinkType.NVLINK
            else ""
        )
        return (
            f"measured communication share {self.share:.2f} (links {self.link_utilisation:.0%} "
            f"busy: PCIe {self.pcie_bytes_per_second / GIGA:.1f} of "
            f"{self.pcie_capacity_gbps:g} GB/s over {worst}{nvlink}; "
            f"{sm}{'; communication-bound' if self.bound else ''}"
            f"{'; GPUs shared, whole-GPU figures' if self.shared else ''}; from {self.source})"
        )

    def to_dict(self) -> dict[str, object]:
        """JSON form for a recommendation's ``current`` state."""
        return {
            "share": round(self.share, 4),
            "link_utilisation": round(self.link_utilisation, 4),
            "sm_active": round(self.sm_active, 4) if self.sm_active is not None else None,
            "bound": self.bound,
            "shared": self.shared,
            "source": self.source,
        }

    def evidence(self, workload: WorkloadModel) -> list[Evidence]:
        """The share and its terms as evidence values of ``workload``."""
        labels = {
            "node": workload.node,
            "workload": workload.name,
            "link": str(self.worst_link) if self.worst_link is not None else "",
            "source": self.source,
        }
        values = [
            Evidence("measured_communication_share", labels, self.share),
            Evidence("measured_link_utilisation", labels, self.link_utilisation),
            Evidence("measured_pcie_bytes_per_second", labels, self.pcie_bytes_per_second),
            Evidence("measured_nvlink_bytes_per_second", labels, self.nvlink_bytes_per_second),
        ]
        if self.sm_active is not None:
            values.append(Evidence("measured_sm_active_ratio", labels, self.sm_active))
        return values


def prior_text(sensitivity: float) -> str:
    """The gain model clause when no measured share exists."""
    return f"communication share: prior (sensitivity {sensitivity:g}; no measured link traffic)"


def worst_link(node: NodeModel, gpus: tuple[int, ...]) -> LinkType | None:
    """The worst link between two GPUs of ``gpus`` (``None``: one GPU or links unknown)."""
    links = [
        found
        for i, a in enumerate(gpus)
        for b in gpus[i + 1 :]
        if (found := node.link(a, b)) is not None
    ]
    return max(links, key=lambda t: t.rank) if links else None


def _nvlinks(node: NodeModel, gpu: int, gpus: tuple[int, ...]) -> int:
    """The widest NVLink bond from ``gpu`` to a peer of ``gpus`` (1 when none is numbered)."""
    widest = 0
    for peer in gpus:
        text = node.links.get((gpu, peer)) or node.links.get((peer, gpu)) or ""
        if match := _LINKS_RE.fullmatch(text.strip()):
            widest = max(widest, int(match.group(1)))
    return widest or 1


def measured_share(model: ClusterModel, workload: WorkloadModel) -> MeasuredShare | None:
    """``workload``'s measured communication share on its current GPUs, or ``None`` when none
    of them published link traffic over the window (then the prior stands).
    """
    node = model.node(workload.node)
    if node is None or not workload.gpus:
        return None
    worst = worst_link(node, workload.gpus)
    pcie_capacity = PCIE_CAPACITY_GBPS[worst]
    # utilisation, pcie, nvlink, capacity, pcie each way
    busiest: tuple[float, float, float, float, float | None] | None = None
    sm: list[float] = []
    for index in workload.gpus:
        gpu = node.gpu(index)
        pcie = workload.gpu_pcie_bytes_per_second.get(
            index, gpu.pcie_bytes_per_second if gpu is not None else None
        )
        nvlink = workload.gpu_nvlink_bytes_per_second.get(
            index, gpu.nvlink_bytes_per_second if gpu is not None else None
        )
        active = workload.gpu_sm_active.get(index, gpu.sm_active if gpu is not None else None)
        if active is not None:
            sm.append(active)
        if pcie is None and nvlink is None:
            continue
        nv_capacity = NVLINK_GBPS * _nvlinks(node, index, workload.gpus)
        utilisation = max(
            (pcie or 0.0) / (pcie_capacity * GIGA), (nvlink or 0.0) / (nv_capacity * GIGA)
        )
        each_way = workload.gpu_pcie_each_way_bytes_per_second.get(
            index, gpu.pcie_each_way_bytes_per_second if gpu is not None else None
        )
        if busiest is None or utilisation > busiest[0]:
            busiest = (utilisation, pcie or 0.0, nvlink or 0.0, nv_capacity, each_way)
    if busiest is None:
        return None
    utilisation = min(1.0, busiest[0])
    sm_active = sum(sm) / len(sm) if sm else None
    holders = model.gpu_holders(workload.node)
    share = min(utilisation, 1.0 - sm_active) if sm_active is not None else utilisation
    return MeasuredShare(
        share=max(0.0, share),
        link_utilisation=utilisation,
        worst_link=worst,
        pcie_bytes_per_second=busiest[1],
        nvlink_bytes_per_second=busiest[2],
        pcie_capacity_gbps=pcie_capacity,
        nvlink_capacity_gbps=busiest[3],
        sm_active=sm_active,
        shared=workload.gpus_shared or any(len(holders.get(i, ())) > 1 for i in workload.gpus),
        source=model.gpu_activity_source,
        pcie_each_way_bytes_per_second=busiest[4],
    )
