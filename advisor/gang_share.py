"""A running multi-node job's share of a step in inter-node collectives, from its NIC traffic.

fabric-placement prices a move of a spread multi-node job with a per-level slowdown: a step
runs ``1 + p x extra`` times as long as under its tightest cell, ``extra`` the levels its
traffic crosses above that cell, each weighted by the uplink's taper over 2:1 and the
multi-node jobs sharing it (:mod:`~toposcope.advisor.policies.fabric_swaps`). ``p`` is the
prior of :mod:`~toposcope.advisor.fabric_wait` until the job's own traffic says more.

Where the node exporters publish each RDMA port's traffic and line rate
(``toposcope_nic_port_bytes_total``, ``toposcope_nic_port_rate_bytes_per_second``) and which
NICs are nearest to each GPU (``toposcope_gpu_nic_link_info``), a job's busiest NIC tells how
much of its time it moves bytes:

* ``u``, the NIC's load: its bytes per second (the busier direction) over its line rate.
  Only NICs that serve the job alone count: the NICs nearest to the job's GPUs on each of its
  nodes (where NCCL sends a GPU's traffic), none of which is nearest to a GPU another
  workload holds (whose traffic the counter would add). The job's ``u`` is the highest over
  its NICs, as its ranks wait for the slowest;
* a job whose collectives take a share ``c`` of a step at full line rate spends, placed
  ``extra`` above its tightest cell, ``c / (1 + c x extra)`` of its time sending at line
  rate (it sends as many bytes per step, over a step that is that much longer), so
  ``u = c / (1 + c x extra)`` and ``c = u / (1 - u x extra)``;
* at the prior's 2:1 taper one level doubles the collectives' time (``1 + c``), so the
  per-level slowdown of the job is ``p = c``, at most :data:`MAX_PER_LEVEL`.

A load above line rate (a counter's total where a rate was asked, as a single scrape
answers), no traffic at all on the job's NICs (its ranks send through other NICs, or it
idles) or no NIC of the job's own is no measurement: the prior stands, and
:class:`GangShare` says why, so that a recommendation can say which priced it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from toposcope.advisor.model import ClusterModel

#: the most a measured per-level slowdown may be: a job whose collectives fill its steps
MAX_PER_LEVEL = 2.0
#: a load at or above this share of ``1 / extra`` leaves no room for compute: priced at the cap
SATURATED = 0.95


@dataclass(frozen=True)
class GangShare:
    """What prices a multi-node job's move: the per-level slowdown and where it came from.

    ``source`` is ``"measured"`` (``load`` the busiest NIC's traffic over its line rate,
    ``nic`` that NIC as ``node/device``) or ``"prior"`` (``reason`` why no measurement).
    """

    per_level: float
    source: str
    load: float | None = None
    nic: str = ""
    reason: str = ""

    @property
    def measured(self) -> bool:
        """Whether the job's own NIC traffic set the price."""
        return self.source == "measured"

    def describe(self) -> str:
        """One clause for a gain model's text."""
        if self.measured:
            return (
                f"{self.per_level:.3f} per level from its measured NIC load "
                f"{self.load or 0.0:.3f} of line rate ({self.nic})"
            )
        return f"{self.per_level:g} per level, the prior ({self.reason})"

    def as_json(self) -> dict[str, object]:
        """The figures a report's ``current``/``proposed`` carries."""
        return {
            "estimate": self.source,
            "per_level": round(self.per_level, 4),
            "nic_load": None if self.load is None else round(self.load, 4),
            "nic": self.nic or None,
            "reason": self.reason or None,
        }


def gang_share(
    model: ClusterModel,
    gpus: Mapping[str, tuple[int, ...]],
    extra_now: float,
    prior: float,
) -> GangShare:
    """The per-level slowdown of a job holding ``gpus`` (node -> GPU indices) whose traffic
    crosses ``extra_now`` weighted levels above its tightest cell (see the module docstring);
    ``prior`` when its NICs say nothing.
    """
    held_by_others = _others(model, gpus)
    loads: list[tuple[float, str]] = []
    shared = False
    for node, own in sorted(gpus.items()):
        nics = model.nics.node(node)
        if nics is None:
            continue
        mine = {nic for g in own for nic in nics.nearest(g)[1]}
        theirs = {nic for g in held_by_others.get(node, ()) for nic in nics.nearest(g)[1]}
        shared = shared or bool(mine & theirs)
        for nic in sorted(mine - theirs):
            rate = nics.port_rate.get(nic, 0.0)
            if nic in nics.bytes_per_second and rate > 0:
                loads.append((nics.bytes_per_second[nic] / rate, f"{node}/{nic}"))
    if not loads:
        reason = (
            "its NICs also serve other workloads' GPUs"
            if shared
            else "no traffic or line rate of its NICs"
        )
        return GangShare(prior, "prior", reason=reason)
    load, nic = max(loads)
    if load <= 0.0:
        return GangShare(
            prior, "prior", load, nic, "no traffic on its NICs: it sends through others or idles"
        )
    if load > 1.0:
        return GangShare(
            prior, "prior", load, nic, "NIC traffic above line rate: not a rate over the window"
        )
    if load * max(extra_now, 0.0) >= SATURATED:
        return GangShare(MAX_PER_LEVEL, "measured", load, nic)
    share = load / (1.0 - load * max(extra_now, 0.0))
    return GangShare(min(share, MAX_PER_LEVEL), "measured", load, nic)


def _others(model: ClusterModel, gpus: Mapping[str, tuple[int, ...]]) -> dict[str, set[int]]:
    """Per node of the job, the GPUs that workloads other than the job hold."""
    out: dict[str, set[int]] = {}
    for w in model.workloads:
        own = gpus.get(w.node)
        if own is None:
            continue
        other = set(w.gpus) - set(own)
        if other:
            out.setdefault(w.node, set()).update(other)
    return out


__all__ = ["MAX_PER_LEVEL", "GangShare", "gang_share"]
