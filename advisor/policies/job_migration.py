"""job-migration: move a running multi-GPU job to a better-connected GPU set.

Rule. A running job holding at least ``min_gpus`` GPUs, busy (mean utilization at least
``min_utilization``), whose GPU set's worst link is worse than the best set it could get is
moved there, by checkpoint and restore, when the time it saves over its expected remaining
run time beats the checkpoint-restore cost. Candidate sets are ranked exactly like
gpu-placement's (worst link, link sum, fragmentation); they come from the job's own GPUs plus
the free ones on its node, and, with ``allow_cross_node``, from the free GPUs of other nodes.
Jobs with the highest gain per GPU choose first
(:func:`~toposcope.advisor.policies.job_replace.choice_order`); GPUs chosen for one job are
not offered to the next. Where the sets several jobs would choose alone share GPUs, or share
them with the set gpu-placement would start a pending job on, the sets are chosen
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

Where it lives. This module holds the policy and the order of its phases; they share one
:class:`~toposcope.advisor.policies.migration_run.MigrationRun` and are, in order:
:mod:`~toposcope.advisor.policies.joint_choice` (sets chosen jointly),
:mod:`~toposcope.advisor.policies.shared_gpus` (separating), :mod:`~toposcope.advisor.
policies.job_replace` (re-placing, exchanges) and :mod:`~toposcope.advisor.policies.
defrag_values` (pending jobs on freed sets, and what a defragmentation is worth). The
settings are in :mod:`~toposcope.advisor.policies.migration_settings`, the rule for moves
between PCIe paths in :mod:`~toposcope.advisor.policies.pcie_tiers`.
"""

from __future__ import annotations

from toposcope.advisor.gpu_search import GpuSetSearch
from toposcope.advisor.idleness import IdleRule
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.policies.base import Evaluation, Policy
from toposcope.advisor.policies.defrag_values import place_pending
from toposcope.advisor.policies.job_replace import exchange_gpus, move_options, replace
from toposcope.advisor.policies.joint_choice import choose_jointly
from toposcope.advisor.policies.migration_recommendations import MigrationTerms
from toposcope.advisor.policies.migration_run import MigrationRun
from toposcope.advisor.policies.migration_settings import JobMigrationSettings
from toposcope.advisor.policies.nic_moves import multi_node_jobs
from toposcope.advisor.policies.shared_gpus import separate, shared_gpus
from toposcope.catalogue import spec

__all__ = ["JobMigration", "JobMigrationSettings"]


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
        search = GpuSetSearch(model, cross_node=s.allow_cross_node)
        run = MigrationRun(model, search, terms, s)
        missing = self.missing_note(model)
        if missing:
            run.notes.append(missing)
        self._hold(run)
        for key in sorted({m.workload.key for m in movers} | {j.key for j in jobs}):
            if key in run.stay:
                run.notes.append(self.note(key, run.stay[key]))
        movers = [m for m in movers if m.workload.key not in run.stay]
        jobs = [j for j in jobs if j.key not in run.stay]
        options = move_options(run, jobs)
        choose_jointly(run, movers, options)
        separate(run, movers)
        replace(run, options)
        exchange_gpus(run, jobs)
        for pending in sorted(model.pending, key=lambda j: (-j.gpus_requested, j.name)):
            place_pending(run, pending)
        return Evaluation(tuple(run.recs), tuple(run.notes))

    def _hold(self, run: MigrationRun) -> None:
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
