"""numa-pinning: pin a workload's threads and memory to one NUMA node.

Rule. A workload whose CPU time and memory are spread over NUMA nodes, or that runs away
from the NUMA node its GPUs hang off, is pinned (cpuset.cpus and cpuset.mems, with its pages
migrated) to its target node: the NUMA node of most of its GPUs, or, without GPUs, the node
holding most of its CPU time and memory. It is recommended when the remote share is at least
``min_remote_share`` and the target has room: the cores the workload moves must fit under
``max_cpu_load`` of the target's online CPUs with what already runs there (and what earlier
pins of this run moved there), and the memory it moves (times ``memory_headroom``) must fit in
the target's lowest free memory over the window. A target without room is skipped for the next
best one (never for GPU workloads, whose target is fixed by the GPU); with no room anywhere the
policy says so. Unknown capacity (no free-memory series, CPU use without a rate) lowers the
confidence instead of blocking.

Gain model. With ``c`` the workload's CPU share and ``m`` its memory share on the target
node, the *remote share* is ``1 - c * m``: the part of (thread, page) pairs that are not both
on the target. The gain is ``remote share x numa_penalty x (d - 10) / (reference_distance -
10)``, ``d`` the SLIT distance from where the remote part sits. ``numa_penalty`` defaults to
0.5776: CRI-RM pinning a TensorFlow CNN training job's threads and memory on a 2-socket Xeon
Gold 6132 (SLIT 21) made it up to 57.76 % faster, read here as "fully remote at distance 21
costs 57.76 %" (the best-vs-worst figure of the design docs). That is a CPU-training
figure: a workload holding GPUs spends most of its step on the GPU, so its penalty is scaled
by ``gpu_job_share`` (0.4, from the outcomes verified in the closed loop, where such pins
gained 12-33 % against 43 % estimated with the CPU figure).

Measured sensitivity. Where the workload's memory traffic is published (resctrl MBM,
:mod:`~toposcope.advisor.numa_share`), the constant gives way to its own figures: its
*memory-bound share* ``b`` (bytes per second against what its busy cores stream at
``core_stream_gbps`` each) and ``remote_cost`` (what a remote byte costs on top of a local
one at the farthest distance, scaled by distance as above). Pinning then saves ``saved =
remote share x b x remote_cost`` of its step, and the gain is ``saved / (1 - saved)``. The
recommendation's ``current.numa_sensitivity`` says which basis priced it (``estimate``:
``measured`` with its terms, or ``prior`` with the reason), and calibration learns the two
apart. Where the operator measured the node's memory bandwidths (``--memory-bandwidth``) the
measured basis prices the pin pair by pair instead (:mod:`.pin_pricing`). The settings are
in :mod:`.pinning_settings`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from toposcope.advisor.idleness import IdleRule
from toposcope.advisor.locality import (
    GIB,
    distance_penalty,
    gpu_numa_nodes,
    remote_share,
    rounded,
    workload_evidence,
)
from toposcope.advisor.model import ClusterModel, NodeModel, WorkloadModel
from toposcope.advisor.numa_share import (
    MeasuredMemoryShare,
    measured_memory_share,
    prior_basis,
)
from toposcope.advisor.policies.base import Evaluation, Policy
from toposcope.advisor.policies.pin_capacity import (
    PinCandidate,
    PinPlan,
    assign_targets,
    crowding,
    rank_cpu_targets,
)
from toposcope.advisor.policies.pin_pricing import measured_candidate
from toposcope.advisor.policies.pin_room import (
    joined,
    moved_bytes_of,
    moved_summary,
    pin_actions,
    room_makers,
)
from toposcope.advisor.policies.pinning_settings import NumaPinningSettings
from toposcope.advisor.recommendations import make_recommendation
from toposcope.catalogue import spec
from toposcope.cpulist import format_cpulist
from toposcope.report.recommendation import (
    Evidence,
    Note,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
)

__all__ = ["NumaPinning", "NumaPinningSettings"]


class NumaPinning(Policy[NumaPinningSettings]):
    """Pin spread-out or GPU-remote workloads' CPUs and memory to their target NUMA node."""

    name = "numa-pinning"
    description = "pin workloads spread over NUMA nodes, or far from their GPUs, to one node"
    settings_type = NumaPinningSettings
    requires = (
        spec("toposcope_numa_node_info"),
        spec("toposcope_workload_cpu_seconds_total"),
        spec("toposcope_workload_memory_bytes"),
    )

    def evaluate(self, model: ClusterModel) -> Evaluation:
        """Pins planned node by node, jointly against the node's capacity."""
        if not model.has("toposcope_numa_node_info"):
            return Evaluation(undecided=(self.note("*", "no series for toposcope_numa_node_info"),))
        notes: list[Note] = []
        recs: list[Recommendation] = []
        by_node: dict[str, list[WorkloadModel]] = defaultdict(list)
        for workload in model.workloads:
            by_node[workload.node].append(workload)
        for name, workloads in sorted(by_node.items()):
            node = model.node(name)
            if node is None or len(node.cpu_numa_nodes()) < 2:
                continue  # one NUMA node: nothing to pin to
            recs.extend(self._plan_node(model, node, workloads, notes))
        return Evaluation(tuple(recs), tuple(notes))

    def _candidates(
        self,
        model: ClusterModel,
        node: NodeModel,
        workloads: list[WorkloadModel],
        notes: list[Note],
    ) -> list[PinCandidate]:
        """The node's workloads worth pinning, with their targets and gains (a workload
        holding GPUs that idle-release's rule finds quiet is left alone, with a note).
        """
        s = self.settings
        found: list[PinCandidate] = []
        crowd = crowding(workloads)
        rule = IdleRule()
        for workload in workloads:
            cpu, memory = workload.cpu_shares(), workload.memory_shares()
            if not cpu and not memory:
                notes.append(self.note(workload.key, "no CPU or memory placement series"))
                continue
            if memory and workload.memory_bytes < s.min_memory_bytes:
                continue
            cores = workload.cores_used()
            if cores is not None and 0 < cores < s.min_cores:
                continue  # nearly idle: nothing to speed up (no CPU at all: judged by threads)
            targets = self._targets(node, workload, cpu, memory, notes, crowd)
            if not targets:
                continue
            if workload.gpus and (idleness := rule.judge(model, workload)).quiet:
                notes.append(self.note(workload.key, rule.why_left(model, idleness)))
                continue
            first = targets[0]
            measured = measured_memory_share(workload, s.core_stream_gbps, node)
            if isinstance(measured, MeasuredMemoryShare):
                candidate = measured_candidate(node, workload, targets, measured, s)
                if candidate.gain <= 0:
                    notes.append(self.note(workload.key, candidate.gain_model))
                    continue
                found.append(candidate)
                continue
            remote = remote_share(cpu, memory, first)
            scale = s.gpu_job_share if workload.gpus else 1.0
            penalty = scale * distance_penalty(
                node, cpu, memory, first, s.numa_penalty, s.reference_distance
            )
            found.append(
                PinCandidate(
                    remote * penalty,
                    workload,
                    targets,
                    workload.cores_used(),
                    f"remote share {remote:.3f} (1 - c*m on node {first}) x NUMA penalty "
                    f"{penalty:.4f} ({s.numa_penalty:g} at the node's farthest SLIT distance "
                    "or reference_distance, CRI-RM 57.76% calibration"
                    + (f", x gpu_job_share {scale:g} for a GPU job)" if workload.gpus else ")")
                    + f"; NUMA sensitivity: prior ({measured})",
                )
            )
        found.extend(self._crowded(node, workloads, {c.workload.key for c in found}))
        return found

    def _crowded(
        self, node: NodeModel, workloads: list[WorkloadModel], taken: set[str]
    ) -> list[PinCandidate]:
        """Workloads confined to a saturated NUMA node whose threads outnumber its CPUs
        while another node has room: enough of them move that the rest fit.
        """
        s = self.settings
        used: dict[int, float] = defaultdict(float)
        threads: dict[int, int] = defaultdict(int)
        for w in workloads:
            cores = w.cores_used()
            for numa_id, share in w.cpu_shares().items():
                used[numa_id] += share * (cores or 0.0)
            for numa_id, count in w.threads_by_numa.items():
                threads[numa_id] += count
        found: list[PinCandidate] = []
        for numa in node.cpu_numa_nodes():
            cpus = numa.cpu_count
            if threads[numa.id] <= cpus or used[numa.id] < s.saturated_load * cpus:
                continue
            confined = [
                w
                for w in workloads
                if w.key not in taken
                and not w.gpus
                and (w.cores_used() or 0.0) > 0
                and w.cpu_shares().get(numa.id, 0.0) >= 0.9
                and w.threads_by_numa.get(numa.id, 0) > 0
            ]
            others = sorted(
                (n for n in node.cpu_numa_nodes() if n.id != numa.id),
                key=lambda n: (used[n.id] / max(n.cpu_count, 1), n.id),
            )
            remaining = threads[numa.id]
            for w in sorted(confined, key=lambda w: (-w.threads_by_numa[numa.id], w.key)):
                if remaining <= cpus or not others:
                    break
                count = w.threads_by_numa[numa.id]
                cores = w.cores_used() or 0.0
                room = max(0.0, others[0].cpu_count - used[others[0].id])
                demand = min(float(count), room)
                if demand <= cores:
                    continue
                remaining -= count
                found.append(
                    PinCandidate(
                        demand / cores - 1.0,
                        w,
                        [n.id for n in others],
                        demand,
                        f"CPU contention: {threads[numa.id]} threads on the {cpus} CPUs of "
                        f"NUMA node {numa.id} (saturated: {used[numa.id]:.1f} cores busy); "
                        f"{count} threads using {cores:.1f} cores could use {demand:.1f} "
                        f"on NUMA node {others[0].id}: {demand:.1f}/{cores:.1f} - 1",
                        crowded=numa.id,
                    )
                )
        return found

    def _plan_node(
        self,
        model: ClusterModel,
        node: NodeModel,
        workloads: list[WorkloadModel],
        notes: list[Note],
    ) -> list[Recommendation]:
        """Plan the node's candidates against its capacity (:func:`assign_targets`); a note
        for each candidate that fits nowhere.
        """
        s = self.settings
        candidates = sorted(
            self._candidates(model, node, workloads, notes), key=lambda c: (-c.gain, c.workload.key)
        )
        if not candidates:
            return []
        limits = s.limits()
        chosen, stuck = assign_targets(node, workloads, candidates, limits)
        movers = room_makers(
            node, workloads, candidates, stuck, s.max_cpu_load, crowding(workloads)
        )
        if movers:
            candidates = [*candidates, *movers]
            chosen, stuck = assign_targets(node, workloads, candidates, limits)
        for c in candidates:
            if stuck.get(c.workload.key) and c.makes_room_for is None:
                notes.append(
                    self.note(c.workload.key, "no capacity: " + "; ".join(stuck[c.workload.key]))
                )
        own, moves = joined(chosen)
        return [
            self._recommend(model, plan, moves.get(plan.candidate.workload.key, [])) for plan in own
        ]

    def _targets(
        self,
        node: NodeModel,
        workload: WorkloadModel,
        cpu: Mapping[int, float],
        memory: Mapping[int, float],
        notes: list[Note],
        crowd: Mapping[int, float],
    ) -> list[int]:
        cpu_nodes = {n.id for n in node.cpu_numa_nodes()}
        if workload.gpus:
            gpu_nodes = [n for n in gpu_numa_nodes(node, workload) if n in cpu_nodes]
            if gpu_nodes:
                target = gpu_nodes[0]
                if remote_share(cpu, memory, target) < self.settings.min_remote_share:
                    return []
                return [target]
            notes.append(
                self.note(workload.key, "NUMA node of its GPUs unknown; judged without GPUs")
            )
        ranked = rank_cpu_targets(node, workload, (cpu, memory), crowd)
        if remote_share(cpu, memory, ranked[0]) < self.settings.min_remote_share:
            return []
        return ranked

    def _recommend(
        self, model: ClusterModel, plan: PinPlan, moves: list[PinPlan]
    ) -> Recommendation:
        """The pin of ``plan``, after the ``moves`` that make room for it on its target."""
        s = self.settings
        candidate, target, capacity_known = plan.candidate, plan.target, plan.capacity_known
        workload = candidate.workload
        node = model.nodes[workload.node]
        cpu, memory = workload.cpu_shares(), workload.memory_shares()
        remote = remote_share(cpu, memory, target)
        moved_bytes = moved_bytes_of(plan)
        numa = node.numa(target)
        cpus = list(numa.cpus) if numa else []
        confidence = 0.8
        if workload.cpu_cumulative or workload.cpu_from_threads():
            confidence *= 0.75
        if not capacity_known:
            confidence *= 0.75
        risk = Risk.MEDIUM if moved_bytes > 4 * GIB or not capacity_known else Risk.LOW
        if candidate.crowded is not None:
            why = f"off the oversubscribed NUMA node {candidate.crowded}"
            detail = f"{workload.threads_by_numa.get(candidate.crowded, 0)} threads compete there"
        else:
            why = "its GPUs' NUMA node" if workload.gpus else "its dominant NUMA node"
            detail = f"{remote:.0%} of its CPU/memory pairs are remote"
        if plan.unbound:
            detail += (
                "; no NUMA node has room for all its memory: its memory stays unbound, the "
                f"pages that fit ({moved_bytes / GIB:.1f} GiB) move to node {target}"
            )
        evidence = workload_evidence(workload)
        basis: dict[str, object] = {}
        if candidate.crowded is None:
            measured = measured_memory_share(workload, s.core_stream_gbps, node)
            if isinstance(measured, MeasuredMemoryShare):
                basis = measured.to_dict()
                evidence += measured.evidence(workload)
            else:
                basis = prior_basis(measured)
        for index in workload.gpus:
            gpu = node.gpu(index)
            if gpu is not None and gpu.numa_node is not None:
                evidence.append(
                    Evidence(
                        "toposcope_gpu_info",
                        {"node": node.name, "gpu": str(index), "numa_node": str(gpu.numa_node)},
                        1.0,
                    )
                )
        actions = [
            a for m in moves for a in pin_actions(node, m, moved_bytes_of(m), s.migrate_memory)
        ]
        actions.extend(pin_actions(node, plan, moved_bytes, s.migrate_memory))
        if moves:
            detail += "; first, to make room there, " + ", ".join(
                f"{m.candidate.workload.name} moves to NUMA node {m.target}" for m in moves
            )
        return make_recommendation(
            kind=RecommendationKind.PIN,
            policy=self.name,
            target=Target(workload.node, workload.name),
            summary=(
                f"pin {workload.name} on {workload.node} to NUMA node {target} ({why}); {detail}"
            ),
            current={
                "cpu_share_by_numa": rounded(cpu),
                "memory_share_by_numa": rounded(memory),
                "gpus": list(workload.gpus),
                **({"numa_sensitivity": basis} if basis else {}),
            },
            proposed={
                "numa_node": target,
                "cpus": format_cpulist(cpus),
                "mems": list(plan.mems),
                "migrate_memory_bytes": round(moved_bytes) if s.migrate_memory else 0,
                **({"makes_room": [moved_summary(node, m) for m in moves]} if moves else {}),
            },
            evidence=evidence,
            estimated_gain=plan.gain,
            gain_model=plan.gain_model + "".join(f"; {m.candidate.gain_model}" for m in moves),
            confidence=confidence,
            risk=risk,
            actions=actions,
            claims=[
                f"workload:{w.key}" for w in (*(m.candidate.workload for m in moves), workload)
            ],
        )
