"""Link prices: what a GPU pair's connection costs a communicating job, from its bandwidth.

A price is a step-time factor, ``p(B) = (1 - c) + c x B_ref / B``: ``c`` is the share of a
step a communication-bound job spends exchanging data behind one PCIe switch (Gandiva's
baseline, :data:`COMM_SHARE`), ``B_ref`` the peak of PCIe Gen4 x16 (:data:`REFERENCE_GBPS`:
two GPUs behind one such switch price 1.0) and ``B`` the pair's bandwidth (GB/s each way):

* PCIe paths: the slower of the two GPUs' PCIe links (generation and width from the link's
  sysfs speed and width when the exporter publishes them, else the generation of the GPU
  model at x16), times the share of a switch's peer bandwidth that the path keeps: through
  more bridges (``PXB``), the host bridge (``PHB``, ``NODE``) or the socket interconnect
  (``SYS``). Those shares are the ones that give the Gandiva-anchored tier factors
  (:data:`LINK_FACTOR`) at the reference rate, so healthy Gen4 x16 links are priced exactly
  as before, and a link that trained down, another PCIe generation, or a ``SYS`` pair
  within one package (dies of one socket: half-way, in log terms, between the host bridge
  and the socket interconnect) is priced by what it carries.
* ``NV#``: ``#`` links at the per-link rate of the GPU's NVLink generation (from its model
  name: 20 GB/s on NVLink 1, 25 on NVLink 2-4, 50 on NVLink 5); through NVSwitches the
  label counts the GPU's links into the switches, and every peer gets all of them. The
  node's widest bond keeps the tier's factor and a narrower one costs ``p(B) /
  p(B_widest)`` more: priced by ``p`` alone, NVSwitch moves lowered the closed loop's
  ``demo`` figure (docs/policies.md, "Link prices").
* Measured: a ``--p2p-bandwidth`` matrix (:mod:`.p2p_matrix`) replaces the pair's bandwidth
  with the figure measured (``p`` alone), ``B_ref`` then being the best measured pair behind
  one switch scaled from the node's PCIe rate to the reference, when the matrix has one.

What cannot be priced (no GPU model nor PCIe figures, an unknown link label) keeps the tier
factor, and says so (source ``tier``). Every price names its source (``measured``,
``topology``, ``tier``) and what it rests on; the placement output and the recommendations'
gain models show it.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from toposcope.topology.model import LinkType

if TYPE_CHECKING:
    from toposcope.advisor.model import NodeModel

#: relative step time of a communication-bound multi-GPU job by its worst link (PIX = 1.0):
#: the tier prices, used where a pair cannot be priced by its bandwidth
LINK_FACTOR: dict[LinkType | None, float] = {
    None: 1.0,  # one GPU: no GPU-to-GPU traffic
    LinkType.NVLINK: 0.8,  # one NVLink against a Gen3 switch (docs/policies.md derives it)
    LinkType.PIX: 1.0,
    LinkType.PXB: 1.2,
    LinkType.PHB: 1.4,
    LinkType.NODE: 1.4,
    LinkType.SYS: 2.0,
}
#: share of a step a communication-bound job spends exchanging data behind one PCIe switch
#: (Gandiva's 40 % across switches with the peer bandwidth halved by a host bridge)
COMM_SHARE = 0.4
#: NVLink generation -> GB/s each way per link (NVIDIA's data sheets: P100 160 GB/s over 4
#: links both ways; V100, A100 and H100 300, 600 and 900 over 6, 12 and 18; Blackwell 1.8 TB/s
#: over 18)
NVLINK_GBPS_PER_LINK: dict[int, float] = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
#: PCIe generation -> transfer rate per lane, GT/s (PCI-SIG)
PCIE_GTS: dict[int, float] = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
#: lanes assumed for a GPU whose link width is not published
DEFAULT_LANES = 16
#: GPU model name pattern -> (NVLink generation or None, PCIe generation) of its interfaces
GPU_GENERATIONS: tuple[tuple[re.Pattern[str], int | None, int], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), nvlink, pcie)
    for pattern, nvlink, pcie in (
        (r"\bP100\b", 1, 3),
        (r"\bV100", 2, 3),
        (r"\b(A100|A800|A30)\b", 3, 4),
        (r"\b(GH200|H100|H800|H200|H20)\b", 4, 5),
        (r"\b(GB300|B300)\b", 5, 6),
        (r"\b(GB200|B200|B100)\b", 5, 5),
        (r"\b(L40S?|L4|L20|A10G?|A16|A40|A2|RTX A[0-9]+|RTX [0-9]+ Ada)\b", None, 4),
        (r"\b(T4|P4|P40)\b", None, 3),
    )
)


def pcie_gbps(generation: int, lanes: int) -> float:
    """Peak GB/s each way of a PCIe link (8b/10b up to Gen2, 128b/130b to Gen5, FLIT on Gen6)."""
    encoding = 0.8 if generation <= 2 else 128 / 130 if generation <= 5 else 242 / 256
    return PCIE_GTS[generation] * encoding / 8 * lanes


#: the PCIe link at which a switch pair prices 1.0 and the tier factors hold: Gen4 x16, the
#: link of today's PCIe GPUs (A100 PCIe, L40S) and of the hosts of A100 boards
REFERENCE_GBPS = pcie_gbps(4, 16)


def pcie_generation(gts: float) -> int | None:
    """The PCIe generation of a link speed in GT/s (``None`` for a speed of no generation)."""
    return next((gen for gen, rate in PCIE_GTS.items() if math.isclose(rate, gts)), None)


def generations(model: str) -> tuple[int | None, int | None]:
    """(NVLink generation, PCIe generation) of a GPU model name; ``None`` where unknown."""
    for pattern, nvlink, pcie in GPU_GENERATIONS:
        if pattern.search(model):
            return nvlink, pcie
    return None, None


def path_share(link: LinkType) -> float:
    """Share of a switch's peer bandwidth a PCIe path keeps: the one that gives the tier's
    factor (:data:`LINK_FACTOR`) at the switch's own rate.
    """
    return COMM_SHARE / (LINK_FACTOR[link] - 1.0 + COMM_SHARE)


def factor_of(gbps: float, switch_gbps: float) -> float:
    """Step-time factor of a pair of ``gbps`` against a switch of ``switch_gbps``."""
    return 1.0 - COMM_SHARE + COMM_SHARE * switch_gbps / gbps


@dataclass(frozen=True)
class Measured:
    """A measured GB/s between two GPUs, and where it was read (``FILE:LINE``)."""

    gbps: float
    origin: str


@dataclass(frozen=True)
class LinkPrice:
    """The price of a pair: its step-time factor (sensitivity 1; PIX at the node's rate is
    1.0), where it came from (``measured``, ``topology``, ``tier``; ``none`` for one GPU), the
    GB/s it rests on (``None`` for a tier price) and what it rests on, in words.
    """

    factor: float
    source: str
    gbps: float | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        """JSON form: ``factor``, ``source``, ``gbps``, ``detail``."""
        gbps = round(self.gbps, 2) if self.gbps is not None else None
        return {
            "factor": round(self.factor, 4),
            "source": self.source,
            "gbps": gbps,
            "detail": self.detail,
        }


#: the price of one GPU (no pair)
SINGLE_GPU = LinkPrice(1.0, "none", None, "one GPU: no GPU-to-GPU traffic")


class NodePrices:
    """Every GPU pair's price on one node (computed once per pair; built by
    :attr:`~toposcope.advisor.model.NodeModel.prices`).

    ``anchor_gbps`` is the measured GB/s that prices 1.0 on this node: the best measured
    pair behind one switch scaled from the node's PCIe rate to the reference
    (:data:`REFERENCE_GBPS`), or the reference itself when the matrix has no such pair.
    """

    def __init__(self, node: NodeModel) -> None:
        self.node = node
        self._pairs: dict[tuple[int, int], LinkPrice] = {}
        self._generations = {g.index: generations(g.model) for g in node.gpus}
        self._pcie = {g.index: self._gpu_pcie(g.index) for g in node.gpus}
        known = [v[0] for v in self._pcie.values() if v is not None]
        self.nominal_gbps = max(known) if known else None
        self.anchor_gbps = self._anchor()

    def _gpu_pcie(self, index: int) -> tuple[float, str] | None:
        """A GPU's PCIe link: (GB/s, "Gen4 x16"), published figures first, else its model's."""
        gpu = self.node.gpu(index)
        if gpu is None:
            return None
        generation = pcie_generation(gpu.pcie_gts) if gpu.pcie_gts is not None else None
        lanes = gpu.pcie_lanes if gpu.pcie_lanes is not None else DEFAULT_LANES
        if generation is None:
            generation = self._generations.get(index, (None, None))[1]
        if generation is None:
            return None
        return pcie_gbps(generation, lanes), f"PCIe Gen{generation} x{lanes}"

    def _anchor(self) -> float:
        switched = [
            m.gbps
            for a, b in {(min(p), max(p)) for p in self.node.measured_bandwidth}
            if self.node.link(a, b) in (LinkType.PIX, LinkType.PXB)
            and (m := self._measured(a, b)) is not None
        ]
        if not switched:
            return REFERENCE_GBPS
        scale = REFERENCE_GBPS / self.nominal_gbps if self.nominal_gbps else 1.0
        return max(switched) * scale

    def pair(self, a: int, b: int) -> LinkPrice:
        """The price of the pair ``a``-``b`` (one GPU when ``a == b``)."""
        if a == b:
            return SINGLE_GPU
        key = (a, b) if a < b else (b, a)
        price = self._pairs.get(key)
        if price is None:
            price = self._price(*key)
            self._pairs[key] = price
        return price

    def _price(self, a: int, b: int) -> LinkPrice:
        link = self.node.link(a, b) or LinkType.SYS
        tier = LinkPrice(LINK_FACTOR[link], "tier", None, f"{link}: tier factor")
        measured = self._measured(a, b)
        if measured is not None:
            text = f"measured {measured.gbps:.1f} GB/s ({measured.origin})"
            return LinkPrice(
                factor_of(measured.gbps, self.anchor_gbps), "measured", measured.gbps, text
            )
        if link == LinkType.NVLINK:
            return self._nvlink(a, b) or tier
        return self._pcie_price(a, b, link) or tier

    def _measured(self, a: int, b: int) -> Measured | None:
        found = [m for m in (self.node.measured_bandwidth.get(p) for p in ((a, b), (b, a))) if m]
        return min(found, key=lambda m: m.gbps) if found else None

    def _bond(self, a: int, b: int) -> tuple[str, int, int] | None:
        """An NVLinked pair's (label, links, NVLink generation); ``None`` when either is
        unknown.
        """
        label = self.node.links.get((a, b)) or self.node.links.get((b, a)) or ""
        count = re.fullmatch(r"NV(\d{1,3})", label.strip().upper())
        generation = self._generations.get(a, (None, None))[0]
        if count is None or generation is None:
            return None
        return label.strip(), int(count.group(1)), generation

    @cached_property
    def widest_bond_gbps(self) -> float | None:
        """GB/s of the node's widest NVLink bond (``None`` without a priceable one)."""
        found: list[float] = []
        for a, b in self.node.links:
            if a < b and (bond := self._bond(a, b)) is not None:
                found.append(bond[1] * NVLINK_GBPS_PER_LINK[bond[2]])
        return max(found) if found else None

    def _nvlink(self, a: int, b: int) -> LinkPrice | None:
        """The price of a bond: the tier's against the node's widest bond, scaled by what its
        bandwidth gives against the widest's (a node of one bond width keeps the tier price).
        """
        bond = self._bond(a, b)
        widest = self.widest_bond_gbps
        if bond is None or widest is None:
            return None
        label, links, generation = bond
        per_link = NVLINK_GBPS_PER_LINK[generation]
        gbps = links * per_link
        scale = factor_of(gbps, REFERENCE_GBPS) / factor_of(widest, REFERENCE_GBPS)
        factor = LINK_FACTOR[LinkType.NVLINK] * (1.0 if gbps == widest else scale)
        text = f"{label}: {links} x {per_link:g} GB/s (NVLink {generation})"
        if gbps != widest:
            text += f", against the node's widest bond ({widest:g} GB/s)"
        return LinkPrice(factor, "topology", gbps, text)

    def _pcie_price(self, a: int, b: int, link: LinkType) -> LinkPrice | None:
        ends = [self._pcie.get(a), self._pcie.get(b)]
        if None in ends:
            return None
        rate, name = min((e for e in ends if e is not None), key=lambda e: e[0])
        share = path_share(link)
        where = str(link)
        if link == LinkType.SYS and self._same_package(a, b):
            share = math.sqrt(share * path_share(LinkType.NODE))
            where = "SYS within one package"
        gbps = rate * share
        text = f"{where}: {name} ({rate:.1f} GB/s) x {share:.2f}"
        if math.isclose(rate, REFERENCE_GBPS) and where == str(link):
            return LinkPrice(LINK_FACTOR[link], "topology", gbps, text)  # the tier, exactly
        return LinkPrice(factor_of(gbps, REFERENCE_GBPS), "topology", gbps, text)

    def _same_package(self, a: int, b: int) -> bool:
        """Whether two GPUs sit on different NUMA nodes of one known package."""
        ga, gb = self.node.gpu(a), self.node.gpu(b)
        if ga is None or gb is None:
            return False
        if ga.numa_node == gb.numa_node:  # SYS on one NUMA node: the data disagree
            return False
        pa, pb = self.node.package_of(ga.numa_node), self.node.package_of(gb.numa_node)
        return pa is not None and pa == pb

    def worst(self, gpus: Sequence[int]) -> LinkPrice:
        """The price of a set: its dearest pair's (one GPU: :data:`SINGLE_GPU`)."""
        prices = [self.pair(a, b) for a, b in itertools.combinations(gpus, 2)]
        return max(prices, key=lambda p: p.factor) if prices else SINGLE_GPU


def price_text(*prices: tuple[str, LinkPrice]) -> str:
    """The prices a gain model used, in words: ``link prices: now topology (NV4: ...), after
    measured (...)``; one GPU's price is left out.
    """
    parts = [
        f"{label} {price.source} ({price.detail})"
        for label, price in prices
        if price.source != SINGLE_GPU.source
    ]
    return "link prices: " + ", ".join(parts) if parts else "link prices: one GPU, no pair"
