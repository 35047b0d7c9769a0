"""One evaluation of job-migration: the state its phases share.

The phases of :class:`~toposcope.advisor.policies.job_migration.JobMigration` (separating
jobs that share GPUs, re-placing poorly linked jobs, exchanges, pending jobs on freed sets)
decide one after another; each takes the GPUs and workloads of what it recommends, so that a
later phase never offers them again. :class:`MigrationRun` holds that: the model, the GPU set
search, the settings and recommendation terms, the claims and moves so far, the sets chosen
jointly, and the recommendations and notes found.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from toposcope.advisor.comm_share import MeasuredShare, measured_share
from toposcope.advisor.gpu_search import GpuSetSearch
from toposcope.advisor.gpu_sets import Placement, gpu_claims
from toposcope.advisor.model import ClusterModel, PendingWorkload, WorkloadModel
from toposcope.advisor.policies.migration_recommendations import MigrationTerms
from toposcope.advisor.policies.migration_settings import JobMigrationSettings
from toposcope.advisor.policies.move_pins import pin_or_make_room, unpinned_loss
from toposcope.advisor.policies.move_starts import EnabledStart, enabled_start
from toposcope.report.recommendation import Note, Recommendation

#: a busy job whose set could be better: (gain, job, its set, the best set it could get
#: alone or ``None`` when only moving small jobs away could make room for a better one)
MoveOption = tuple[float, WorkloadModel, Placement, Placement | None]


@dataclass
class MigrationRun:
    """One evaluation: its model, searches, settings and recommendation terms, what earlier
    decisions took (GPU claims, workloads moved), and what it found so far.
    """

    model: ClusterModel
    search: GpuSetSearch
    terms: MigrationTerms
    settings: JobMigrationSettings
    taken: set[str] = field(default_factory=set)
    moved: set[str] = field(default_factory=set)
    stay: dict[str, str] = field(default_factory=dict)
    recs: list[Recommendation] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    shares: dict[str, MeasuredShare | None] = field(default_factory=dict)
    assigned: dict[str, Placement | None] = field(default_factory=dict)
    reserved: dict[str, list[str]] = field(default_factory=dict)
    served: set[str] = field(default_factory=set)

    def note(self, target: str, reason: str) -> Note:
        """A "cannot decide" note from the policy this run evaluates."""
        return Note(self.terms.policy, target, reason)

    def share(self, job: WorkloadModel) -> MeasuredShare | None:
        """``job``'s measured communication share on its current GPUs (computed once)."""
        if job.key not in self.shares:
            self.shares[job.key] = measured_share(self.model, job)
        return self.shares[job.key]

    def take(
        self,
        rec: Recommendation,
        claims: list[str],
        *moved: str,
        start: EnabledStart | None = None,
    ) -> None:
        """Keep ``rec`` and mark its GPUs and moved workloads as taken for later decisions
        (with ``start``, the pending job it makes room for and that job's set).
        """
        self.taken.update(claims)
        self.moved.update(moved)
        self.recs.append(rec)
        if start is not None:
            self.served.add(start.name)
            self.taken.update(start.claims())

    def start_after(
        self,
        job: WorkloadModel,
        target: Placement,
        claims: list[str],
        sensitivity: float,
        alternative: Callable[[PendingWorkload], float] | None = None,
    ) -> EnabledStart | None:
        """The start of a pending job that ``job``'s move to ``target`` (taking ``claims``)
        makes possible (:func:`~toposcope.advisor.policies.move_starts.enabled_start`): none
        for a pending job that keeps a set of its own or that an earlier move made room for,
        nor one that starts as well this round without it (``alternative``).
        """
        return enabled_start(
            self.search,
            self.model.pending,
            job,
            target,
            taken=self.taken | set(claims),
            held=self.served | set(self.reserved),
            sensitivity=sensitivity,
            alternative=alternative,
        )

    def assigned_set(self, job: WorkloadModel, *, include_own: bool) -> Placement | None:
        """The set chosen jointly for ``job`` when it was (``None``: it stays), else the
        best it can get now; a jointly chosen set that an earlier decision took gives way
        to the best left.
        """
        if job.key not in self.assigned:
            return self.search.best_for(job, self.taken, include_own=include_own)
        target = self.assigned[job.key]
        if target is not None and self.taken & set(gpu_claims(target.node, target.gpus)):
            return self.search.best_for(job, self.taken, include_own=include_own)
        return target

    def unpinned(
        self,
        job: WorkloadModel,
        target: Placement,
        away: list[WorkloadModel] | None = None,
    ) -> tuple[float, str]:
        """The step-time factor of the NUMA locality ``job`` loses when moved to ``target``
        finds no room for its pin there, even after moving CPU work aside (with ``away``, the
        jobs the same recommendation moves first), and why (:func:`~toposcope.advisor.
        policies.move_pins.unpinned_loss`); 1 when it is pinned next to its new GPUs.
        """
        pin = pin_or_make_room(
            self.model, target.node, target.gpus, self.terms.pin, job, {}, away or []
        )
        if pin.cpus:
            return 1.0, ""
        return unpinned_loss(self.model, job, target.node, target.gpus)
