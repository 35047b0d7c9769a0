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

from toposcope.report.recommendation import Recommendation, RecommendationKind
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
from toposcope.rm.plan import Plan, PlanHints, refused
from toposcope.slurm.apply_options import ApplySettings, apply_settings_from_args
from toposcope.slurm.control import SlurmControl
from toposcope.slurm.errors import SlurmError
from toposcope.slurm.fabric_steer import steer_plan, steps_for
from toposcope.slurm.migration import Migrations
from toposcope.slurm.plans import BINDING_ADVICE, SlurmPlanner, shorter_limit
from toposcope.slurm.reader import CommandReader, RestReader, SlurmReader
from toposcope.slurm.records import ClusterState, RunningJob
from toposcope.slurm.refusals import change_job, slurm_errors
from toposcope.slurm.settings import open_commands, open_rest_client, settings_from_args
from toposcope.slurm.views import (
    allocation_of,
    job_id_of,
    node_view,
    pending_view,
    running_view,
)

__all__ = ["BINDING_ADVICE", "SlurmResourceManager", "shorter_limit", "slurm_resource_manager"]


class SlurmResourceManager(BaseResourceManager):
    """The resource-manager contract over one Slurm cluster (see the module docstring)."""

    #: the fabric-placement kinds :meth:`steer_fabric` carries out: a pending job steered,
    #: a running one that opted in requeued onto the chosen nodes
    fabric_kinds = (RecommendationKind.PLACE, RecommendationKind.MIGRATE_JOB)

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
        self.planner = SlurmPlanner(self.read, control, self.settings)

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

    def plan(self, request: ActionRequest, hints: PlanHints | None = None) -> Plan:
        """What :meth:`apply` would do for ``request`` now (a refusal as ``Plan.refused``;
        made from the action alone when Slurm cannot be read): see :mod:`~toposcope.slurm.plans`.
        """
        return self.planner.plan(request, hints)

    def _carry_out(self, request: ActionRequest) -> ActionState:
        """Plan one checked, new request against the cluster as it is now, then carry out
        exactly the plan's steps (see the module docstring for each kind).
        """
        kind = ActionKind(request.kind)
        if kind in (ActionKind.PIN, ActionKind.MIGRATE_MEMORY):
            raise ResourceManagerError(f"{kind.value} is refused: {BINDING_ADVICE}", 400, "kind")
        job_id = job_id_of(request.workload)
        state = self.read()
        if kind is ActionKind.MIGRATE:
            self._check_migration_room()
        plan = self.planner.checked_plan(request, job_id, state)
        if kind is ActionKind.MIGRATE:
            job = state.job(job_id)
            assert isinstance(job, RunningJob)  # checked by the plan
            return self.migrations.start(self._new_id(), request, job, plan.steps)
        if kind is ActionKind.PLACE:
            self._change(job_id, "place", "pending", plan)
            after = Allocation(request.node or "")
            return ActionState(self._new_id(), request, ActionStatus.SUCCEEDED, after=after)
        if request.gpus and kind is ActionKind.RELEASE:
            job = state.job(job_id)
            assert isinstance(job, RunningJob)  # checked by the plan
            held = allocation_of(job, request.node)
            action = self.settings.idle_action
            with slurm_errors(f"release job {job_id} ({action.describe() if action else ''})"):
                for step in plan.steps:
                    self.control.run(step)
            return ActionState(
                self._new_id(), request, ActionStatus.SUCCEEDED, before=held, after=held
            )
        return self._unplaced(request, job_id, plan)

    def _change(self, job_id: int, kind: str, wanted: str, plan: Plan) -> None:
        def run() -> None:
            for step in plan.steps:
                self.control.run(step)

        if plan.steps:
            change_job(job_id, kind, wanted, run, self.read)

    def _unplaced(self, request: ActionRequest, job_id: int, plan: Plan) -> ActionState:
        self._change(job_id, "release", "pending", plan)
        before = Allocation(request.node or "")
        return ActionState(self._new_id(), request, ActionStatus.SUCCEEDED, before=before)

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

    def plan_fabric(self, recommendation: Recommendation) -> Plan:
        """What :meth:`steer_fabric` would do now (``advise --dry-run``): the plan against
        the cluster as read or, when Slurm cannot be read, the steps from the recommendation
        alone, saying what was not checked; a refusal is the plan's ``refused``.
        """
        nodes = [str(n) for n in recommendation.proposed.get("nodes") or []]
        request = ActionRequest(
            f"{recommendation.id}-0",
            ActionKind.PLACE,
            recommendation.target.workload or "",
            nodes[0] if nodes else None,
            reason=recommendation.summary,
        )
        try:
            if not self.planner.unreachable:
                try:
                    state = self.read()
                except ResourceManagerError as exc:
                    first = (str(exc).splitlines() or [""])[0]
                    self.planner.unreachable = f"Slurm could not be read ({first})"
                else:
                    return steer_plan(recommendation, state)
            unknown = (
                f"whether the job is still pending and asks for no node list of its own, and "
                f"whether nodes {','.join(nodes) or '(none)'} take its partition's jobs: "
                f"{self.planner.unreachable}",
            )
            return Plan(request, "slurm", steps_for(recommendation), unknown=unknown)
        except (ResourceManagerError, SlurmError) as exc:
            return refused(request, "slurm", str(exc))

    def steer_fabric(self, recommendation: Recommendation) -> ActionState:
        """Apply a fabric-placement recommendation: the plan of
        :func:`~toposcope.slurm.fabric_steer.steer_plan` against the cluster now, carried out.
        A pending job is steered (``ReqNodeList``, ``Switches=N@T``: ``succeeded``); a running
        one that opted in is requeued held, steered and released, as a migration (``running``
        until Slurm restarts it). A refusal is a :class:`ResourceManagerError`.
        """
        state = self.read()
        plan = steer_plan(recommendation, state)
        job_id = job_id_of(plan.request.workload)
        if plan.request.kind == ActionKind.MIGRATE:
            self._check_migration_room()
            job = state.job(job_id)
            assert isinstance(job, RunningJob)  # checked by the plan
            return self.migrations.start(self._new_id(), plan.request, job, plan.steps)
        self._change(job_id, "place", "pending", plan)
        after = Allocation(plan.request.node or "")
        return ActionState(self._new_id(), plan.request, ActionStatus.SUCCEEDED, after=after)

    def _unplace(self, request: ActionRequest) -> ActionState:
        """Undo a placement: clear the pending job's node list (see the module docstring)."""
        job_id = job_id_of(request.workload)
        plan = self.planner.checked_plan(request, job_id, self.read())
        return self._unplaced(request, job_id, plan)


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
