"""What the network costs a multi-node gang job: the simulator's truth for the fabric.

A *gang* is a multi-node job whose parts (one simulated job per node, all ranks of a node)
start together, hold all their GPUs and finish together (:mod:`toposcope.sim.gang_engine`).
Its step is the slowest part's step (compute and intra-node communication, as the node
model prices them, :func:`toposcope.sim.model.evaluate`) stretched by the inter-node
collectives of its communication pattern:

* ``comm_share`` is the share of a step those collectives take when every rank sits under
  one leaf switch and uses the NIC on its own PCIe switch (the truth's ``data_parallel``,
  ``tensor_parallel`` or ``pipeline``, or the scenario's own figure). A ring all-reduce moves
  ``2 (n - 1) / n`` of the gradients through every rank's NIC and an all-gather ``(n - 1) /
  n``; since the rank count of a job does not change with its placement, that volume is part
  of the share and what changes is the bandwidth it moves at.
* The bandwidth, relative to the NIC's line rate, is the smallest of the shares its ranks
  get (:meth:`FabricPrices.bandwidth_share`): every switch below the lowest switch common to
  all its nodes sends the gang's traffic up its uplinks, at the line rate divided by that
  switch's oversubscription and by every one below it on the way (the fabric file's
  downlink over uplink, else the truth's ``oversubscription``: a busy leaf's steady-state
  share), and divided again by the number of gangs crossing the same uplink; a node outside
  the fabric crosses every level. A rank whose nearest cabled NIC is not on its PCIe switch
  pays the GPUDirect RDMA path through the host bridge (``nic_host_bridge``) or through host
  memory across sockets (``nic_cross_socket``); the gang moves at its slowest rank's rate.
* The gang's slowdown is ``slowest part's slowdown x (1 + comm_share x (1 / share - 1))``,
  1 for a gang of best-placed parts on one leaf with NIC-near ranks, so each part's ideal
  is still its best throughput alone on one node.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from toposcope.fabric.model import Fabric
from toposcope.rm import Allocation
from toposcope.sim.jobs import JobSpec
from toposcope.sim.model import Performance
from toposcope.sim.nodetemplate import NodeTemplate
from toposcope.sim.truth_params import truth

#: communication patterns -> the truth's parameter of their share of a step
PATTERNS = {
    "data-parallel": "data_parallel",
    "tensor-parallel": "tensor_parallel",
    "pipeline": "pipeline",
}


@dataclass(frozen=True)
class Gang:
    """A multi-node gang job: its name, its parts (workload names, one per node), its
    communication pattern (:data:`PATTERNS`) and, when the scenario pins it, its share of a
    step in inter-node collectives (else the truth's figure for the pattern).
    """

    name: str
    parts: tuple[str, ...]
    pattern: str
    comm_share: float | None = None

    def share(self) -> float:
        """The share of a step in inter-node collectives at full line rate."""
        if self.comm_share is not None:
            return self.comm_share
        return truth().fabric_figure(PATTERNS[self.pattern])


def cabled_nics(fabric: Fabric) -> dict[str, frozenset[str]]:
    """The NICs ``fabric`` cables to a switch, by node, for the nodes it lists ports for (a
    node it lists without ports, or not at all, has every NIC cabled).
    """
    return {n.name: frozenset(p.nic for p in n.ports) for n in fabric.nodes if n.ports}


class FabricPrices:
    """A fabric as the gang model reads it: each node's switches from its leaf up, which
    NICs are cabled, and each switch's oversubscription where the file gives it.
    """

    def __init__(self, fabric: Fabric) -> None:
        parent: dict[str, str] = {}
        leaf: dict[str, str] = {}
        for switch in fabric.switches:
            for child in switch.switches:
                parent[child] = switch.name
            for node in switch.nodes:
                leaf[node] = switch.name
        self._paths: dict[str, tuple[str, ...]] = {}
        for node, first in leaf.items():
            path = [first]
            while path[-1] in parent and len(path) <= len(parent):
                path.append(parent[path[-1]])
            self._paths[node] = tuple(path)
        self._oversub = {s.name: s.oversubscription for s in fabric.switches}
        self._cabled = cabled_nics(fabric)

    def path(self, node: str) -> tuple[str, ...]:
        """The switches above ``node``, its leaf first (empty: outside the fabric)."""
        return self._paths.get(node, ())

    def crossed(self, nodes: Iterable[str]) -> frozenset[str]:
        """The switches whose uplinks carry traffic between ``nodes``: on each node's path,
        those below the lowest switch common to all (every switch when none is common).
        """
        paths = [self.path(n) for n in sorted(set(nodes))]
        if len(paths) < 2:
            return frozenset()
        common = set(paths[0]).intersection(*paths[1:])
        crossed: set[str] = set()
        for path in paths:
            for switch in path:
                if switch in common:
                    break
                crossed.add(switch)
        return frozenset(crossed)

    def spans_fabric(self, nodes: Iterable[str]) -> bool:
        """Whether ``nodes`` share no switch (or one is outside the fabric)."""
        paths = [self.path(n) for n in sorted(set(nodes))]
        if len(paths) < 2:
            return False
        return not paths[0] or not set(paths[0]).intersection(*paths[1:])

    def oversubscription(self, switch: str) -> float:
        """The switch's downlink over uplink bandwidth: the file's, else the truth's."""
        known = self._oversub.get(switch)
        return known if known is not None else truth().fabric_figure("oversubscription")

    def level_share(self, nodes: Iterable[str], crossing: Mapping[str, int]) -> float:
        """The share of line rate a gang on ``nodes`` gets through the uplinks it crosses,
        ``crossing`` counting the gangs that cross each switch's uplink.
        """
        chosen = sorted(set(nodes))
        crossed = self.crossed(chosen)
        share = 1.0
        for node in chosen:
            chain = 1.0
            for switch in self.path(node):
                if switch not in crossed:
                    break
                chain /= self.oversubscription(switch)
                share = min(share, chain / max(crossing.get(switch, 1), 1))
        if self.spans_fabric(chosen):  # no common switch: two levels of the core above
            core = truth().fabric_figure("oversubscription")
            share = min(share, 1.0 / (core * core))
        return share

    def cabled(self, node: str, template: NodeTemplate) -> list[str]:
        """The NICs of ``node`` that reach the fabric (every NIC when the file lists no
        ports for it).
        """
        names = [nic.name for nic in template.nics]
        known = self._cabled.get(node)
        return names if known is None else [n for n in names if n in known]

    def nic_share(self, node: str, template: NodeTemplate, gpus: Sequence[int]) -> float:
        """The share of line rate the slowest of ``gpus`` gets through its nearest cabled
        NIC (1 on the NIC's PCIe switch, the truth's host-bridge share on its socket, its
        cross-socket share beyond; the cross-socket share without any cabled NIC).
        """
        t = truth()
        far = t.fabric_figure("nic_cross_socket")
        near = t.fabric_figure("nic_host_bridge")
        wanted = set(self.cabled(node, template))
        nics = [nic for nic in template.nics if nic.name in wanted]
        worst = 1.0
        for index in gpus:
            gpu = template.gpu(index)
            best = far
            for nic in nics:
                if gpu.switch is not None and nic.switch == gpu.switch:
                    best = 1.0
                    break
                if (
                    gpu.numa_node is not None
                    and nic.numa_node is not None
                    and template.package_of_node(gpu.numa_node)
                    == template.package_of_node(nic.numa_node)
                ):
                    best = max(best, near)
            worst = min(worst, best)
        return worst


def fabric_factor(share: float, bandwidth: float) -> float:
    """``1 + share x (1 / bandwidth - 1)``: a step whose ``share`` of inter-node
    collectives moves at ``bandwidth`` of line rate.
    """
    return 1.0 + share * (1.0 / max(bandwidth, 1e-9) - 1.0)


def stalled(perf: Performance) -> Performance:
    """``perf`` of a part whose gang cannot step (a part pending, paused or gone)."""
    return replace(perf, throughput=0.0, slowdown=math.inf, gpu_busy=0.0, gpu_compute=0.0)


def crossing_counts(node_sets: Iterable[Iterable[str]], prices: FabricPrices) -> dict[str, int]:
    """How many of the gangs on ``node_sets`` cross each switch's uplink."""
    crossing: dict[str, int] = {}
    for nodes in node_sets:
        for switch in prices.crossed(nodes):
            crossing[switch] = crossing.get(switch, 0) + 1
    return crossing


def gang_slowdown(
    gang: Gang,
    allocations: Mapping[str, Allocation],
    slowdowns: Mapping[str, float],
    crossing: Mapping[str, int],
    prices: FabricPrices,
    templates: Mapping[str, NodeTemplate],
) -> tuple[float, float]:
    """(the gang's slowdown, its fabric factor) with every part placed: the slowest part's
    node-level ``slowdowns`` stretched by the network (see the module docstring).
    """
    bandwidth = prices.level_share([allocations[p].node for p in gang.parts], crossing)
    for part in gang.parts:
        alloc = allocations[part]
        bandwidth = min(bandwidth, prices.nic_share(alloc.node, templates[alloc.node], alloc.gpus))
    fabric = fabric_factor(gang.share(), bandwidth)
    return max(slowdowns[p] for p in gang.parts) * fabric, fabric


def part_performance(
    spec: JobSpec, perf: Performance, slowdown: float, fabric: float
) -> Performance:
    """A part's performance at its gang's ``slowdown`` (its node-level ``perf`` given): the
    time it waits for the slowest part and the network counts as busy GPUs (collective
    kernels spinning on their peers).
    """
    if math.isinf(slowdown):
        return stalled(perf)
    waits = 1.0 - perf.slowdown / slowdown
    return replace(
        perf,
        throughput=spec.base_throughput / slowdown,
        slowdown=slowdown,
        factors={**perf.factors, "gang": slowdown / fabric / perf.slowdown, "fabric": fabric},
        gpu_busy=min(perf.gpu_busy * perf.slowdown / slowdown + waits, 1.0),
        gpu_compute=spec.gpu_demand / slowdown if spec.gpus else 0.0,
    )


def gang_performances(
    gangs: Iterable[Gang],
    allocations: Mapping[str, Allocation | None],
    node_perf: Mapping[str, tuple[JobSpec, Performance]],
    paused: Iterable[str],
    prices: FabricPrices,
    templates: Mapping[str, NodeTemplate],
) -> dict[str, Performance]:
    """Each placed part's performance as part of its gang (see the module docstring).

    ``allocations`` and ``node_perf`` (spec and node-level performance) name the running
    parts; a gang with a part missing from them, or in ``paused``, is stalled.
    """
    waiting = set(paused)
    placed: dict[str, Allocation] = {
        p: a for p, a in allocations.items() if a is not None and p in node_perf
    }
    complete: list[Gang] = []
    result: dict[str, Performance] = {}
    for gang in gangs:
        if all(p in placed for p in gang.parts) and not waiting & set(gang.parts):
            complete.append(gang)
        else:
            result.update({p: stalled(node_perf[p][1]) for p in gang.parts if p in placed})
    crossing = crossing_counts(([placed[p].node for p in gang.parts] for gang in complete), prices)
    for gang in complete:
        slowdowns = {p: node_perf[p][1].slowdown for p in gang.parts}
        slowdown, fabric = gang_slowdown(gang, placed, slowdowns, crossing, prices, templates)
        for part in gang.parts:
            spec, perf = node_perf[part]
            result[part] = part_performance(spec, perf, slowdown, fabric)
    return result
