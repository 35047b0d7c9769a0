"""Moving a running job to another node through Slurm: requeue, steer, release, then watch.

Slurm cannot move a running job; it can end it and run it again. So a migration is, for a
job that opted in (:func:`~toposcope.slurm.apply_options.opted_in`: it checkpoints and
resumes from its checkpoint, and Slurm may requeue it):

1. ``scontrol requeuehold JOB``: Slurm ends the job (SIGTERM, then SIGKILL after its
   ``KillWait``) and puts it back in the queue, held;
2. once the job has left ``COMPLETING`` (bounded by ``requeue_wait_s``), ``scontrol update
   JobId=JOB ReqNodeList=NODE StartTime=now`` (earlier, the end of the requeue would set the
   start time later again);
3. ``scontrol release JOB``: Slurm starts it on NODE when NODE has room.

The action answers ``running`` after step 3 and :meth:`Migrations.progress` follows it:
``succeeded`` once Slurm runs the job on NODE with its restart count raised (the action's
``after`` is its new allocation and ``cost_seconds`` the time from the requeue to the start
time Slurm records for the new run), ``failed`` when it ends or runs elsewhere. If a step after the
requeue fails, the job is released anyway, so that it is never left held, and the action
fails saying so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from toposcope.rm import ActionRequest, ActionState, ActionStatus, ResourceManagerError
from toposcope.rm.plan import Step, WaitStep
from toposcope.slurm.apply_options import MIGRATABLE, ApplySettings, opted_in
from toposcope.slurm.control import SlurmControl
from toposcope.slurm.errors import SlurmError
from toposcope.slurm.records import ClusterState, RunningJob
from toposcope.slurm.refusals import change_job, no_longer, usable_target
from toposcope.slurm.views import allocation_of

#: how often the requeue is checked on while it completes, seconds
POLL_S = 0.2
#: Slurm's states of a job that is still being ended by a requeue
_ENDING = frozenset({"RUNNING", "COMPLETING"})


@dataclass(frozen=True)
class Move:
    """One migration under way: the job, its target, its restart count before, the time
    (Unix seconds) it was requeued.
    """

    job_id: int
    node: str
    restarts: int
    requeued_at: float


def check_migration(job_id: int, node: str, state: ClusterState) -> RunningJob:
    """The job, when it may be moved to ``node``; else the refusal saying why."""
    job = state.job(job_id)
    if not isinstance(job, RunningJob):
        raise no_longer(job_id, state, "running", "migrate")
    usable_target(state, node, job_id, job.partition)
    if job.nodes == (node,):
        raise ResourceManagerError(
            f"job {job_id} already runs on {node}; inside a node Slurm picks the GPUs "
            "(gres.conf Cores=), so a requeue onto the same node is no move",
            409,
            "node",
        )
    if not opted_in(job.comment):
        raise ResourceManagerError(
            f"job {job_id} did not opt in to migration: its comment lacks {MIGRATABLE} "
            f"(a job that checkpoints and resumes is submitted with --comment={MIGRATABLE})",
            409,
            "workload",
        )
    if not job.requeue:
        raise ResourceManagerError(
            f"job {job_id} cannot be requeued (submitted with --no-requeue, or the "
            "cluster has JobRequeue=0 and the job lacks --requeue)",
            409,
            "workload",
        )
    return job


class Migrations:
    """Starts migrations and follows them (see the module docstring).

    ``read`` reads the cluster, ``control`` changes it; ``clock`` gives Unix seconds.
    """

    def __init__(
        self,
        read: Callable[[], ClusterState],
        control: SlurmControl,
        settings: ApplySettings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.read = read
        self.control = control
        self.settings = settings
        self.clock = clock
        self.moves: dict[str, Move] = {}

    def start(
        self,
        action_id: str,
        request: ActionRequest,
        job: RunningJob,
        steps: Sequence[Step],
    ) -> ActionState:
        """Carry out a migration's planned ``steps`` (requeue held, wait, steer, release:
        :meth:`~toposcope.slurm.plans.SlurmPlanner.migration_steps`); the ``running`` action
        (``failed`` when a step after the requeue failed: the job is released anyway).
        """
        requeue, wait, steer, release = steps
        node = request.node or ""
        before = allocation_of(job)
        requeued_at = self.clock()
        change_job(job.job_id, "migrate", "running", lambda: self.control.run(requeue), self.read)
        problems = []
        try:
            limit = wait.timeout_s if isinstance(wait, WaitStep) else self.settings.requeue_wait_s
            self._wait_requeued(job.job_id, limit)
            self.control.run(steer)
        except (SlurmError, ResourceManagerError) as exc:
            problems.append(f"it could not be steered to {node}: {exc}")
        try:
            self.control.run(release)
        except SlurmError as exc:
            problems.append(
                f"it is still held, release it with `scontrol release {job.job_id}`: {exc}"
            )
        if problems:
            error = f"job {job.job_id} was requeued, but " + "; ".join(problems)
            return ActionState(action_id, request, ActionStatus.FAILED, before, error=error)
        self.moves[action_id] = Move(job.job_id, node, job.restarts, requeued_at)
        return ActionState(action_id, request, ActionStatus.RUNNING, before)

    def _wait_requeued(self, job_id: int, wait_s: float) -> None:
        """Wait, at most ``wait_s``, until Slurm has ended the requeued job."""
        deadline = time.monotonic() + wait_s
        while self.read().state_of(job_id) in _ENDING and time.monotonic() < deadline:
            time.sleep(POLL_S)

    def progress(self, state: ActionState) -> ActionState:
        """A running migration as it stands now (see the module docstring)."""
        move = self.moves.get(state.id)
        if move is None or state.status is not ActionStatus.RUNNING:
            return state
        cluster = self.read()
        job = cluster.job(move.job_id)
        if isinstance(job, RunningJob) and job.restarts > move.restarts:
            if move.node not in job.nodes:
                return state.advance(
                    ActionStatus.FAILED,
                    f"Slurm restarted job {move.job_id} on {','.join(job.nodes)}, not {move.node}",
                )
            return replace(
                state.advance(ActionStatus.SUCCEEDED),
                after=allocation_of(job, move.node),
                cost_seconds=max(0.0, job.start_time - move.requeued_at),
            )
        now = cluster.state_of(move.job_id)
        if job is None and now not in _ENDING:
            return state.advance(
                ActionStatus.FAILED,
                f"job {move.job_id} is {(now or 'forgotten by Slurm').lower()}: it ended before "
                f"it was seen running on {move.node}",
            )
        return state
