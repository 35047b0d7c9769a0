"""A job move's link gain: from the job's measured link traffic where it has some, else the
prior.

**Measured.** A running job's step spends a share ``s`` of its time moving bytes over its
dearest GPU pair; the rest (compute, input) does not depend on the link. Its GPUs' measured
traffic on that pair's kind of link (PCIe, or NVLink when the pair is NVLinked), each way,
against the pair's measured bandwidth (a ``--p2p-bandwidth`` figure,
:mod:`~toposcope.advisor.link_prices`) gives ``s``: a pair of
``B`` GB/s carrying ``X`` GB/s is busy ``X / B`` of the time, at most all of it, and at most
the time the SMs are idle where SM activity is published. The same bytes on a pair of
``B'`` GB/s take ``B / B'`` as long (time per byte), so the step-time ratio is

    ``T_new / T_now = (1 - s) + s x B / B'``

and the gain ``T_now / T_new - 1``. Nothing of the prior enters it: neither
``sensitivity`` nor the communication share of the prices' own formula.

A new pair less than :data:`SAME_BANDWIDTH` faster than the current one counts as no
faster (the spread of a bandwidth test).

**Onto NVLink.** From a measured pair, the new pair's bandwidth is the NVLinks' own, from
the topology (:mod:`~toposcope.advisor.link_prices`: links per bond times the GPU's NVLink
rate; a bandwidth test of the PCIe paths does not measure them). The tier prior puts an
NVLink only 1.25 times above a PCIe switch; the job's traffic over the NVLinks' bandwidth
says what it is worth to that job, 4 to 25 times its speed for the closed loop's
communication-bound jobs. Such estimates made job-migration's first-come choice hand a
machine's few NVLinked sets to whoever asked first (``demo`` fell from 0.896 to 0.835 of
the oracle); contested sets are now chosen jointly
(:mod:`~toposcope.advisor.policies.contested_moves`).

**Prior.** Without traffic on the job's links over the window, without a measured
bandwidth behind the current price (and, off NVLink, the new one: ``--p2p-bandwidth``), or
for a move off or between NVLinks, the gain is the prices' ratio as before: ``f_now /
f_new - 1`` with the slowdown scaled by ``sensitivity``; off or between NVLinks the new
set is priced at least at its tier's factor (:func:`off_nvlink_gain`). The topology's
bandwidths are not enough between PCIe paths: there their ratio is the tier prior's own (a
switch at the link's peak, the socket link at 0.29 of it), and a share read against them
reads high; in the closed loop's ``contention-links`` the estimates came out 0.66 off the
truth against 0.36 for the prior (docs/benchmarks.md).

Every estimate says which it used (:attr:`LinkGain.source`) and, in words, what it rests
on (:attr:`LinkGain.text`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from toposcope.advisor.comm_share import GIGA, MeasuredShare
from toposcope.advisor.gpu_sets import Placement
from toposcope.advisor.link_prices import LINK_FACTOR
from toposcope.topology.model import LinkType

#: where an estimate came from: the job's measured traffic, or the prior
MEASURED = "measured"
PRIOR = "prior"
#: pairs whose bandwidths differ by less than this share are the same as far as a
#: measurement tells: bandwidth tests repeat within a few per cent, so a move between two
#: pairs of one tier would otherwise chase the noise of the test
SAME_BANDWIDTH = 0.05


@dataclass(frozen=True)
class LinkGain:
    """The estimated gain of moving a job from one GPU set to another, ``T_now / T_new - 1``.

    ``source`` is :data:`MEASURED` or :data:`PRIOR`; ``share`` the measured share of the
    step spent on the dearest pair (``None`` for the prior); ``text`` the gain model in
    words; ``locality`` the step-time factor of the NUMA locality the move loses, included
    (1: none, :meth:`with_locality`).
    """

    gain: float
    source: str
    share: float | None
    text: str
    locality: float = 1.0

    def with_locality(self, factor: float, why: str) -> LinkGain:
        """This estimate with the step time also multiplied by ``factor`` (the locality a
        move loses, ``why`` in words; ``factor`` 1 changes nothing).
        """
        if factor == 1.0:
            return self
        ratio = self.ratio * factor
        return replace(self, gain=1.0 / ratio - 1.0, text=f"{self.text}; {why}", locality=factor)

    @property
    def ratio(self) -> float:
        """Step time after over step time now (``1 / (1 + gain)``)."""
        return 1.0 / (1.0 + self.gain)

    def to_dict(self) -> dict[str, object]:
        """JSON form for a recommendation's ``current.communication_share.estimate``."""
        share = round(self.share, 4) if self.share is not None else None
        return {"source": self.source, "gain": round(self.gain, 4), "share": share}


def each_way(measured: MeasuredShare, current: Placement) -> float:
    """Bytes per second ``measured``'s busiest GPU moves each way on the kind of link of
    ``current``'s dearest pair: NVLink when that pair is NVLinked (half of what it sends and
    receives together), else PCIe: the smaller direction where both are published (a peer
    exchange moves as much each way, the input pipeline's host copies mostly one way), else
    half of the two together.
    """
    if current.worst_link == LinkType.NVLINK:
        return measured.nvlink_bytes_per_second / 2.0
    if measured.pcie_each_way_bytes_per_second is not None:
        return measured.pcie_each_way_bytes_per_second
    return measured.pcie_bytes_per_second / 2.0


def link_share(measured: MeasuredShare, current: Placement) -> float | None:
    """The share of a step ``measured``'s job spends on the dearest pair of ``current``:
    its busiest GPU's traffic each way on that pair's kind of link over the pair's GB/s, at
    most 1 and at most the SMs' idle time (``None``: no bandwidth behind the price).
    """
    gbps = current.price.gbps
    if gbps is None or gbps <= 0:
        return None
    share = min(1.0, each_way(measured, current) / (gbps * GIGA))
    if measured.sm_active is not None:
        share = min(share, max(0.0, 1.0 - measured.sm_active))
    return share


def prior_gain(current: Placement, target: Placement, sensitivity: float, why: str) -> LinkGain:
    """The prices' ratio, the slowdown scaled by ``sensitivity``; ``why`` the prior was used."""
    f_now, f_new = current.factor(sensitivity), target.factor(sensitivity)
    text = (
        f"link factor now {f_now:.2f} / after {f_new:.2f} - 1 (estimate from the prior: "
        f"link prices, sensitivity {sensitivity:g}; {why})"
    )
    return LinkGain(f_now / f_new - 1.0, PRIOR, None, text)


def off_nvlink_gain(current: Placement, target: Placement, sensitivity: float) -> LinkGain:
    """The prior for a move off or between NVLinks, the new set priced at least at its
    tier's factor: a measured PCIe price is relative to the node's fastest measured PCIe
    pair, the NVLink price to a PCIe switch, so a measured cross-socket pair (1.27 where the
    tier says 2.0) made a time-sliced job's move off its NVSwitch GPUs look like a gain of
    16 % that came out a loss of 6 % in the closed loop's ``demo``.
    """
    tier = LINK_FACTOR.get(target.worst_link, 1.0)
    f_now = current.factor(sensitivity)
    f_new = max(target.factor(sensitivity), 1.0 + sensitivity * (tier - 1.0))
    text = (
        f"link factor now {f_now:.2f} / after {f_new:.2f} - 1 (estimate from the prior: "
        f"link prices, sensitivity {sensitivity:g}; a move off or between NVLinks, the new "
        f"set priced at least at its tier's {tier:g})"
    )
    return LinkGain(f_now / f_new - 1.0, PRIOR, None, text)


def link_gain(
    measured: MeasuredShare | None, current: Placement, target: Placement, sensitivity: float
) -> LinkGain:
    """The gain of moving from ``current`` to ``target``: from ``measured`` traffic when
    there is some and both prices rest on a measured bandwidth, or the current one does and
    ``target`` is NVLinked, else the prior (module docstring).
    """
    if measured is None and current.worst_link == LinkType.NVLINK:
        return off_nvlink_gain(current, target, sensitivity)
    if measured is None:
        return prior_gain(current, target, sensitivity, "no measured link traffic")
    if current.worst_link == LinkType.NVLINK:
        return off_nvlink_gain(current, target, sensitivity)
    now_gbps, new_gbps = current.price.gbps, target.price.gbps
    if current.price.source != MEASURED or not (
        target.price.source == MEASURED or target.worst_link == LinkType.NVLINK
    ):
        return prior_gain(current, target, sensitivity, "pair bandwidths not measured")
    share = link_share(measured, current)
    if share is None or share <= 0 or now_gbps is None or new_gbps is None or new_gbps <= 0:
        return prior_gain(current, target, sensitivity, "no traffic on its dearest pair")
    nvlink = target.worst_link == LinkType.NVLINK
    if new_gbps <= now_gbps * (1.0 + SAME_BANDWIDTH):
        new_gbps = now_gbps  # within a measurement's spread: no faster
    ratio = (1.0 - share) + share * now_gbps / new_gbps
    text = (
        f"step time (1 - s) + s x B_now / B_after = {1.0 - share:.2f} + {share:.2f} x "
        f"{now_gbps:.1f} / {new_gbps:.1f} GB/s = {ratio:.3f} (estimate from the measured "
        f"link traffic: s, the share of a step on its dearest pair, from "
        f"{each_way(measured, current) / GIGA:.1f} GB/s each way over {now_gbps:.1f}"
        f"{'; B_after: the NVLinks, from the topology' if nvlink else ''})"
    )
    return LinkGain(1.0 / ratio - 1.0, MEASURED, share, text)
