"""The advisor's view of RDMA NICs: which NIC is nearest to each GPU, which NICs each
workload uses, how busy each NIC port was, and who owns each workload.

Built from the node exporter's fabric series (``toposcope_gpu_nic_link_info``,
``toposcope_workload_nic_used_info``), its NIC port series (``toposcope_nic_port_info``,
``toposcope_nic_port_bytes_total``, ``toposcope_nic_port_rate_bytes_per_second``; the NIC is
their ``device`` label), the owner and Slurm job labels of ``toposcope_workload_info`` and,
from the cluster-level fabric exporter, ``toposcope_job_fabric_rail_aligned`` (joined on
``workload``) and the NIC ports the fabric model cables to a switch
(``toposcope_fabric_node_info``). Nodes are named as the model builder names them. Nothing
here is validated for use in a command: :mod:`toposcope.advisor.nic_advice` checks every name
it writes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from toposcope.advisor.loaders.base import LoadedData
from toposcope.catalogue.fabric_metrics import LINK_TIERS

#: what names a series' node (the model builder's NodeNamer)
Namer = Callable[[Mapping[str, str]], str]
_RANK = {tier: rank for rank, tier in enumerate(LINK_TIERS)}


def tier_rank(link: str) -> int:
    """The rank of a PCIe tier, 0 for ``PIX``; an unknown word ranks after ``SYS``."""
    return _RANK.get(link, len(LINK_TIERS))


@dataclass(frozen=True)
class NicUse:
    """One NIC a workload uses, as one source saw it (``near`` False: a nearer NIC exists)."""

    nic: str
    source: str
    link: str
    near: bool


@dataclass(frozen=True)
class WorkloadIdentity:
    """Who a workload is beyond its name: its Kubernetes owner and its Slurm job."""

    owner_kind: str = ""
    owner_name: str = ""
    slurm_job_id: str = ""


@dataclass(frozen=True)
class NodeNics:
    """One node's RDMA NICs: every GPU's tier to each, active ports and traffic per NIC."""

    links: Mapping[tuple[int, str], str] = field(default_factory=dict)
    ports: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    bytes_per_second: Mapping[str, float] = field(default_factory=dict)
    port_rate: Mapping[str, float] = field(default_factory=dict)
    port_known: frozenset[str] = frozenset()
    cabled: frozenset[str] | None = None

    def usable(self, nic: str) -> bool:
        """Whether ``nic`` can carry traffic: an active port (or its ports' states unknown),
        and cabled to a switch where the fabric model lists the node's ports (a NIC whose
        every port is down, or that no switch reaches, is never advised).
        """
        active = nic not in self.port_known or bool(self.ports.get(nic))
        return active and (self.cabled is None or nic in self.cabled)

    @property
    def nics(self) -> tuple[str, ...]:
        """The node's RDMA NICs that some GPU reaches, sorted."""
        return tuple(sorted({nic for _, nic in self.links}))

    def nearest(self, gpu: int) -> tuple[str, tuple[str, ...]]:
        """``(tier, NICs)``: the nearest tier from ``gpu`` to a usable NIC and the usable NICs
        at it (``("", ())`` when the GPU's links are unknown).
        """
        tiers = {
            nic: link for (g, nic), link in self.links.items() if g == gpu and self.usable(nic)
        }
        if not tiers:
            return "", ()
        best = min(tiers.values(), key=tier_rank)
        return best, tuple(sorted(n for n, link in tiers.items() if link == best))

    def link(self, gpu: int, nic: str) -> str:
        """The tier from ``gpu`` to ``nic`` (``""`` when unknown)."""
        return self.links.get((gpu, nic), "")


@dataclass(frozen=True)
class NicState:
    """Every node's NICs, the NICs each ``node/workload`` uses, identities, rail alignment."""

    nodes: Mapping[str, NodeNics] = field(default_factory=dict)
    used: Mapping[str, tuple[NicUse, ...]] = field(default_factory=dict)
    identity: Mapping[str, WorkloadIdentity] = field(default_factory=dict)
    rail_aligned: Mapping[str, bool] = field(default_factory=dict)

    def node(self, name: str) -> NodeNics | None:
        """The NICs of node ``name`` (``None`` when its exporter published no GPU-NIC link)."""
        return self.nodes.get(name)

    def uses(self, key: str) -> tuple[NicUse, ...]:
        """The NIC uses of workload ``node/name``."""
        return self.used.get(key, ())

    def who(self, key: str) -> WorkloadIdentity:
        """The owner and job of workload ``node/name`` (empty when unknown)."""
        return self.identity.get(key, WorkloadIdentity())


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _links(data: LoadedData, namer: Namer) -> dict[str, dict[tuple[int, str], str]]:
    links: dict[str, dict[tuple[int, str], str]] = defaultdict(dict)
    for s in data.samples("gpu-nic-links"):
        gpu, nic, link = _int(s.labels.get("gpu")), s.labels.get("nic", ""), s.labels.get("link")
        if gpu is not None and nic and link:
            links[namer(s.labels)][(gpu, nic)] = link
    return links


def _ports(data: LoadedData, namer: Namer) -> dict[str, dict[str, tuple[str, ...]]]:
    """Active ports per node and NIC; a NIC with ports but none active maps to ``()``."""
    ports: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for s in data.samples("nic-ports"):
        device, port = s.labels.get("device", ""), s.labels.get("port", "")
        if not device or not port:
            continue
        active = ports[namer(s.labels)][device]
        if s.labels.get("state", "").upper() == "ACTIVE":
            active.add(port)
    return {
        node: {nic: tuple(sorted(p, key=lambda x: (len(x), x))) for nic, p in nics.items()}
        for node, nics in ports.items()
    }


def _traffic(data: LoadedData, namer: Namer) -> dict[str, dict[str, float]]:
    """Bytes/s per node and NIC: the busier direction of each port, summed over ports."""
    per_port: dict[tuple[str, str, str], float] = {}
    for s in data.samples("nic-port-traffic"):
        device, port = s.labels.get("device", ""), s.labels.get("port", "")
        if device:
            key = (namer(s.labels), device, port)
            per_port[key] = max(per_port.get(key, 0.0), s.value)
    traffic: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (node, device, _), value in per_port.items():
        traffic[node][device] += value
    return traffic


def _speeds(data: LoadedData, namer: Namer) -> dict[str, dict[str, float]]:
    speeds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for s in data.samples("nic-port-speed"):
        if device := s.labels.get("device", ""):
            speeds[namer(s.labels)][device] += s.value
    return speeds


def _cabled(data: LoadedData, namer: Namer) -> dict[str, frozenset[str]]:
    """Per node, the NICs the fabric model cables to a leaf (nodes listed without ports,
    ``nic=""``, are left out: their cabling is unknown).
    """
    cabled: dict[str, set[str]] = defaultdict(set)
    unknown: set[str] = set()
    for s in data.samples("fabric-node-ports"):
        node, nic = namer(s.labels), s.labels.get("nic", "")
        if nic:
            cabled[node].add(nic)
        else:
            unknown.add(node)
    return {node: frozenset(nics) for node, nics in cabled.items() if node not in unknown}


def read_nic_state(data: LoadedData, namer: Namer) -> NicState:
    """Every node's NIC locality and traffic, and every workload's NIC uses and identity."""
    links, ports = _links(data, namer), _ports(data, namer)
    traffic, speeds = _traffic(data, namer), _speeds(data, namer)
    cabled = _cabled(data, namer)
    nodes = {
        node: NodeNics(
            dict(node_links),
            {nic: active for nic, active in ports.get(node, {}).items() if active},
            dict(traffic.get(node, {})),
            dict(speeds.get(node, {})),
            frozenset(ports.get(node, {})),
            cabled.get(node),
        )
        for node, node_links in links.items()
    }
    used: dict[str, set[NicUse]] = defaultdict(set)
    for s in data.samples("workload-nic-used"):
        labels = s.labels
        workload, nic = labels.get("workload", ""), labels.get("nic", "")
        if workload and nic:
            near = labels.get("near", "true") != "false"
            use = NicUse(nic, labels.get("source", ""), labels.get("link", ""), near)
            used[f"{namer(labels)}/{workload}"].add(use)
    identity: dict[str, WorkloadIdentity] = {}
    for s in data.samples("workload-info"):
        labels = s.labels
        if workload := labels.get("workload", ""):
            identity[f"{namer(labels)}/{workload}"] = WorkloadIdentity(
                labels.get("owner_kind", ""),
                labels.get("owner_name", ""),
                labels.get("slurm_job_id", ""),
            )
    rail = {
        s.labels["workload"]: s.value >= 1.0
        for s in data.samples("job-rail-aligned")
        if s.labels.get("workload")
    }
    return NicState(
        nodes,
        {key: tuple(sorted(uses, key=lambda u: (u.nic, u.source))) for key, uses in used.items()},
        identity,
        rail,
    )


__all__ = [
    "NicState",
    "NicUse",
    "NodeNics",
    "WorkloadIdentity",
    "read_nic_state",
    "tier_rank",
]
