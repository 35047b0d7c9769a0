"""job-migration: move a running multi-GPU job to a better-connected GPU set.

Rule. A running job holding at least ``min_gpus`` GPUs, busy (mean utilization at least
``min_utilization``), whose GPU set's worst link is worse than the best set it could get is
moved there, by checkpoint and restore, when the time it saves over its expected remaining
run time beats the checkpoint-restore cost. Candidate sets are ranked exactly like
gpu-placement's (worst link, link sum, fragmentation); they come from the job's own GPUs plus
the free ones on its node, and, with ``allow_cross_node``, from the free GPUs of other nodes.
Jobs with the highest gain choose first; GPUs chosen for one job are not offered to the next.

Gain model. Step time scales with the worst link by gpu-placement's ``LINK_FACTOR``
(Gandiva-anchored: same switch 1.0, across switches 1.4, across sockets 2.0), with
``sensitivity`` scaling the slowdown. The gain is ``f_now / f_new - 1``. Over
``remaining_seconds`` it saves ``remaining x (1 - f_new / f_now)`` seconds; only when that is
more than ``checkpoint_restore_seconds`` is the move recommended (otherwise a note says why
not). Nothing in the metrics tells a job's remaining time, hence the setting.
"""

from __future__ import annotations

from dataclasses import dataclass

from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.policies.base import Evaluation, Policy, PolicySettings, setting
from toposcope.advisor.policies.gpu_placement import (
    Placement,
    cells,
    gpu_claims,
    rank_sets,
)
from toposcope.advisor.recommendations import (
    Evidence,
    Note,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
    make_recommendation,
)
from toposcope.catalogue import spec
from toposcope.cpulist import format_cpulist
from toposcope.resources import ActionKind, ActionRequest


@dataclass(frozen=True)
class JobMigrationSettings(PolicySettings):
    """Settings of the job-migration policy."""

    min_gpus: int = setting(2, ge=2, le=64, help="only jobs with at least this many GPUs")
    min_utilization: float = setting(
        0.05, ge=0, le=1, help="only busy jobs: mean GPU utilization over the window"
    )
    checkpoint_restore_seconds: float = setting(
        600.0, ge=0, help="what a checkpoint, move and restore costs the job"
    )
    remaining_seconds: float = setting(
        6 * 3600.0, gt=0, help="expected remaining run time of a job (not in the metrics)"
    )
    sensitivity: float = setting(
        1.0, ge=0, le=2, help="how communication-bound jobs are (scales the link slowdown)"
    )
    allow_cross_node: bool = setting(True, help="also consider free GPUs on other nodes")
    min_shared_utilization: float = setting(
        0.3,
        ge=0,
        le=1,
        help="a GPU held by several workloads is worth separating when its mean utilization "
        "is at least this",
    )
    pin_to_gpu_numa: bool = setting(
        True, help="also restrict a moved job's CPUs and memory to its new GPUs' NUMA node"
    )


class JobMigration(Policy[JobMigrationSettings]):
    """Move running multi-GPU jobs off poorly connected GPU sets when it pays off."""

    name = "job-migration"
    description = "move running multi-GPU jobs to a better-connected GPU set when it pays off"
    settings_type = JobMigrationSettings
    requires = (
        spec("toposcope_workload_gpu_info"),
        spec("toposcope_gpu_link_info"),
        spec("toposcope_gpu_utilization_ratio"),
    )

    def evaluate(self, model: ClusterModel) -> Evaluation:
        """One ``migrate-job`` recommendation per job worth moving: GPU sets shared with
        other workloads first, then poorly linked sets.
        """
        s = self.settings
        self._best_sets: dict[tuple[str, frozenset[int], int], Placement | None] = {}
        self._by_count: dict[int, list[Placement]] = {}
        self._cells: dict[str, list[frozenset[int]]] = {}
        jobs = [w for w in model.workloads if len(w.gpus) >= s.min_gpus]
        movers = self._sharing(model)
        if not jobs and not movers:
            return Evaluation()
        notes: list[Note] = []
        missing = self.missing_note(model)
        if missing:
            notes.append(missing)
        recs: list[Recommendation] = []
        taken: set[str] = set()
        moved: set[str] = set()
        for share_gain, job, peers, util in movers:
            current = rank_sets(model.nodes[job.node], job.gpus, len(job.gpus))[0]
            best = self._best(model, job, taken, include_own=False)
            if best is None:
                notes.append(
                    self.note(
                        job.key,
                        f"shares GPUs {list(job.gpus)} with {', '.join(peers)}; "
                        f"no {len(job.gpus)} free GPU(s) to move it to",
                    )
                )
                continue
            f_now, f_new = current.factor(s.sensitivity), best.factor(s.sensitivity)
            gain = (1.0 + share_gain) * f_now / f_new - 1.0
            saved = s.remaining_seconds * (1.0 - 1.0 / (1.0 + gain)) if gain > 0 else 0.0
            if saved <= s.checkpoint_restore_seconds:
                notes.append(
                    self.note(
                        job.key,
                        f"separating it from {', '.join(peers)} would save {saved:.0f}s, less "
                        f"than the checkpoint-restore cost {s.checkpoint_restore_seconds:.0f}s",
                    )
                )
                continue
            taken.update(gpu_claims(best.node, best.gpus))
            moved.add(job.key)
            model_text = (
                f"time-slicing: {len(peers) + 1} workloads on a GPU {util:.0%} busy, each "
                f"assumed to want all of it: ({len(peers) + 1} - 1) x {util:.2f} = "
                f"{share_gain:.2f} faster alone; link factor {f_now:.2f} -> {f_new:.2f}"
            )
            recs.append(self._recommend(model, job, current, best, gain, saved, model_text, peers))
        options: list[tuple[float, WorkloadModel, Placement, Placement]] = []
        for job in jobs:
            if job.key in moved:
                continue
            node = model.node(job.node)
            if node is None:
                continue
            utils = [g.utilization for i in job.gpus if (g := node.gpu(i)) is not None]
            if not utils or any(u is None for u in utils):
                notes.append(self.note(job.key, "no GPU utilization series for its GPUs"))
                continue
            mean = sum(u for u in utils if u is not None) / len(utils)
            if mean < s.min_utilization:
                continue  # idle: idle-release's business
            current = rank_sets(node, job.gpus, len(job.gpus))[0]
            candidate = self._best(model, job)
            if candidate is None or candidate.factor(s.sensitivity) >= current.factor(
                s.sensitivity
            ):
                continue
            gain = current.factor(s.sensitivity) / candidate.factor(s.sensitivity) - 1.0
            options.append((gain, job, current, candidate))
        for _, job, current, first_choice in sorted(options, key=lambda o: (-o[0], o[1].key)):
            best = (
                self._best(model, job, taken)
                if taken & set(gpu_claims(first_choice.node, first_choice.gpus))
                else first_choice
            )
            if best is None or best.factor(s.sensitivity) >= current.factor(s.sensitivity):
                continue
            gain = current.factor(s.sensitivity) / best.factor(s.sensitivity) - 1.0
            saved = s.remaining_seconds * (
                1.0 - best.factor(s.sensitivity) / current.factor(s.sensitivity)
            )
            if saved <= s.checkpoint_restore_seconds:
                notes.append(
                    self.note(
                        job.key,
                        f"moving to {best.node} GPUs {list(best.gpus)} would save {saved:.0f}s "
                        f"of {s.remaining_seconds:.0f}s, less than the checkpoint-restore "
                        f"cost {s.checkpoint_restore_seconds:.0f}s",
                    )
                )
                continue
            taken.update(gpu_claims(best.node, best.gpus))
            f_now, f_new = current.factor(s.sensitivity), best.factor(s.sensitivity)
            model_text = (
                f"link factor now {f_now:.2f} / after {f_new:.2f} - 1 (Gandiva-anchored "
                f"LINK_FACTOR, sensitivity {s.sensitivity:g})"
            )
            recs.append(self._recommend(model, job, current, best, gain, saved, model_text))
        return Evaluation(tuple(recs), tuple(notes))

    def _sharing(self, model: ClusterModel) -> list[tuple[float, WorkloadModel, list[str], float]]:
        """Workloads to move off GPUs they share: (gain, workload, the others, utilization).

        On each GPU held by several workloads, the one holding most GPUs (then the first by
        name) stays and the others move; a workload moves once.
        """
        s = self.settings
        by_node: dict[str, list[WorkloadModel]] = {}
        for w in model.workloads:
            if w.gpus:
                by_node.setdefault(w.node, []).append(w)
        found: dict[str, tuple[float, WorkloadModel, list[str], float]] = {}
        for name, holders in sorted(by_node.items()):
            node = model.node(name)
            if node is None:
                continue
            per_gpu: dict[int, list[WorkloadModel]] = {}
            for w in holders:
                for g in w.gpus:
                    per_gpu.setdefault(g, []).append(w)
            for index, sharing in sorted(per_gpu.items()):
                gpu = node.gpu(index)
                if len(sharing) < 2 or gpu is None or gpu.utilization is None:
                    continue
                util = min(1.0, gpu.utilization)
                if util < s.min_shared_utilization:
                    continue
                ordered = sorted(sharing, key=lambda w: (-len(w.gpus), w.name))
                for w in ordered[1:]:
                    if w.key in found or any(w.key == f[1].key for f in found.values()):
                        continue
                    if ordered[0].key in found:
                        continue  # the one that stays is itself moving away
                    gain = (len(sharing) - 1) * util
                    peers = [o.name for o in sharing if o.key != w.key]
                    found[w.key] = (gain, w, peers, util)
        return sorted(found.values(), key=lambda f: (-f[0], f[1].key))

    def _node_best(
        self, model: ClusterModel, name: str, free: set[int], count: int
    ) -> Placement | None:
        """The best set of ``count`` GPUs among ``free`` on node ``name`` (memoised: many
        jobs ask about the same node and GPUs).
        """
        if len(free) < count:
            return None
        key = (name, frozenset(free), count)
        if key not in self._best_sets:
            node = model.nodes[name]
            if name not in self._cells:
                self._cells[name] = cells(node)
            sets = rank_sets(node, free, count, self._cells[name])
            self._best_sets[key] = sets[0] if sets else None
        return self._best_sets[key]

    def _ranked_others(self, model: ClusterModel, count: int) -> list[Placement]:
        """Every node's best free set of ``count`` GPUs, best first (computed once)."""
        if count not in self._by_count:
            found = [
                p
                for name in sorted(model.nodes)
                if (p := self._node_best(model, name, set(model.free_gpus(name)), count))
                is not None
            ]
            self._by_count[count] = sorted(found, key=lambda p: (p.score()[:2], p.score(), p.node))
        return self._by_count[count]

    def _best(
        self,
        model: ClusterModel,
        job: WorkloadModel,
        taken: set[str] | None = None,
        include_own: bool = True,
    ) -> Placement | None:
        busy = taken or set()
        busy_nodes = {c.split(":", 1)[1].rsplit("/", 1)[0] for c in busy}
        count = len(job.gpus)

        def free_on(name: str) -> set[int]:
            free = set(model.free_gpus(name))
            if name == job.node and include_own:
                free |= set(job.gpus)
            return {g for g in free if f"gpu:{name}/{g}" not in busy}

        ranked: list[Placement] = []
        if job.node in model.nodes:
            own = self._node_best(model, job.node, free_on(job.node), count)
            if own is not None:
                ranked.append(own)
        if self.settings.allow_cross_node:
            for placement in self._ranked_others(model, count):
                if placement.node == job.node:
                    continue
                if placement.node in busy_nodes:  # some of its GPUs went to earlier jobs
                    again = self._node_best(model, placement.node, free_on(placement.node), count)
                    if again is not None:
                        ranked.append(again)
                    continue
                ranked.append(placement)  # the best of the untouched nodes: none after beats it
                break
        if not ranked:
            return None
        # prefer staying on the node when it is as good (a local move is cheaper)
        return min(ranked, key=lambda p: (p.score()[:2], p.node != job.node, p.score(), p.node))

    def _recommend(
        self,
        model: ClusterModel,
        job: WorkloadModel,
        current: Placement,
        best: Placement,
        gain: float,
        saved: float,
        model_text: str,
        peers: list[str] | None = None,
    ) -> Recommendation:
        s = self.settings
        node = model.nodes[job.node]
        target_node = model.nodes[best.node]
        cpus: list[int] = []
        mems: list[int] = []
        if s.pin_to_gpu_numa:
            counts: dict[int, int] = {}
            for index in best.gpus:
                g = target_node.gpu(index)
                if g is not None and g.numa_node is not None:
                    counts[g.numa_node] = counts.get(g.numa_node, 0) + 1
            home = min(counts, key=lambda n: (-counts[n], n)) if counts else None
            numa = target_node.numa(home) if home is not None else None
            if numa is not None and numa.cpus:
                cpus, mems = list(numa.cpus), [numa.id]
        evidence = [
            Evidence(
                "toposcope_gpu_link_info",
                {"node": job.node, "gpu": str(a), "peer_gpu": str(b)},
                1.0,
            )
            for a in job.gpus
            for b in job.gpus
            if a < b and node.link(a, b) == current.worst_link
        ]
        for index in job.gpus:
            gpu = node.gpu(index)
            if gpu is not None and gpu.utilization is not None:
                evidence.append(
                    Evidence(
                        "toposcope_gpu_utilization_ratio",
                        {"node": job.node, "gpu": str(index)},
                        gpu.utilization,
                    )
                )
        cross = best.node != job.node
        why = (
            f"shares its GPUs with {', '.join(peers)}"
            if peers
            else f"worst link {current.worst_link}"
        )
        return make_recommendation(
            kind=RecommendationKind.MIGRATE_JOB,
            policy=self.name,
            target=Target(job.node, job.name, tuple(job.gpus)),
            summary=(
                f"move {job.name} from {job.node} GPUs {list(job.gpus)} ({why}) to "
                f"{best.node} GPUs {list(best.gpus)} (worst link {best.worst_link})"
            ),
            current={
                "node": job.node,
                "gpus": list(job.gpus),
                "worst_link": str(current.worst_link),
            },
            proposed={
                "node": best.node,
                "gpus": list(best.gpus),
                "cpus": format_cpulist(cpus),
                "mems": mems,
                "worst_link": str(best.worst_link),
                "saves_seconds": round(saved),
            },
            evidence=evidence,
            estimated_gain=gain,
            gain_model=(
                f"{model_text}; saves {saved:.0f}s of {s.remaining_seconds:.0f}s remaining vs "
                f"{s.checkpoint_restore_seconds:.0f}s checkpoint-restore"
            ),
            confidence=0.5 if cross else 0.6,
            risk=Risk.HIGH if cross else Risk.MEDIUM,
            actions=[
                ActionRequest(
                    "", ActionKind.MIGRATE, job.name, best.node, cpus, mems, list(best.gpus)
                )
            ],
            claims=[*gpu_claims(best.node, best.gpus), f"workload:{job.key}"],
        )
