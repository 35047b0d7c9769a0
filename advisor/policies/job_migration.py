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
        """One ``migrate-job`` recommendation per job worth moving."""
        s = self.settings
        jobs = [w for w in model.workloads if len(w.gpus) >= s.min_gpus]
        if not jobs:
            return Evaluation()
        notes: list[Note] = []
        missing = self.missing_note(model)
        if missing:
            notes.append(missing)
        options: list[tuple[float, WorkloadModel, Placement, Placement]] = []
        for job in jobs:
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
        recs: list[Recommendation] = []
        taken: set[str] = set()
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
            recs.append(self._recommend(model, job, current, best, gain, saved))
        return Evaluation(tuple(recs), tuple(notes))

    def _best(
        self, model: ClusterModel, job: WorkloadModel, taken: set[str] | None = None
    ) -> Placement | None:
        busy = taken or set()
        ranked: list[Placement] = []
        for name, node in sorted(model.nodes.items()):
            if name != job.node and not self.settings.allow_cross_node:
                continue
            free = set(model.free_gpus(name))
            if name == job.node:
                free |= set(job.gpus)
            free = {g for g in free if f"gpu:{name}/{g}" not in busy}
            sets = rank_sets(node, free, len(job.gpus))
            if sets:
                ranked.append(sets[0])
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
    ) -> Recommendation:
        s = self.settings
        node = model.nodes[job.node]
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
        f_now, f_new = current.factor(s.sensitivity), best.factor(s.sensitivity)
        return make_recommendation(
            kind=RecommendationKind.MIGRATE_JOB,
            policy=self.name,
            target=Target(job.node, job.name, tuple(job.gpus)),
            summary=(
                f"move {job.name} from {job.node} GPUs {list(job.gpus)} "
                f"(worst link {current.worst_link}) to {best.node} GPUs {list(best.gpus)} "
                f"(worst link {best.worst_link})"
            ),
            current={
                "node": job.node,
                "gpus": list(job.gpus),
                "worst_link": str(current.worst_link),
            },
            proposed={
                "node": best.node,
                "gpus": list(best.gpus),
                "worst_link": str(best.worst_link),
                "saves_seconds": round(saved),
            },
            evidence=evidence,
            estimated_gain=gain,
            gain_model=(
                f"link factor now {f_now:.2f} / after {f_new:.2f} - 1 (Gandiva-anchored "
                f"LINK_FACTOR, sensitivity {s.sensitivity:g}); saves {saved:.0f}s of "
                f"{s.remaining_seconds:.0f}s remaining vs {s.checkpoint_restore_seconds:.0f}s "
                "checkpoint-restore"
            ),
            confidence=0.5 if cross else 0.6,
            risk=Risk.HIGH if cross else Risk.MEDIUM,
            actions=[
                ActionRequest("", ActionKind.MIGRATE, job.name, best.node, gpus=list(best.gpus))
            ],
            claims=[*gpu_claims(best.node, best.gpus), f"workload:{job.key}"],
        )
