"""job-migration: move a running multi-GPU job to a better-connected GPU set.

Rule. A running job holding at least ``min_gpus`` GPUs, busy (mean utilization at least
``min_utilization``), whose GPU set's worst link is worse than the best set it could get is
moved there, by checkpoint and restore, when the time it saves over its expected remaining
run time beats the checkpoint-restore cost. Candidate sets are ranked exactly like
gpu-placement's (worst link, link sum, fragmentation); they come from the job's own GPUs plus
the free ones on its node, and, with ``allow_cross_node``, from the free GPUs of other nodes.
Jobs with the highest gain per GPU choose first (:func:`choice_order`); GPUs chosen for one
job are not offered to the next. Where the sets several jobs would choose alone share GPUs,
or share them with the set gpu-placement would start a pending job on, the sets are chosen
jointly instead (:mod:`~toposcope.advisor.policies.contested_moves`): the combination worth
most in the jobs' summed efficiency; a pending job's start keeps its set unless a move is
worth more. A move whose old GPUs let a pending job start (or start on a better set) counts
that start too (:mod:`~toposcope.advisor.policies.move_starts`).

Gain model (:mod:`~toposcope.advisor.link_gain`). From the job's measured link traffic
where it has some: the share ``s`` of a step its dearest pair is busy (its traffic each way
over the pair's bandwidth) and the time per byte of the new pair, ``T_new / T_now = (1 - s)
+ s x B_now / B_new`` (onto NVLink, ``B_new`` the NVLinks' from the topology). Else, and
for moves off or between NVLinks, the prior: step time scales
with the set's dearest pair's link price, as in gpu-placement
(:mod:`~toposcope.advisor.link_prices`: by bandwidth from the topology or a measurement,
else the tier's Gandiva-anchored factor: same switch 1.0, across switches 1.4, across
sockets 2.0), with ``sensitivity`` scaling the slowdown. The gain is ``T_now / T_new - 1``;
the gain model text and the JSON report say which estimate was used and name each price's
source. Over ``remaining_seconds`` it saves ``remaining x (1 - T_new / T_now)`` seconds;
only when that is more than ``checkpoint_restore_seconds`` is the move recommended
(otherwise a note says why not). Nothing in the metrics tells a job's remaining time, hence
the setting. A move that only changes the worst link between PCIe paths of one socket is a
note unless both prices are measured (``--p2p-bandwidth``) or ``move_between_pcie_tiers``
is set.

Left alone: a job idle by idle-release's rule (:mod:`~toposcope.advisor.idleness`) is
released, not moved, nor moved out of another's way; a job whose scheduler ends it within
``min_time_left_seconds`` (``toposcope_queue_job_time_left_seconds``, when published) is not
moved either: the checkpoint-restore would cost more than its little run left could gain.

Defragmentation (Gandiva, HiveD). When a busy job's set, or the best free set for a pending
job, is worse than the best its size could have on some node, and a better set would be free
if smaller jobs moved to other free GPUs without getting a worse link
(:mod:`~toposcope.advisor.defragment` plans it), one recommendation moves the small
jobs first and the large job last. Its gain adds the small jobs' link changes and subtracts
``checkpoint_restore_seconds / remaining_seconds`` per moved job; it is recommended only when
the net seconds saved, after every job's checkpoint-restore, are positive and beat a plain
move's. It claims the freed set, the small jobs' new GPUs and every workload it moves.

Exchange (:mod:`~toposcope.advisor.policies.job_exchange`). Two jobs of one node that no
other decision moved trade GPUs, moved at once, when one gains and the other loses nothing:
jobs interleaved over two switches, with no free GPU to move through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from toposcope.advisor.comm_share import MeasuredShare, measured_share
from toposcope.advisor.defragment import DefragPlan, DefragValue, best_plan, plan_value
from toposcope.advisor.gpu_search import GpuSetSearch, worst_rank
from toposcope.advisor.gpu_sets import Placement, first_fit, gpu_claims, rank_sets
from toposcope.advisor.idleness import IdleRule
from toposcope.advisor.link_gain import MEASURED, LinkGain, link_gain
from toposcope.advisor.model import ClusterModel, PendingWorkload, WorkloadModel
from toposcope.advisor.policies.base import Evaluation, Policy, PolicySettings, setting
from toposcope.advisor.policies.contested_moves import (
    UNLISTED_NOTE,
    MoveTerms,
    Wanting,
    joint_choices,
    pending_starts,
    unlisted_nvlinks,
)
from toposcope.advisor.policies.job_exchange import (
    ExchangeTerms,
    exchange_recommendation,
    exchanges,
)
from toposcope.advisor.policies.migration_recommendations import (
    MigrationTerms,
    defrag_recommendation,
    move_recommendation,
)
from toposcope.advisor.policies.move_pins import pin_or_make_room, unpinned_loss
from toposcope.advisor.policies.move_starts import EnabledStart, enabled_start, start_value
from toposcope.advisor.policies.nic_moves import multi_node_jobs
from toposcope.catalogue import spec
from toposcope.report.recommendation import Note, Recommendation
from toposcope.topology.model import LinkType

#: worst links of one socket's PCIe fabric: a move between them rests on an uncertain gap
PCIE_TIERS = frozenset({LinkType.PIX, LinkType.PXB, LinkType.PHB, LinkType.NODE})


def pcie_tier_move(current: Placement, best: Placement) -> bool:
    """Whether a move only changes the worst link between PCIe paths of one socket (for
    example ``NODE`` to ``PIX``): the peer bandwidth through a host bridge is within the
    spread of a switch's on many platforms (a switch is faster on some, slower on others),
    so the prior's 1.4 can come out as a loss.
    """
    return current.worst_link in PCIE_TIERS and best.worst_link in PCIE_TIERS


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
    min_time_left_seconds: float = setting(
        1800.0,
        ge=0,
        le=7 * 86400.0,
        help="leave a job alone (plain move, defragmentation, moved out of the way) whose "
        "scheduler says it ends sooner than this (toposcope_queue_job_time_left_seconds; "
        "without the series every job counts as having time)",
    )
    move_between_pcie_tiers: bool = setting(
        False,
        help="also move a job whose worst link only goes from one PCIe path of a socket to "
        "another (PXB, PHB or NODE to PIX or PXB): a gap that varies by platform, so a "
        "note by default unless both pairs' bandwidths are measured (--p2p-bandwidth)",
    )


@dataclass(frozen=True)
class SharedGpu:
    """A workload to move off a GPU it shares: the gain of running alone, the workloads it
    shares with, and the GPU's mean utilization.
    """

    gain: float
    workload: WorkloadModel
    peers: list[str]
    utilization: float


@dataclass
class _Run:
    """One evaluation: its model, searches and recommendation terms, what earlier decisions
    took (GPU claims, workloads moved), and what it found so far.
    """

    model: ClusterModel
    search: GpuSetSearch
    terms: MigrationTerms
    taken: set[str] = field(default_factory=set)
    moved: set[str] = field(default_factory=set)
    stay: dict[str, str] = field(default_factory=dict)
    recs: list[Recommendation] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    shares: dict[str, MeasuredShare | None] = field(default_factory=dict)
    assigned: dict[str, Placement | None] = field(default_factory=dict)
    reserved: dict[str, list[str]] = field(default_factory=dict)
    served: set[str] = field(default_factory=set)

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


def shared_gpus(model: ClusterModel, min_utilization: float) -> list[SharedGpu]:
    """Workloads to move off GPUs they share, most gain first.

    On each GPU held by several workloads and busy at least ``min_utilization``, the one
    holding most GPUs (then the first by name) stays and the others move; a workload moves
    once.
    """
    by_node: dict[str, list[WorkloadModel]] = {}
    for w in model.workloads:
        if w.gpus:
            by_node.setdefault(w.node, []).append(w)
    found: dict[str, SharedGpu] = {}
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
            if util < min_utilization:
                continue
            ordered = sorted(sharing, key=lambda w: (-len(w.gpus), w.name))
            for w in ordered[1:]:
                if w.key in found or any(w.key == f.workload.key for f in found.values()):
                    continue
                if ordered[0].key in found:
                    continue  # the one that stays is itself moving away
                peers = [o.name for o in sharing if o.key != w.key]
                found[w.key] = SharedGpu((len(sharing) - 1) * util, w, peers, util)
    return sorted(found.values(), key=lambda f: (-f.gain, f.workload.key))


def choice_order(
    option: tuple[float, WorkloadModel, Placement, Placement | None],
) -> tuple[float, str]:
    """The order jobs choose their new sets in: highest gain per GPU first (then by key).

    A machine's few well-linked GPUs serve more jobs when the job that gains most for each
    GPU it takes chooses first: a 4-GPU job gaining as much as a 2-GPU one takes twice the
    GPUs for it. Every job counts the same in what the cluster gains (the closed loop's
    oracle sums the jobs' efficiencies).
    """
    gain, job = option[0], option[1]
    return (-gain / max(1, len(job.gpus)), job.key)


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
        """One ``migrate-job`` recommendation per job worth moving, in three phases that
        share the run's claims: jobs sharing GPUs are separated, then poorly linked jobs are
        re-placed (moving small jobs out of the way when that pays more), then pending jobs
        get sets freed by moving small jobs.
        """
        s = self.settings
        jobs = [w for w in model.workloads if len(w.gpus) >= s.min_gpus]
        movers = shared_gpus(model, s.min_shared_utilization)
        if not jobs and not movers and not model.pending:
            return Evaluation()
        terms = MigrationTerms(
            self.name,
            s.remaining_seconds,
            s.checkpoint_restore_seconds,
            s.pin_to_gpu_numa,
            s.sensitivity,
        )
        run = _Run(model, GpuSetSearch(model, cross_node=s.allow_cross_node), terms)
        missing = self.missing_note(model)
        if missing:
            run.notes.append(missing)
        self._hold(run)
        for key in sorted({m.workload.key for m in movers} | {j.key for j in jobs}):
            if key in run.stay:
                run.notes.append(self.note(key, run.stay[key]))
        movers = [m for m in movers if m.workload.key not in run.stay]
        jobs = [j for j in jobs if j.key not in run.stay]
        options = self._options(run, jobs)
        self._choose_jointly(run, movers, options)
        self._separate(run, movers)
        self._replace(run, options)
        self._exchange(run, jobs)
        for pending in sorted(model.pending, key=lambda j: (-j.gpus_requested, j.name)):
            self._place_pending(run, pending)
        return Evaluation(tuple(run.recs), tuple(run.notes))

    # jobs that stay where they are -------------------------------------------------------
    def _hold(self, run: _Run) -> None:
        """Mark, with the reason, the GPU holders no decision of this run may move: the parts
        of multi-node jobs (:func:`~toposcope.advisor.policies.nic_moves.multi_node_jobs`),
        those idle by idle-release's rule (:mod:`~toposcope.advisor.idleness`: released, not
        moved) and those whose scheduler ends them within ``min_time_left_seconds``.
        """
        s, rule = self.settings, IdleRule()
        parts = {p.key: job for job, found in multi_node_jobs(run.model).items() for p in found}
        for workload in run.model.workloads:
            if not workload.gpus:
                continue
            if workload.key in parts:
                run.stay[workload.key] = (
                    f"a part of multi-node job {parts[workload.key]}: moved only whole "
                    "(fabric-placement, nic-affinity), since one part's move stops every rank"
                )
                continue
            left = workload.time_left_seconds
            if left is not None and left < s.min_time_left_seconds:
                run.stay[workload.key] = (
                    f"ends in {left:.0f}s, sooner than min_time_left_seconds "
                    f"{s.min_time_left_seconds:.0f}s: not moved"
                )
                continue
            found = rule.judge(run.model, workload)
            if found.quiet:
                run.stay[workload.key] = rule.why_left(run.model, found)

    # phase 1: separating workloads that share GPUs -----------------------------------------
    def _separate(self, run: _Run, movers: list[SharedGpu]) -> None:
        """Move each workload off the GPUs it shares, when running alone pays off."""
        s = self.settings
        for mover in movers:
            job, peers = mover.workload, mover.peers
            cells = run.search.node_cells(job.node)
            current = rank_sets(run.model.nodes[job.node], job.gpus, len(job.gpus), cells)[0]
            best = self._assigned(run, job, include_own=False)
            if job.key in run.assigned and best is None:
                continue
            if best is None:
                run.notes.append(
                    self.note(
                        job.key,
                        f"shares GPUs {list(job.gpus)} with {', '.join(peers)}; "
                        f"no {len(job.gpus)} free GPU(s) to move it to",
                    )
                )
                continue
            link = link_gain(run.share(job), current, best, s.sensitivity)
            link = link.with_locality(*self._unpinned(run, job, best))
            gain = (1.0 + mover.gain) * (1.0 + link.gain) - 1.0
            saved = s.remaining_seconds * (1.0 - 1.0 / (1.0 + gain)) if gain > 0 else 0.0
            if saved <= s.checkpoint_restore_seconds:
                run.notes.append(
                    self.note(
                        job.key,
                        f"separating it from {', '.join(peers)} would save {saved:.0f}s, less "
                        f"than the checkpoint-restore cost {s.checkpoint_restore_seconds:.0f}s",
                    )
                )
                continue
            model_text = (
                f"time-slicing: {len(peers) + 1} workloads on a GPU {mover.utilization:.0%} "
                f"busy, each assumed to want all of it: ({len(peers) + 1} - 1) x "
                f"{mover.utilization:.2f} = {mover.gain:.2f} faster alone; link: {link.text}"
            )
            rec = move_recommendation(
                run.model,
                job,
                current,
                best,
                run.terms,
                gain=gain,
                saved=saved,
                model_text=model_text,
                peers=peers,
                estimate=link.source,
            )
            run.take(rec, gpu_claims(best.node, best.gpus), job.key)

    # phase 2: re-placing poorly linked jobs ------------------------------------------------
    def _replace(
        self, run: _Run, options: list[tuple[float, WorkloadModel, Placement, Placement | None]]
    ) -> None:
        """Re-place busy jobs whose set is worse than they could get (``options``, from
        :meth:`_options`): those whose sets were chosen jointly first, then the others,
        highest gain per GPU first (:func:`choice_order`): by a plain move, or by a
        defragmentation when that saves more.
        """
        ordered = sorted(options, key=lambda o: (o[1].key not in run.assigned, choice_order(o)))
        for _, job, current, alone in ordered:
            if job.key in run.moved:
                continue  # moved out of the way of a larger job by an earlier plan
            choice = alone
            if job.key in run.assigned:
                choice = self._assigned(run, job, include_own=True)
                if choice is None:
                    continue
            self._replace_one(run, job, current, choice)

    # contested sets, chosen jointly --------------------------------------------------------
    def _choose_jointly(
        self,
        run: _Run,
        movers: list[SharedGpu],
        options: list[tuple[float, WorkloadModel, Placement, Placement | None]],
    ) -> None:
        """Choose together the sets of the jobs whose first choices share GPUs
        (:mod:`~toposcope.advisor.policies.contested_moves`): jobs to separate from a GPU
        they share and jobs to re-place alike; ``run.assigned`` keeps the choice.
        """
        s, search = self.settings, run.search
        base = {m.workload.key: m.gain for m in movers}
        wanting: list[Wanting] = []
        for mover in movers:
            job = mover.workload
            cells = search.node_cells(job.node)
            current = rank_sets(run.model.nodes[job.node], job.gpus, len(job.gpus), cells)[0]
            first = search.best_for(job, include_own=False)
            if first is not None:
                peers = mover.gain / (1.0 + mover.gain)  # what the jobs it leaves gain
                wanting.append(Wanting(job, current, first, include_own=False, peer_value=peers))
        for _, job, current, first in options:
            if first is not None and job.key not in base:
                wanting.append(Wanting(job, current, first))

        def gain_of(w: Wanting, target: Placement) -> float:
            link = link_gain(run.share(w.job), w.current, target, s.sensitivity)
            return (1.0 + base.get(w.job.key, 0.0)) * (1.0 + link.gain) - 1.0

        def start_of(w: Wanting, target: Placement) -> EnabledStart | None:
            if not w.include_own:
                return None  # the GPUs it leaves stay held by the jobs it shared them with
            return enabled_start(
                search,
                run.model.pending,
                w.job,
                target,
                sensitivity=s.sensitivity,
                full_value=True,
                alternative=lambda p: self._start_now(run, p, w.job),
            )

        terms = MoveTerms(s.remaining_seconds, s.checkpoint_restore_seconds)
        starts = pending_starts(search, run.model.pending, s.sensitivity)
        chosen, kept = joint_choices(search, wanting, gain_of, terms, starts, start_of)
        run.assigned = {k: (c.target if c is not None else None) for k, c in chosen.items()}
        for start in kept:
            claims = gpu_claims(start.target.node, start.target.gpus)
            run.reserved[start.name] = claims
            run.taken.update(claims)
        for key, target in sorted(run.assigned.items()):
            if target is None:
                run.notes.append(
                    self.note(
                        key,
                        "not moved this round: the better sets it could take are chosen "
                        "for jobs that gain more from them (sets chosen jointly)",
                    )
                )

    def _assigned(self, run: _Run, job: WorkloadModel, *, include_own: bool) -> Placement | None:
        """The set chosen jointly for ``job`` when it was (``None``: it stays), else the
        best it can get now; a jointly chosen set that an earlier decision took gives way
        to the best left.
        """
        if job.key not in run.assigned:
            return run.search.best_for(job, run.taken, include_own=include_own)
        target = run.assigned[job.key]
        if target is not None and run.taken & set(gpu_claims(target.node, target.gpus)):
            return run.search.best_for(job, run.taken, include_own=include_own)
        return target

    def _options(
        self, run: _Run, jobs: list[WorkloadModel]
    ) -> list[tuple[float, WorkloadModel, Placement, Placement | None]]:
        """(gain, job, its set, the best set it could get alone or ``None``) for every busy
        job not moved yet whose set could be better, even if only by moving small jobs away.
        """
        s, model = self.settings, run.model
        options: list[tuple[float, WorkloadModel, Placement, Placement | None]] = []
        for job in jobs:
            if job.key in run.moved:
                continue
            node = model.node(job.node)
            if node is None:
                continue
            mean = node.mean_utilization(job.gpus)
            if mean is None:
                run.notes.append(self.note(job.key, "no GPU utilization series for its GPUs"))
                continue
            if mean < s.min_utilization:
                continue  # idle: idle-release's business
            if unlisted_nvlinks(node, job.gpus, run.share(job)):
                run.notes.append(self.note(job.key, UNLISTED_NOTE))
                continue
            current = rank_sets(node, job.gpus, len(job.gpus), run.search.node_cells(job.node))[0]
            f_now = current.factor(s.sensitivity)
            candidate = run.search.best_for(job)
            if candidate is None or candidate.factor(s.sensitivity) >= f_now:
                if worst_rank(current) <= run.search.floor(job.node, len(job.gpus)):
                    continue  # nothing better exists, even by moving small jobs away
                options.append((0.0, job, current, None))
                continue
            gain = link_gain(run.share(job), current, candidate, s.sensitivity).gain
            options.append((gain, job, current, candidate))
        return options

    def _replace_one(
        self, run: _Run, job: WorkloadModel, current: Placement, first_choice: Placement | None
    ) -> None:
        """Decide for one job: a defragmentation when it nets more than a plain move, else
        the plain move when it beats the checkpoint-restore cost, else a note.
        """
        s = self.settings
        f_now = current.factor(s.sensitivity)
        best = first_choice

        def now_of(pending: PendingWorkload) -> float:
            return self._start_now(run, pending, job)

        if first_choice is not None and run.taken & set(
            gpu_claims(first_choice.node, first_choice.gpus)
        ):
            best = run.search.best_for(job, run.taken)
        if best is not None and best.factor(s.sensitivity) >= f_now:
            best = None
        link: LinkGain | None = None
        if best is not None:
            link = link_gain(run.share(job), current, best, s.sensitivity)
            link = link.with_locality(*self._unpinned(run, job, best))
        saved = s.remaining_seconds * max(0.0, 1.0 - link.ratio) if link is not None else 0.0
        must_beat = min(worst_rank(current), worst_rank(best))
        if must_beat > run.search.floor(job.node, len(job.gpus)):
            plan = self._plan(run, len(job.gpus), job, must_beat)
            if plan is not None and self._tier_only(current, plan.target):
                if best is None:
                    run.notes.append(self._tier_note(job, current, plan.target, "freeing"))
                plan = None
            if plan is not None:
                moved = link_gain(run.share(job), current, plan.target, s.sensitivity)
                away = [m.workload for m in plan.moves]
                moved = moved.with_locality(*self._unpinned(run, job, plan.target, away))
                value = self._value(plan, f_now, f_now, own_cost=True, link=moved)
                plan_start = run.start_after(job, plan.target, plan.claims(), s.sensitivity, now_of)
                plain_net = saved - s.checkpoint_restore_seconds if best else None
                if plain_net is not None and best is not None:
                    start = run.start_after(job, best, [], s.sensitivity, now_of)
                    plain_net += self._start_seconds(start)
                if value.net_seconds > 0 and (
                    plain_net is None
                    or value.net_seconds + self._start_seconds(plan_start) > plain_net
                ):
                    rec = defrag_recommendation(
                        run.model,
                        job,
                        current,
                        plan,
                        value,
                        run.terms,
                        estimate=moved.source,
                        start=plan_start,
                    )
                    moved_keys = (m.workload.key for m in plan.moves)
                    run.take(rec, plan.claims(), job.key, *moved_keys, start=plan_start)
                    return
                if best is None:
                    run.notes.append(self._defrag_note(job.key, plan, value))
        if best is None or link is None:
            return
        if self._tier_only(current, best):
            run.notes.append(self._tier_note(job, current, best, "moving to"))
            return
        if saved <= s.checkpoint_restore_seconds:
            run.notes.append(
                self.note(
                    job.key,
                    f"moving to {best.node} GPUs {list(best.gpus)} would save {saved:.0f}s "
                    f"of {s.remaining_seconds:.0f}s, less than the checkpoint-restore "
                    f"cost {s.checkpoint_restore_seconds:.0f}s",
                )
            )
            return
        start = run.start_after(job, best, [], s.sensitivity, now_of)
        rec = move_recommendation(
            run.model,
            job,
            current,
            best,
            run.terms,
            gain=link.gain,
            saved=saved,
            model_text=link.text,
            estimate=link.source,
            start=start,
        )
        run.take(rec, gpu_claims(best.node, best.gpus), job.key, start=start)

    def _start_now(self, run: _Run, pending: PendingWorkload, mover: WorkloadModel) -> float:
        """``pending``'s efficiency where it starts this round unless ``mover`` moves: on its
        best free set, or on the set the pending phase would free for it by moving small jobs
        other than ``mover`` (:meth:`_place_pending`'s plan, when it pays); 0 when neither.
        """
        s, count = self.settings, pending.gpus_requested
        taken = run.taken - set(run.reserved.get(pending.name, []))
        plain = run.search.free_best(count, taken)
        best = start_value(run.search, count, plain, s.sensitivity) if plain is not None else 0.0
        must_beat = worst_rank(plain)
        if count < s.min_gpus or must_beat <= run.search.floor_any(count):
            return best
        plan = best_plan(
            run.search,
            count,
            None,
            taken=run.taken,
            moved=run.moved | set(run.stay) | {mover.key},
            must_beat=must_beat,
            sensitivity=s.sensitivity,
        )
        if plan is None:
            return best
        value = self._pending_value(run, plan, plain, count, taken)
        if value.net_seconds <= 0:
            return best
        return max(best, start_value(run.search, count, plan.target, s.sensitivity))

    def _start_seconds(self, start: EnabledStart | None) -> float:
        """What a pending job's start is worth in seconds of the remaining run time."""
        return self.settings.remaining_seconds * start.value if start is not None else 0.0

    def _unpinned(
        self,
        run: _Run,
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
            run.model, target.node, target.gpus, run.terms.pin, job, {}, away or []
        )
        if pin.cpus:
            return 1.0, ""
        return unpinned_loss(run.model, job, target.node, target.gpus)

    def _tier_only(self, current: Placement, target: Placement) -> bool:
        """Whether a move of a running job from ``current`` to ``target`` is held back as
        one between PCIe paths of a socket (a plain move and a defragmentation alike): not
        when ``move_between_pcie_tiers`` is set, nor when both sets' prices are measured
        (``--p2p-bandwidth``), which says on this machine which path is faster.
        """
        if self.settings.move_between_pcie_tiers or not pcie_tier_move(current, target):
            return False
        return not (current.price.source == MEASURED and target.price.source == MEASURED)

    def _tier_note(
        self, job: WorkloadModel, current: Placement, target: Placement, how: str
    ) -> Note:
        return self.note(
            job.key,
            f"{how} {target.node} GPUs {list(target.gpus)} only changes its worst link from "
            f"{current.worst_link} to {target.worst_link}, a gap that varies by platform and "
            "can be a loss; measure both pairs (--p2p-bandwidth) or set "
            "move_between_pcie_tiers to move it",
        )

    # phase 2b: jobs of one node trading GPUs -------------------------------------------------
    def _exchange(self, run: _Run, jobs: list[WorkloadModel]) -> None:
        """Let two jobs of one node that no move so far touched trade GPUs when one gains
        and the other loses nothing, both moved at once
        (:mod:`~toposcope.advisor.policies.job_exchange`).
        """
        s = self.settings
        terms = ExchangeTerms(
            s.remaining_seconds,
            s.checkpoint_restore_seconds,
            s.sensitivity,
            s.pin_to_gpu_numa,
            s.min_utilization,
        )

        def estimate(job: WorkloadModel, current: Placement, target: Placement) -> LinkGain:
            return link_gain(run.share(job), current, target, s.sensitivity)

        movable = [j for j in jobs if j.key not in run.moved]
        found = exchanges(
            run.model, movable, run.taken, terms, estimate, self._tier_only, run.search.node_cells
        )
        for exchange in found:
            rec = exchange_recommendation(run.model, self.name, exchange, terms)
            run.take(rec, exchange.claims(), exchange.first.job.key, exchange.second.job.key)

    # phase 3: pending jobs on sets freed by moving small jobs ------------------------------
    def _place_pending(self, run: _Run, pending: PendingWorkload) -> None:
        """Place a pending job on a set freed by moving small jobs, when no free set is as
        good and the gain beats the moved jobs' cost (else a note, or nothing to say).
        """
        s = self.settings
        count = pending.gpus_requested
        run.taken.difference_update(run.reserved.pop(pending.name, []))
        if count < s.min_gpus or pending.name in run.served:
            return  # too small, or starts on the GPUs a move of this run leaves
        plain = run.search.free_best(count, run.taken)
        must_beat = worst_rank(plain)
        if must_beat <= run.search.floor_any(count):
            return
        plan = self._plan(run, count, None, must_beat)
        if plan is None:
            return
        value = self._pending_value(run, plan, plain, count, run.taken)
        if value.net_seconds <= 0:
            run.notes.append(self._defrag_note(f"pending/{pending.name}", plan, value))
            return
        rec = defrag_recommendation(
            run.model, None, plain, plan, value, run.terms, pending=pending.name
        )
        run.take(rec, plan.claims(), *(m.workload.key for m in plan.moves))

    # defragmentation plans and their worth, in this run's terms ----------------------------
    def _plan(
        self, run: _Run, count: int, job: WorkloadModel | None, must_beat: int
    ) -> DefragPlan | None:
        return best_plan(
            run.search,
            count,
            job,
            taken=run.taken,
            moved=run.moved | set(run.stay),
            must_beat=must_beat,
            sensitivity=self.settings.sensitivity,
        )

    def _pending_value(
        self,
        run: _Run,
        plan: DefragPlan,
        plain: Placement | None,
        count: int,
        taken: Iterable[str],
    ) -> DefragValue:
        """A pending job's defragmentation ``plan`` against its best free set ``plain`` and
        the first set that fits it among the GPUs not ``taken`` (no cost of its own: it waits).
        """
        s = self.settings
        baseline = first_fit(run.model, count, taken)
        return self._value(
            plan,
            plain.factor(s.sensitivity) if plain is not None else None,
            baseline.factor(s.sensitivity) if baseline is not None else None,
            own_cost=False,
        )

    def _value(
        self,
        plan: DefragPlan,
        f_now: float | None,
        f_base: float | None,
        *,
        own_cost: bool,
        link: LinkGain | None = None,
    ) -> DefragValue:
        """The plan's worth; a running large job's ``link`` gain replaces the prices' ratio
        for it when it rests on measured traffic.
        """
        s = self.settings
        measured = None
        if link is not None and (link.source == MEASURED or link.locality != 1.0):
            measured = (link.ratio, link.text)
        return plan_value(
            plan,
            f_now,
            f_base,
            own_cost=own_cost,
            cost=s.checkpoint_restore_seconds,
            remaining=s.remaining_seconds,
            sensitivity=s.sensitivity,
            measured=measured,
        )

    def _defrag_note(self, target: str, plan: DefragPlan, value: DefragValue) -> Note:
        names = ", ".join(m.workload.name for m in plan.moves)
        return self.note(
            target,
            f"freeing {plan.target.node} GPUs {list(plan.target.gpus)} by moving {names} "
            f"would save {value.net_seconds:.0f}s net of the checkpoint-restore cost of "
            f"every job moved: not worth it",
        )
