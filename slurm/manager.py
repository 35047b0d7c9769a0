"""Slurm as a resource-manager backend: ``--resource-manager slurm``.

:class:`SlurmResourceManager` reads nodes and jobs through the reader
(:mod:`toposcope.slurm.reader`: slurmrestd, else the commands) and changes jobs through
:class:`~toposcope.slurm.control.SlurmControl`. Checking, the repeat rule (the same
``request_id`` changes Slurm once) and the action states are the contract's
(:class:`~toposcope.rm.base.BaseResourceManager`). What each action does:

* ``place`` steers a **pending** job to a node: its ``ReqNodeList`` becomes that node
  (slurmrestd's ``nodelist``). The action succeeds once Slurm took the change; Slurm starts
  the job there when the node has room, and picks the GPUs and CPUs itself (gres.conf
  ``Cores=``), so a request's ``gpus``/``cpus`` are not passed on. Refused (409) for a job that
  is no longer pending (it started or ended between plan and apply), that already asks for
  nodes (its own ``--nodelist``, or an earlier placement: undoing a placement then restores
  an empty node list, as it was), that excludes the node or whose partition lacks it, and
  for a node Slurm starts no job on (down, drained).
* ``migrate`` moves a **running** job that opted in (:mod:`~toposcope.slurm.apply_options`):
  see :mod:`~toposcope.slurm.migration`. Refused for a job that did not.
* ``release`` with GPUs gives back the idle GPUs of a running job by the operator's
  configured action (a lower time limit or a signal); refused as not configured otherwise.
* ``unplace`` undoes a placement (the advisor's revert of a ``place``): the pending job's
  ``ReqNodeList`` is cleared again. A job that already started cannot be un-placed (409). A
  ``release`` *without* GPUs does the same, as it did before the contract had ``unplace``.
* ``pin`` and ``migrate-memory`` are refused (400) with advice: Slurm does not change a
  running job's binding.

A migration cannot be undone: reverting one moves the job back, with another requeue (and
another restart), within the same limits. A release cannot be undone either.
"""

from __future__ import annotations

import argparse
import itertools
import os

from toposcope.rm import (
    ActionKind,
    ActionRequest,
    ActionState,
    ActionStatus,
    Allocation,
    BaseResourceManager,
    NodeView,
    ResourceManagerError,
    WorkloadView,
)
from toposcope.slurm.apply_options import ApplySettings, apply_settings_from_args
from toposcope.slurm.control import SlurmControl
from toposcope.slurm.migration import Migrations
from toposcope.slurm.reader import CommandReader, RestReader, SlurmReader
from toposcope.slurm.records import ClusterState, PendingJob, RunningJob
from toposcope.slurm.refusals import change_job, no_longer, slurm_errors, usable_target
from toposcope.slurm.settings import open_commands, open_rest_client, settings_from_args
from toposcope.slurm.views import (
    allocation_of,
    job_id_of,
    node_view,
    pending_view,
    running_view,
)

#: why pins and memory migrations are refused, and what to do instead
BINDING_ADVICE = (
    "Slurm does not change a running job's CPU or memory binding. Submit the job's next run "
    "with --cpu-bind=cores --mem-bind=local --gres-flags=enforce-binding so that Slurm binds "
    "its tasks and memory next to its GPUs (gres.conf Cores=); meanwhile the node agent "
    "(--resource-manager agent) may re-pin its threads and memory within the CPUs Slurm "
    "allocated to it"
)


class SlurmResourceManager(BaseResourceManager):
    """The resource-manager contract over one Slurm cluster (see the module docstring)."""

    def __init__(
        self,
        reader: SlurmReader,
        control: SlurmControl,
        settings: ApplySettings | None = None,
    ) -> None:
        super().__init__()
        self.reader = reader
        self.control = control
        self.settings = settings or ApplySettings()
        self._ids = itertools.count(1)
        self.migrations = Migrations(self.read, control, self.settings)

    def read(self) -> ClusterState:
        """The cluster now (Slurm's failures as :class:`ResourceManagerError`)."""
        with slurm_errors(f"reading Slurm from {self.reader.source}"):
            return self.reader.read()

    def nodes(self) -> list[NodeView]:
        """Every node Slurm knows, with its shape and GPUs."""
        return [node_view(node) for node in self.read().nodes]

    def workloads(self) -> list[WorkloadView]:
        """Running jobs with their allocation, then pending jobs with their GPU request."""
        state = self.read()
        return [*map(running_view, state.running), *map(pending_view, state.pending)]

    def _new_id(self) -> str:
        return f"slurm-{next(self._ids):06d}"

    def _carry_out(self, request: ActionRequest) -> ActionState:
        """Do one checked, new request (see the module docstring for each kind)."""
        kind = ActionKind(request.kind)
        if kind in (ActionKind.PIN, ActionKind.MIGRATE_MEMORY):
            raise ResourceManagerError(f"{kind.value} is refused: {BINDING_ADVICE}", 400, "kind")
        job_id = job_id_of(request.workload)
        state = self.read()
        if kind is ActionKind.PLACE:
            return self._place(request, job_id, state)
        if kind is ActionKind.MIGRATE:
            self._check_migration_room()
            return self.migrations.start(self._new_id(), request, job_id, state)
        if request.gpus:
            return self._release_idle(request, job_id, state)
        return self._unplace_job(request, job_id, state)

    def _current(self, state: ActionState) -> ActionState:
        """A migration stays ``running`` until Slurm runs the job on its target node."""
        return self.migrations.progress(state)

    def _check_migration_room(self) -> None:
        most = self.settings.max_migrations
        moving = [
            s.request.workload
            for s in self.recorded()
            if s.request.kind == ActionKind.MIGRATE
            and s.status is ActionStatus.RUNNING
            and self.action(s.id).status is ActionStatus.RUNNING
        ]
        if len(moving) >= most:
            why = (
                "migrations are turned off (--slurm-max-migrations 0)"
                if most == 0
                else f"{len(moving)} of at most {most} migrations are under way "
                f"({', '.join(moving)}); try again once they run on their new nodes "
                "(--slurm-max-migrations raises the limit)"
            )
            raise ResourceManagerError(f"migrate refused: {why}", 409, "kind")

    # -- place and its undoing ---------------------------------------------------------------

    def _place(self, request: ActionRequest, job_id: int, state: ClusterState) -> ActionState:
        job = state.job(job_id)
        if not isinstance(job, PendingJob):
            raise no_longer(job_id, state, "pending", "place")
        node = request.node or ""
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
        change_job(
            job_id,
            "place",
            "pending",
            lambda: self.control.set_required_nodes(job_id, [node]),
            self.read,
        )
        return ActionState(
            self._new_id(), request, ActionStatus.SUCCEEDED, before=None, after=Allocation(node)
        )

    def _unplace(self, request: ActionRequest) -> ActionState:
        """Undo a placement: clear the pending job's node list (see the module docstring)."""
        return self._unplace_job(request, job_id_of(request.workload), self.read())

    def _unplace_job(self, request: ActionRequest, job_id: int, state: ClusterState) -> ActionState:
        """Clear the node list a placement gave the pending job (see the module docstring)."""
        job = state.job(job_id)
        node = request.node
        if node is None:
            raise ResourceManagerError(
                "undoing a placement needs the node it placed on",
                400,
                "node",
            )
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
        if job.required_nodes:
            change_job(
                job_id,
                "release",
                "pending",
                lambda: self.control.set_required_nodes(job_id, []),
                self.read,
            )
        return ActionState(
            self._new_id(), request, ActionStatus.SUCCEEDED, before=Allocation(node), after=None
        )

    # -- idle GPUs ---------------------------------------------------------------------------

    def _release_idle(
        self, request: ActionRequest, job_id: int, state: ClusterState
    ) -> ActionState:
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
            raise ResourceManagerError(
                f"releasing job {job_id}'s idle GPUs is not configured: Slurm cannot take GPUs "
                "from a running job; choose what to do to it with --slurm-idle-action "
                "timelimit=MINUTES (let it run at most MINUTES more) or signal=NAME (a signal "
                "it handles)",
                409,
                "kind",
            )
        with slurm_errors(f"release job {job_id} ({action.describe()})"):
            if action.minutes is not None:
                limit = shorter_limit(job, action.minutes, state.read_at)
                if limit is not None:
                    self.control.set_time_limit(job_id, limit)
            else:
                assert action.signal is not None
                self.control.send_signal(job_id, action.signal)
        return ActionState(self._new_id(), request, ActionStatus.SUCCEEDED, before=held, after=held)


def shorter_limit(job: RunningJob, minutes: int, now: float) -> int | None:
    """The time limit, in whole minutes, that ends ``job`` at most ``minutes`` after ``now``;
    ``None`` when its own limit ends it no later (a limit is lowered, never raised).
    """
    elapsed_s = max(0, int(now - job.start_time))
    limit = -(-elapsed_s // 60) + minutes
    if job.time_limit_s is not None and limit * 60 >= job.time_limit_s:
        return None
    return limit


def slurm_resource_manager(**options: object) -> SlurmResourceManager:
    """The backend the ``--slurm-*`` options describe (the entry point the advisor loads).

    ``options`` are the parsed options by destination (``slurm_url``, ``slurm_idle_action``,
    ``allow_insecure_token_file``...); the environment fills what they leave out
    (:mod:`toposcope.slurm.settings`). Raises :class:`~toposcope.errors.ConfigError` or
    :class:`~toposcope.errors.UsageError` for a bad setting; Slurm is not asked yet.
    """
    args = argparse.Namespace(**options)
    settings = settings_from_args(args, os.environ)
    limits = apply_settings_from_args(args)
    client = open_rest_client(settings)
    commands = open_commands(settings)
    reader: SlurmReader = RestReader(client) if client is not None else CommandReader(commands)
    return SlurmResourceManager(reader, SlurmControl(commands, client), limits)
