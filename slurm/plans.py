"""What the Slurm backend will do for an action: its plan (:mod:`toposcope.rm.plan`).

:class:`SlurmPlanner` checks an action against the cluster as read (the job is still
pending or running, the node takes jobs and is in the job's partition, the job opted in to
migration...) and lists the changes :class:`~toposcope.slurm.control.SlurmControl` will
make, in order. The backend (:mod:`~toposcope.slurm.manager`) carries out exactly these
steps; ``advise --dry-run --resource-manager slurm`` prints them. Where Slurm cannot be
read, the plan is made from the action alone and says what it could not check.

A refusal is raised as the contract's :class:`~toposcope.rm.errors.ResourceManagerError` by
:meth:`SlurmPlanner.checked_plan` (what apply uses) and becomes ``Plan.refused`` in
:meth:`SlurmPlanner.plan` (what a dry run uses).
"""

from __future__ import annotations

from collections.abc import Callable

from toposcope.rm import ActionKind, ActionRequest, ResourceManagerError
from toposcope.rm.plan import Plan, PlanHints, Step, WaitStep, refused
from toposcope.slurm.apply_options import MIGRATABLE, ApplySettings
from toposcope.slurm.control import InvalidChangeError, SlurmControl
from toposcope.slurm.migration import check_migration
from toposcope.slurm.records import ClusterState, PendingJob, RunningJob
from toposcope.slurm.refusals import no_longer, usable_target
from toposcope.slurm.views import allocation_of, job_id_of

#: the submission flags that bind a job's tasks and memory next to its GPUs
BINDING_FLAGS = "--cpu-bind=cores --mem-bind=local --gres-flags=enforce-binding"
#: why pins and memory migrations are refused, and what to do instead
BINDING_ADVICE = (
    "Slurm does not change a running job's CPU or memory binding. Submit the job's next run "
    f"with {BINDING_FLAGS} so that Slurm binds its tasks and memory next to its GPUs "
    "(gres.conf Cores=); meanwhile the node agent (--resource-manager agent) may re-pin its "
    "threads and memory within the CPUs Slurm allocated to it"
)


class SlurmPlanner:
    """Plans for one Slurm cluster, read through ``read`` and changed through ``control``."""

    backend = "slurm"

    def __init__(
        self,
        read: Callable[[], ClusterState],
        control: SlurmControl,
        settings: ApplySettings,
    ) -> None:
        self.read = read
        self.control = control
        self.settings = settings
        #: why Slurm could not be read, once a plan found it so (later plans do not retry)
        self.unreachable = ""

    def plan(self, request: ActionRequest, hints: PlanHints | None = None) -> Plan:
        """The plan, a refusal as ``Plan.refused``; made offline when Slurm cannot be read."""
        try:
            job_id = job_id_of(request.workload)
        except ResourceManagerError as exc:
            return refused(request, self.backend, str(exc))
        if request.kind in (ActionKind.PIN, ActionKind.MIGRATE_MEMORY):
            return refused(request, self.backend, BINDING_ADVICE, notes=_binding_notes(job_id))
        if self.unreachable:
            return self._offline(request, job_id, self.unreachable)
        try:
            state = self.read()
        except ResourceManagerError as exc:
            first = (str(exc).splitlines() or [""])[0]
            self.unreachable = f"Slurm could not be read ({first})"
            return self._offline(request, job_id, self.unreachable)
        try:
            return self.checked_plan(request, job_id, state)
        except ResourceManagerError as exc:
            return refused(request, self.backend, str(exc))

    def checked_plan(self, request: ActionRequest, job_id: int, state: ClusterState) -> Plan:
        """The plan for ``request`` against ``state``; a refusal raised (module docstring)."""
        kind = ActionKind(request.kind)
        if kind in (ActionKind.PIN, ActionKind.MIGRATE_MEMORY):
            raise ResourceManagerError(f"{kind.value} is refused: {BINDING_ADVICE}", 400, "kind")
        node = request.node or ""
        try:
            if kind is ActionKind.PLACE:
                return self._place(request, job_id, node, state)
            if kind is ActionKind.MIGRATE:
                job = check_migration(job_id, node, state)
                checked = (
                    f"job {job_id} runs on {','.join(job.nodes)}, opted in ({MIGRATABLE}) and "
                    f"may be requeued; node {node} takes jobs of partition {job.partition}",
                )
                return Plan(request, self.backend, self.migration_steps(job_id, node), checked)
            if request.gpus and kind is ActionKind.RELEASE:
                return self._release(request, job_id, state)
            return self._unplace(request, job_id, state)
        except InvalidChangeError as exc:
            raise ResourceManagerError(str(exc), 422) from None

    # -- each kind ---------------------------------------------------------------------------

    def _place(self, request: ActionRequest, job_id: int, node: str, state: ClusterState) -> Plan:
        job = state.job(job_id)
        if not isinstance(job, PendingJob):
            raise no_longer(job_id, state, "pending", "place")
        usable_target(state, node, job_id, job.partition)
        if job.required_nodes:
            raise ResourceManagerError(
                f"job {job_id} already asks for nodes {','.join(job.required_nodes)} (its own "
                "--nodelist, or an earlier placement): toposcope steers only jobs without a "
                "node list, so that undoing a placement restores the job as it was",
                409,
                "node",
            )
        if node in job.excluded_nodes:
            raise ResourceManagerError(f"job {job_id} excludes node {node}", 409, "node")
        checked = (
            f"job {job_id} is pending and asks for no node; node {node} takes jobs of "
            f"partition {job.partition}",
        )
        steps = (self.control.required_nodes_step(job_id, [node]),)
        return Plan(request, self.backend, steps, checked, notes=_place_notes(job_id))

    def _unplace(self, request: ActionRequest, job_id: int, state: ClusterState) -> Plan:
        job = state.job(job_id)
        node = request.node
        if node is None:
            raise ResourceManagerError("undoing a placement needs the node it placed on", 400)
        if isinstance(job, RunningJob):
            raise ResourceManagerError(
                f"job {job_id} already started on {','.join(job.nodes)}: a started job cannot "
                "be un-placed (cancel or requeue it to run it elsewhere)",
                409,
                "workload",
            )
        if not isinstance(job, PendingJob):
            raise no_longer(job_id, state, "pending", "release")
        if job.required_nodes and job.required_nodes != (node,):
            raise ResourceManagerError(
                f"job {job_id} asks for nodes {','.join(job.required_nodes)}, not for {node} "
                "alone: that is not the placement to undo; left as it is",
                409,
                "node",
            )
        steps = (self.control.required_nodes_step(job_id, []),) if job.required_nodes else ()
        checked = (
            f"job {job_id} is pending and asks for {','.join(job.required_nodes) or 'no node'}",
        )
        return Plan(request, self.backend, steps, checked)

    def _release(self, request: ActionRequest, job_id: int, state: ClusterState) -> Plan:
        job = state.job(job_id)
        if not isinstance(job, RunningJob):
            raise no_longer(job_id, state, "running", "release")
        held = allocation_of(job, request.node)
        if not set(request.gpus) <= set(held.gpus):
            raise ResourceManagerError(
                f"job {job_id} holds GPUs {held.gpus} on {held.node}, not {sorted(request.gpus)}"
                " (the plan is out of date)",
                409,
                "gpus",
            )
        action = self.settings.idle_action
        if action is None:
            raise ResourceManagerError(_not_configured(job_id), 409, "kind")
        checked = (f"job {job_id} runs and holds GPUs {held.gpus} on {held.node}",)
        steps: tuple[Step, ...]
        if action.minutes is not None:
            limit = shorter_limit(job, action.minutes, state.read_at)
            steps = () if limit is None else (self.control.time_limit_step(job_id, limit),)
        else:
            assert action.signal is not None
            steps = (self.control.signal_step(job_id, action.signal),)
        return Plan(request, self.backend, steps, checked)

    def migration_steps(self, job_id: int, node: str) -> tuple[Step, ...]:
        """Requeue held, wait until the job has ended, steer it, release it (see
        :mod:`~toposcope.slurm.migration`).
        """
        ended = f'test -z "$(squeue -h -j {job_id} -t RUNNING,COMPLETING -o %i)"'
        return (
            self.control.requeue_hold_step(job_id),
            WaitStep(
                f"job {job_id} has left COMPLETING",
                self.settings.requeue_wait_s,
                ("sh", "-c", ended),
            ),
            self.control.restart_on_step(job_id, node),
            self.control.release_step(job_id),
        )

    # -- without Slurm -----------------------------------------------------------------------

    def _offline(self, request: ActionRequest, job_id: int, why: str) -> Plan:
        """The plan from the action alone, saying what was not checked (``why``)."""
        kind = ActionKind(request.kind)
        node = request.node or ""
        try:
            if kind is ActionKind.PLACE:
                steps = (self.control.required_nodes_step(job_id, [node]),)
                unknown = (
                    f"whether job {job_id} is still pending and asks for no node, and whether "
                    f"node {node} takes its jobs: {why}",
                )
                return Plan(
                    request, self.backend, steps, unknown=unknown, notes=_place_notes(job_id)
                )
            if kind is ActionKind.MIGRATE:
                unknown = (
                    f"whether job {job_id} still runs, opted in ({MIGRATABLE}) and may be "
                    f"requeued, and whether node {node} takes its jobs: {why}",
                )
                return Plan(
                    request, self.backend, self.migration_steps(job_id, node), unknown=unknown
                )
            if not request.gpus or kind is ActionKind.UNPLACE:
                steps = (self.control.required_nodes_step(job_id, []),)
                unknown = (f"whether job {job_id} is pending and was placed on {node}: {why}",)
                return Plan(request, self.backend, steps, unknown=unknown)
            action = self.settings.idle_action
            if action is None:
                return refused(request, self.backend, _not_configured(job_id))
            if action.signal is not None:
                unknown = (f"whether job {job_id} still runs and holds GPUs {request.gpus}: {why}",)
                steps = (self.control.signal_step(job_id, action.signal),)
                return Plan(request, self.backend, steps, unknown=unknown)
            return refused(
                request,
                self.backend,
                f"the new time limit of job {job_id} is its run time so far plus "
                f"{action.minutes} minutes, and its run time was not read: {why}",
            )
        except InvalidChangeError as exc:
            return refused(request, self.backend, str(exc))


def _not_configured(job_id: int) -> str:
    return (
        f"releasing job {job_id}'s idle GPUs is not configured: Slurm cannot take GPUs "
        "from a running job; choose what to do to it with --slurm-idle-action "
        "timelimit=MINUTES (let it run at most MINUTES more) or signal=NAME (a signal "
        "it handles)"
    )


def _place_notes(job_id: int) -> tuple[str, ...]:
    return (
        f"Slurm picks job {job_id}'s GPUs and CPUs on the node (gres.conf Cores=); submit it "
        f"with {BINDING_FLAGS} so they are next to each other",
    )


def _binding_notes(job_id: int) -> tuple[str, ...]:
    return (f"submission flags for job {job_id}'s next run: sbatch {BINDING_FLAGS} ...",)


def shorter_limit(job: RunningJob, minutes: int, now: float) -> int | None:
    """The time limit, in whole minutes, that ends ``job`` at most ``minutes`` after ``now``;
    ``None`` when its own limit ends it no later (a limit is lowered, never raised).
    """
    elapsed_s = max(0, int(now - job.start_time))
    limit = -(-elapsed_s // 60) + minutes
    if job.time_limit_s is not None and limit * 60 >= job.time_limit_s:
        return None
    return limit


__all__ = ["BINDING_ADVICE", "BINDING_FLAGS", "SlurmPlanner", "shorter_limit"]
