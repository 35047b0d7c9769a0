"""nic-affinity: a rank whose GPUs' network traffic goes through a far RDMA NIC, or that
leaves NCCL's NIC choice open while a near NIC exists, gets the environment that keeps it on
its near NICs.

Rule. For each workload holding GPUs on a node whose exporter publishes the GPU-to-NIC tiers
(``toposcope_gpu_nic_link_info``), the nearest usable NICs of its GPUs are the wanted set
(usable: an ``ACTIVE`` port in ``toposcope_nic_port_info``, or no port state published, and
cabled where the fabric model lists the node's ports: ``toposcope_fabric_node_info``, else
``fabric_file``; an uncabled NIC is never advised). It is advised when

* one of its ranks uses a NIC other than its GPU's nearest
  (``toposcope_workload_nic_used_info{near="false"}``: ``NCCL_IB_HCA`` naming only the other
  socket's HCA, a container given the far NIC by its device plugin) at a tier past the
  nearest usable one, or
* it uses RDMA (any ``toposcope_workload_nic_used_info``) without ``NCCL_IB_HCA`` while one
  of its GPUs has a NIC under its PCIe switch or host bridge: NCCL then picks by the PCI tree
  it detects, which in a VM or a container that hides the switches can be the wrong one.

A workload whose GPUs have no NIC nearer than ``NODE`` gets a note: no NCCL setting helps,
only GPUs with a near NIC do (gpu-placement). The recommendation (kind ``config``, never
applied) proposes the rank's environment (:func:`~toposcope.advisor.nic_advice.nccl_env`)
and its Slurm and Kubernetes forms, with the RDMA device plugin's resource per NIC where
``rdma_resources`` maps them (:mod:`toposcope.advisor.nic_advice`).

Gain model. A rank's inter-node transfers through a NIC at tier ``t`` get a share ``f(t)`` of
what a NIC under its PCIe switch gives: 1 at ``PIX``/``PXB`` (GPUDirect RDMA), an assumed
``host_bridge_share`` at ``PHB``/``NODE`` and ``cross_socket_share`` at ``SYS`` (NVIDIA's
GPUDirect RDMA guide: a path through the CPU's root complex works with worse performance, one
across the socket link may be severely limited; NCCL uses GPUDirect RDMA by default only up
to a PCIe switch and stages through host memory beyond). With ``r = f(used) / f(nearest)``
the time a rank spends transferring shrinks by ``1 - r``; that time is the measured share
``min(1, B / (r x R))`` when the far NIC's ports report traffic ``B`` bytes/s at line rate
``R`` (``toposcope_nic_port_bytes_total``, ``toposcope_nic_port_rate_bytes_per_second``; the
port carries every workload's traffic, so it is an upper bound), else the assumed
``network_share``. A collective runs at the pace of its slowest rank, so the gain is not
scaled down by the share of the job's GPUs affected. A rank without ``NCCL_IB_HCA`` that
already uses its near NIC gains ``unpinned_share x network_share x (1 - host_bridge_share)``:
the assumed chance that NCCL's own choice lands on a far NIC, times the far NIC's cost.

Moves. A multi-node job whose ranks sit on GPUs with no NIC nearer than the host bridge or
the socket link gets a move onto the NIC-near GPUs of its own nodes, whole, once they are
free, and the single-node jobs without RDMA that hold them are moved out of the way a round
before (``move_far_ranks``; :mod:`.nic_moves`, priced with the shares above).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.nic_advice import (
    AdviceError,
    dropped_resources,
    hca_value,
    nccl_env,
    parse_resource_map,
    resources_for,
    slurm_forms,
    template_patch,
)
from toposcope.advisor.nic_state import NicState, NicUse, NodeNics, tier_rank
from toposcope.advisor.policies.base import Evaluation, Policy, PolicySettings, setting
from toposcope.advisor.policies.nic_move_recs import NicMoveRule
from toposcope.advisor.policies.nic_moves import nic_moves
from toposcope.advisor.recommendations import CHECKPOINT_RESTORE_S, make_recommendation
from toposcope.catalogue import spec
from toposcope.catalogue.fabric_metrics import FAR_TIERS
from toposcope.errors import ToposcopeError
from toposcope.report.recommendation import (
    Evidence,
    Note,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
)

#: the fabric sources that name each node's NIC ports
CABLING_FORMATS = ("file", "ibnetdiscover")
LINK_METRIC = "toposcope_gpu_nic_link_info"
USED_METRIC = "toposcope_workload_nic_used_info"
PORT_METRIC = "toposcope_nic_port_bytes_total"
_SLURM_WORKLOAD = re.compile(r"slurm-job-([0-9]{1,12})")


@dataclass(frozen=True)
class NicAffinitySettings(PolicySettings):
    """Settings of the nic-affinity policy."""

    host_bridge_share: float = setting(
        0.5,
        gt=0,
        le=1,
        help="assumed share of a switch-near NIC's bandwidth a rank gets through the host "
        "bridge (PHB, NODE)",
    )
    cross_socket_share: float = setting(
        0.3,
        gt=0,
        le=1,
        help="assumed share of a switch-near NIC's bandwidth a rank gets across the socket "
        "link (SYS)",
    )
    network_share: float = setting(
        0.25,
        gt=0,
        le=1,
        help="assumed share of a rank's time spent in inter-node transfers when its NIC "
        "ports report no traffic",
    )
    unpinned_share: float = setting(
        0.1,
        ge=0,
        le=1,
        help="assumed chance that NCCL, left to pick, uses a far NIC (a PCI tree hidden by a "
        "VM or container)",
    )
    min_gain: float = setting(0.005, ge=0, lt=1, help="advise only above this estimated gain")
    fabric_file: str = setting(
        "",
        help="a fabric whose node ports say which NICs are cabled, where the metrics hold no "
        "toposcope_fabric_node_info (empty: the metrics' only)",
    )
    fabric_format: str = setting(
        "file",
        choices=CABLING_FORMATS,
        help="what fabric_file is: a fabric YAML/JSON file (docs/fabric.md) or ibnetdiscover "
        "output (topology.conf names no ports)",
    )
    rdma_resources: tuple[str, ...] = setting(
        (),
        help="NIC=RESOURCE pairs: the RDMA device plugin's resource that gives each NIC "
        "(mlx5_0=rdma/hca_shared_devices_a)",
    )
    move_far_ranks: bool = setting(
        True,
        help="move a multi-node job's NIC-far parts onto NIC-near GPUs of their own nodes "
        "(single-node jobs without RDMA moved out of the way first) when it pays",
    )
    restart_seconds: float = setting(
        CHECKPOINT_RESTORE_S,
        ge=0,
        le=86400,
        help="what one checkpoint and restart costs a moved job (every rank of a multi-node one)",
    )
    unknown_time_left_s: float = setting(
        0.0,
        ge=0,
        le=90 * 86400,
        help="time left assumed for a multi-node job without a time limit when pricing its "
        "move (0: such a job gets a note, not a move)",
    )
    min_time_left_s: float = setting(
        3600.0,
        ge=0,
        le=90 * 86400,
        help="a job with less time left is never moved, nor moved out of the way",
    )

    def problems(self) -> list[str]:
        """The bounds' problems and any ``rdma_resources`` pair that is not NIC=RESOURCE."""
        found = super().problems()
        try:
            parse_resource_map(self.rdma_resources)
        except AdviceError as exc:
            found.append(f"rdma_resources: {exc}")
        return found


class NicAffinity(Policy[NicAffinitySettings]):
    """Recommend the NCCL environment that keeps each rank on its GPUs' near RDMA NICs."""

    name = "nic-affinity"
    description = (
        "ranks whose GPUs' traffic goes through a far RDMA NIC, or that leave the choice to "
        "NCCL while a near NIC exists: NCCL_IB_HCA (and its Slurm and Kubernetes forms)"
    )
    settings_type = NicAffinitySettings
    requires = (spec(LINK_METRIC),)

    def share(self, tier: str) -> float:
        """The bandwidth share a rank gets through a NIC at ``tier``."""
        if tier_rank(tier) <= tier_rank("PXB"):
            return 1.0
        if tier == "SYS" or tier_rank(tier) > tier_rank("SYS"):
            return self.settings.cross_socket_share
        return self.settings.host_bridge_share

    def evaluate(self, model: ClusterModel) -> Evaluation:
        """One recommendation per workload to steer, notes for those no setting helps."""
        recs: list[Recommendation] = []
        notes: list[Note] = []
        try:
            state = with_cabling(model.nics, self._cabling())
        except ToposcopeError as exc:
            return Evaluation(undecided=(self.note("*", str(exc)),))
        for workload in model.workloads:
            nics = state.node(workload.node)
            if nics is None or not workload.gpus:
                continue
            try:
                found = self._workload(workload, nics, state)
            except AdviceError as exc:
                notes.append(self.note(workload.key, f"cannot advise: {exc}"))
                continue
            if isinstance(found, Recommendation):
                recs.append(found)
            elif found:
                notes.append(self.note(workload.key, found))
        if self.settings.move_far_ranks:
            moves, unmoved = nic_moves(self.name, model, state, self._rule())
            recs += moves
            notes += unmoved
        return Evaluation(tuple(recs), tuple(notes))

    def _rule(self) -> NicMoveRule:
        """How :mod:`.nic_moves` prices a move of NIC-far ranks, from these settings."""
        s = self.settings
        return NicMoveRule(
            self.share, s.network_share, s.restart_seconds, s.unknown_time_left_s,
            s.min_time_left_s,
        )  # fmt: skip

    def _cabling(self) -> dict[str, frozenset[str]]:
        """Per node, the NICs ``fabric_file`` cables (empty without a file)."""
        path = self.settings.fabric_file
        if not path:
            return {}
        if self.settings.fabric_format == "ibnetdiscover":
            from toposcope.fabric.ibnetdiscover import read_ibnetdiscover  # noqa: PLC0415

            fabric = read_ibnetdiscover(path)
        else:
            from toposcope.fabric.yamlfile import read_fabric_file  # noqa: PLC0415

            fabric = read_fabric_file(path)
        return {n.name: frozenset(p.nic for p in n.ports) for n in fabric.nodes if n.ports}

    def _workload(self, w: WorkloadModel, nics: NodeNics, state: NicState) -> Recommendation | str:
        nearest = {g: nics.nearest(g) for g in w.gpus if nics.nearest(g)[1]}
        uses = state.uses(w.key)
        if not nearest or not uses:
            return ""
        near_tier = max((tier for tier, _ in nearest.values()), key=tier_rank)
        if all(tier in FAR_TIERS for tier, _ in nearest.values()):
            return (
                f"its GPUs' nearest RDMA NIC is {near_tier} away: no NCCL setting brings a "
                "NIC nearer; GPUs with a NIC under their PCIe switch would (a multi-node "
                "job's move: move_far_ranks; a single-node one's: gpu-placement)"
            )
        # a NIC nearer than the one used may be down (uncabled): far only past the near tier
        far = [u for u in uses if not u.near and tier_rank(u.link) > tier_rank(near_tier)]
        pinned = any(u.source == "nccl_env" for u in uses)
        if not far and pinned:
            return ""
        s = self.settings
        wanted = sorted({nic for _, names in nearest.values() for nic in names})
        traffic = self._utilisation(far, nics)
        if far:
            ratio = min(self.share(u.link) for u in far) / self.share(near_tier)
            busy = min(1.0, traffic / ratio) if traffic is not None else s.network_share
            gain = busy * (1.0 - ratio)
            basis = (
                f"measured port load {traffic:.3f} of line rate" if traffic is not None else
                f"assumed network share {s.network_share:g}"
            )  # fmt: skip
            model_text = f"{basis}; far/near bandwidth share {ratio:.2f}; gain = busy x (1 - share)"
        else:
            gain = s.unpinned_share * s.network_share * (1.0 - s.host_bridge_share)
            model_text = (
                f"no NCCL_IB_HCA: assumed chance {s.unpinned_share:g} of a far pick x network "
                f"share {s.network_share:g} x (1 - host bridge share {s.host_bridge_share:g})"
            )
        if gain < s.min_gain:
            return f"estimated gain {gain:.4f} is below min_gain {s.min_gain:g}"
        return self._recommend(w, nics, state, wanted, near_tier, far, gain, model_text, traffic)

    def _utilisation(self, far: list[NicUse], nics: NodeNics) -> float | None:
        """The highest load (bytes/s over line rate) of the far NICs in use, when measured."""
        loads = [
            nics.bytes_per_second[u.nic] / nics.port_rate[u.nic]
            for u in far
            if u.nic in nics.bytes_per_second and nics.port_rate.get(u.nic, 0.0) > 0
        ]
        return max(loads) if loads else None

    def _recommend(
        self,
        w: WorkloadModel,
        nics: NodeNics,
        state: NicState,
        wanted: list[str],
        near_tier: str,
        far: list[NicUse],
        gain: float,
        model_text: str,
        traffic: float | None,
    ) -> Recommendation:
        who = state.who(w.key)
        rail = state.rail_aligned.get(w.name, False)
        env = nccl_env(
            hca_value([(nic, nics.ports.get(nic, ())) for nic in wanted]), near_tier, rail
        )
        proposed: dict[str, object] = {
            "workload": w.name,
            "node": w.node,
            "nics": wanted,
            "env": env,
        }
        job = who.slurm_job_id or (m.group(1) if (m := _SLURM_WORKLOAD.fullmatch(w.name)) else "")
        if job:
            proposed["slurm"] = slurm_forms(env, job, w.node)
        mapping = parse_resource_map(self.settings.rdma_resources)
        limits = resources_for(wanted, mapping)
        dropped = dropped_resources([u.nic for u in far], limits, mapping) if limits else ()
        if limits:
            proposed["rdma_resources"] = limits
            proposed["rdma_resources_dropped"] = list(dropped)
        if w.pod and w.namespace and w.container:
            proposed["kubernetes"] = {
                "namespace": w.namespace,
                "pod": w.pod,
                "container": w.container,
                "owner_kind": who.owner_kind,
                "owner_name": who.owner_name,
                "template_patch": template_patch(w.container, env, limits, dropped),
            }
        used = ", ".join(sorted({f"{u.nic} ({u.link}, by {u.source})" for u in far}))
        why = (
            f"its ranks use {used} while a nearer NIC exists"
            if far
            else "it uses RDMA without NCCL_IB_HCA, leaving the NIC to NCCL's detection"
        )
        return make_recommendation(
            kind=RecommendationKind.CONFIG,
            policy=self.name,
            target=Target(w.node, w.name, w.gpus),
            summary=(
                f"{w.key}: {why}; set NCCL_IB_HCA={env['NCCL_IB_HCA']} so that each GPU's "
                f"traffic leaves through its nearest NIC ({near_tier} at worst)"
            ),
            current={
                "uses": [
                    {"nic": u.nic, "source": u.source, "link": u.link, "near": u.near}
                    for u in state.uses(w.key)
                ],
                "gpus": {
                    str(g): {"nearest": list(nics.nearest(g)[1]), "link": nics.nearest(g)[0]}
                    for g in w.gpus
                },
            },
            proposed=proposed,
            evidence=self._evidence(w, nics, wanted, far, traffic),
            estimated_gain=gain,
            gain_model=model_text,
            confidence=0.3 if not far else 0.7 if traffic is not None else 0.5,
            risk=Risk.LOW,
            claims=[f"nic-env:{w.key}"],
        )

    def _evidence(
        self,
        w: WorkloadModel,
        nics: NodeNics,
        wanted: list[str],
        far: list[NicUse],
        traffic: float | None,
    ) -> list[Evidence]:
        evidence = []
        for gpu in w.gpus:
            for nic in sorted({*wanted, *(u.nic for u in far)}):
                if link := nics.link(gpu, nic):
                    labels = {"node": w.node, "gpu": str(gpu), "nic": nic, "link": link}
                    evidence.append(Evidence(LINK_METRIC, labels, 1.0))
        for u in far:
            labels = {"node": w.node, "workload": w.name, "nic": u.nic, "source": u.source,
                      "link": u.link, "near": "false"}  # fmt: skip
            evidence.append(Evidence(USED_METRIC, labels, 1.0))
            if traffic is not None and u.nic in nics.bytes_per_second:
                port = {"node": w.node, "device": u.nic}
                evidence.append(Evidence(PORT_METRIC, port, nics.bytes_per_second[u.nic]))
        return evidence


def with_cabling(state: NicState, cabled: dict[str, frozenset[str]]) -> NicState:
    """``state`` with each node's cabled NICs from a fabric file where the metrics said none."""
    if not cabled:
        return state
    nodes = {
        name: nics if nics.cabled is not None or name not in cabled else
        replace(nics, cabled=cabled[name])
        for name, nics in state.nodes.items()
    }  # fmt: skip
    return replace(state, nodes=nodes)


__all__ = ["CABLING_FORMATS", "NicAffinity", "NicAffinitySettings", "with_cabling"]
