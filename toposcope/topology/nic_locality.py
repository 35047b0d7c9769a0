"""Which RDMA NIC is nearest to each GPU, from the topology's GPU-to-NIC matrix.

NCCL sends a rank's inter-node traffic through a NIC of its choice; it is fastest when the
NIC hangs off the same PCIe switch as the rank's GPU (``PIX``/``PXB``: GPUDirect RDMA moves
the data without crossing the CPU) and slowest when it sits on the other socket (``SYS``).
:class:`NicLocality` ranks the tiers (:data:`~toposcope.catalogue.fabric_metrics.LINK_TIERS`,
nearest first) for the host's RDMA NICs only (InfiniBand and RoCE: those NCCL's IB transport
uses), and says for every GPU which NICs are its nearest and at which tier, so that the
exporter can tell a workload that its GPUs' traffic crosses the CPU (:data:`FAR_TIERS`) or
that a rank uses a NIC other than its nearest.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from toposcope.catalogue.fabric_metrics import FAR_TIERS, LINK_TIERS
from toposcope.topology.model import NicKind, Topology

_RANK = {tier: rank for rank, tier in enumerate(LINK_TIERS)}
#: the NIC kinds NCCL's InfiniBand transport (and so GPUDirect RDMA) uses
RDMA_KINDS = frozenset({NicKind.INFINIBAND, NicKind.ROCE})


def tier_rank(link: str) -> int:
    """The rank of a PCIe tier, 0 for ``PIX``; unknown words rank after ``SYS``."""
    return _RANK.get(link, len(LINK_TIERS))


@dataclass(frozen=True)
class NicLocality:
    """The RDMA NICs of a host and, per GPU index, its tier to each and its nearest ones."""

    nics: tuple[str, ...] = ()
    links: dict[tuple[int, str], str] = field(default_factory=dict)
    nearest: dict[int, tuple[str, tuple[str, ...]]] = field(default_factory=dict)

    @classmethod
    def of(cls, topology: Topology) -> NicLocality:
        """The locality of ``topology``'s RDMA NICs (empty on a host without any)."""
        rdma = tuple(nic.name for nic in topology.nics if nic.kind in RDMA_KINDS)
        names = set(rdma)
        links = {
            (link.gpu, link.nic): link.link for link in topology.gpu_nic_links if link.nic in names
        }
        best: dict[int, tuple[str, list[str]]] = {}
        for (gpu, nic), link in links.items():
            current = best.get(gpu)
            if current is None or tier_rank(link) < tier_rank(current[0]):
                best[gpu] = (link, [nic])
            elif tier_rank(link) == tier_rank(current[0]):
                current[1].append(nic)
        nearest = {gpu: (link, tuple(sorted(nics))) for gpu, (link, nics) in best.items()}
        return cls(rdma, links, nearest)

    def is_nearest(self, gpu: int, nic: str) -> bool:
        """Whether ``nic`` is one of ``gpu``'s nearest RDMA NICs."""
        entry = self.nearest.get(gpu)
        return entry is not None and nic in entry[1]

    def best_link(self, gpus: Iterable[int], nic: str) -> str:
        """The nearest tier from any of ``gpus`` to ``nic`` (``""`` when none is known)."""
        tiers = [self.links[(gpu, nic)] for gpu in gpus if (gpu, nic) in self.links]
        return min(tiers, key=tier_rank) if tiers else ""

    def far_gpus(self, gpus: Iterable[int]) -> int:
        """How many of ``gpus`` have no RDMA NIC nearer than NODE (their traffic crosses
        the CPU's host bridge or the socket link).
        """
        return sum(1 for gpu in gpus if gpu in self.nearest and self.nearest[gpu][0] in FAR_TIERS)
