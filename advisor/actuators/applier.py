"""The one place that acts (descheduler's PodEvictor): limits, dry run, idempotency, audit.

Policies only decide. :class:`Applier` takes a report's recommendations and carries out
their actions through a :class:`~toposcope.resources.ResourceManager`:

* dry run: the calls are handed to the dry-run backend (printed), nothing is recorded;
* limits: at most ``max_per_run`` recommendations per run and ``max_per_node`` per node;
* idempotency: a recommendation whose actions all succeeded before (audit log, by id) is
  skipped, and the resource manager itself ignores repeated request ids;
* audit: intent before each call, result after; :meth:`recover` settles intents a crash
  left without a result by asking the resource manager (``GET /actions/{request_id}``);
* all or nothing per recommendation: when an action fails, the ones of the same
  recommendation already applied are reverted;
* :meth:`revert` undoes a recommendation (or one action) from the recorded before-state.

An action counter by kind and result (:attr:`Applier.counts`) feeds the advisor's
``toposcope_advisor_actions_total``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from toposcope.advisor.actuators.dry_run import DryRunResourceManager
from toposcope.advisor.audit import AuditEntry, AuditLog
from toposcope.advisor.errors import AdvisorConnectionError
from toposcope.advisor.recommendations import Recommendation
from toposcope.errors import ConfigError
from toposcope.resources import (
    ActionKind,
    ActionRequest,
    ActionState,
    ActionStatus,
    Allocation,
    ResourceManager,
    ResourceManagerError,
)

LOG = logging.getLogger("toposcope.advisor.applier")


@dataclass(frozen=True)
class Outcome:
    """What happened to one recommendation (or one revert).

    ``result``: ``applied``, ``dry-run``, ``skipped``, ``failed``, ``unknown`` (the outcome of
    a call could not be learnt; the next run settles it) or ``reverted``.
    """

    recommendation_id: str
    node: str
    result: str
    detail: str = ""
    states: tuple[ActionState, ...] = ()


@dataclass
class _RunState:
    applied: int = 0
    per_node: Counter[str] = field(default_factory=Counter)
    unreachable: str = ""


def _status_result(status: ActionStatus) -> str:
    if status == ActionStatus.SUCCEEDED:
        return "succeeded"
    if status == ActionStatus.FAILED:
        return "failed"
    return "running"


def inverse_request(entry: AuditEntry) -> ActionRequest:
    """The request that undoes a recorded action (:class:`ConfigError` when impossible)."""
    kind = ActionKind(entry.kind)
    before = entry.before
    request_id = f"revert-{entry.request_id}"
    reason = f"revert {entry.request_id}"
    if kind == ActionKind.RELEASE:
        raise ConfigError(
            f"{entry.request_id}: a release cannot be reverted (the GPUs went back to the pool)"
        )
    if kind == ActionKind.PLACE:
        gpus = entry.after.gpus if entry.after else list(entry.request.get("gpus", []))
        return ActionRequest(
            request_id, ActionKind.RELEASE, entry.workload, entry.node, gpus=gpus, reason=reason
        )
    if before is None:
        raise ConfigError(f"{entry.request_id}: no before-state was recorded, cannot revert")
    if kind == ActionKind.PIN:
        return ActionRequest(
            request_id, kind, entry.workload, before.node, before.cpus, before.mems, reason=reason
        )
    if kind == ActionKind.MIGRATE_MEMORY:
        return ActionRequest(
            request_id, kind, entry.workload, before.node, mems=before.mems, reason=reason
        )
    return ActionRequest(
        request_id, ActionKind.MIGRATE, entry.workload, before.node, gpus=before.gpus, reason=reason
    )


class Applier:
    """Carries out recommendations through ``manager`` within limits, logging to ``audit``.

    ``dry_run`` defaults to "the manager is the dry-run backend". ``actor`` is who is
    recorded as having acted (``user@host``), ``backend`` the resource manager's name.
    """

    def __init__(
        self,
        manager: ResourceManager,
        audit: AuditLog | None,
        *,
        actor: str,
        backend: str,
        dry_run: bool | None = None,
        max_per_run: int = 10,
        max_per_node: int = 2,
    ) -> None:
        if max_per_run < 0 or max_per_node < 0:
            raise ConfigError("action limits must be >= 0")
        self.manager = manager
        self.dry_run = isinstance(manager, DryRunResourceManager) if dry_run is None else dry_run
        if audit is None and not self.dry_run:
            raise ConfigError("applying for real needs an audit log (--audit-db)")
        self.audit = audit
        self.actor = actor
        self.backend = backend
        self.max_per_run = max_per_run
        self.max_per_node = max_per_node
        self.counts: Counter[tuple[str, str]] = Counter()

    # crash recovery -----------------------------------------------------------------------
    def recover(self) -> list[AuditEntry]:
        """Settle intents without a final result by asking the resource manager.

        Found: its status is recorded. Unknown to it (404): ``not-applied``. Unreachable:
        left ``unknown`` for the next run. Returns the settled rows as they are now.
        """
        if self.audit is None or self.dry_run:
            return []
        settled = []
        for entry in self.audit.unresolved():
            try:
                state = self.manager.action(entry.request_id)
            except ResourceManagerError as exc:
                if exc.status == 404:
                    self.audit.record_result(entry.request_id, "not-applied", error=str(exc))
                else:
                    self.audit.record_result(entry.request_id, "unknown", error=str(exc))
            except AdvisorConnectionError as exc:
                self.audit.record_result(entry.request_id, "unknown", error=str(exc))
            else:
                self._record(entry.request_id, state)
            LOG.info("recovered intent %s", entry.request_id)
            now = self.audit.entry(entry.request_id)
            if now is not None:
                settled.append(now)
        return settled

    # applying -----------------------------------------------------------------------------
    def apply(self, recommendations: Sequence[Recommendation]) -> list[Outcome]:
        """Apply recommendations in order of gain; one :class:`Outcome` each."""
        self.recover()
        before = self._allocations() if not self.dry_run else {}
        run = _RunState()
        outcomes = []
        for rec in sorted(recommendations, key=lambda r: (-r.estimated_gain, r.id)):
            outcome = self._apply_one(rec, before, run)
            outcomes.append(outcome)
            LOG.info("recommendation %s: %s %s", rec.id, outcome.result, outcome.detail)
        return outcomes

    def _allocations(self) -> dict[tuple[str, str], Allocation]:
        result: dict[tuple[str, str], Allocation] = {}
        for workload in self.manager.workloads():
            if workload.allocation is not None:
                result[(workload.allocation.node, workload.name)] = workload.allocation
        return result

    def _skip_reason(self, rec: Recommendation, run: _RunState) -> str:
        if run.unreachable:
            return f"resource manager unreachable: {run.unreachable}"
        if not rec.actions:
            return "no actions (a change for a person to make)"
        if self.audit is not None:
            entries = {e.request_id: e for e in self.audit.entries(rec.id)}
            mine = [entries.get(a.request_id) for a in rec.actions]
            if any(e is not None and e.reverted_by for e in mine):
                return "reverted earlier; not applied again"
            if all(e is not None and e.result == "succeeded" for e in mine):
                return "already applied"
            failed = [e for e in mine if e is not None and e.result == "failed"]
            if failed:
                return f"failed before ({failed[0].request_id}: {failed[0].error})"
        if run.applied >= self.max_per_run:
            return f"per-run limit of {self.max_per_run} reached"
        if run.per_node[rec.target.node] >= self.max_per_node:
            return f"per-node limit of {self.max_per_node} reached on {rec.target.node}"
        return ""

    def _apply_one(
        self,
        rec: Recommendation,
        allocations: dict[tuple[str, str], Allocation],
        run: _RunState,
    ) -> Outcome:
        node = rec.target.node
        reason = self._skip_reason(rec, run)
        if reason:
            return Outcome(rec.id, node, "skipped", reason)
        run.applied += 1
        run.per_node[node] += 1
        if self.dry_run:
            states = tuple(self.manager.apply(a) for a in rec.actions)
            self.counts[(str(rec.kind), "dry-run")] += 1
            return Outcome(rec.id, node, "dry-run", f"{len(states)} call(s) printed", states)
        assert self.audit is not None
        done: list[ActionState] = []
        for action in rec.actions:
            entry = self.audit.entry(action.request_id)
            if entry is not None and entry.result == "succeeded":
                continue  # applied in an earlier, interrupted run
            before = allocations.get((action.node or node, action.workload))
            self.audit.record_intent(
                rec.id, action, actor=self.actor, backend=self.backend, before=before
            )
            try:
                state = self.manager.apply(action)
            except ResourceManagerError as exc:
                self.audit.record_result(action.request_id, "failed", error=str(exc))
                return self._fail(rec, done, f"{action.request_id}: {exc}")
            except AdvisorConnectionError as exc:
                self.audit.record_result(action.request_id, "unknown", error=str(exc))
                run.unreachable = str(exc)
                self.counts[(str(rec.kind), "unknown")] += 1
                return Outcome(rec.id, node, "unknown", str(exc), tuple(done))
            if self._record(action.request_id, state) == "failed":
                return self._fail(rec, done, f"{action.request_id}: {state.error or 'failed'}")
            done.append(state)
        self.counts[(str(rec.kind), "applied")] += 1
        return Outcome(rec.id, node, "applied", f"{len(done)} action(s)", tuple(done))

    def _record(self, request_id: str, state: ActionState) -> str:
        """Log the resource manager's answer for ``request_id``; its result (``failed``...)."""
        assert self.audit is not None
        result = _status_result(state.status)
        self.audit.record_result(
            request_id,
            result,
            action_id=state.id,
            before=state.before,
            after=state.after,
            error=state.error,
        )
        return result

    def _fail(self, rec: Recommendation, done: list[ActionState], detail: str) -> Outcome:
        self.counts[(str(rec.kind), "failed")] += 1
        undone = []
        for state in reversed(done):
            try:
                self._revert_entry(state.request.request_id)
                undone.append(state.request.request_id)
            except (ConfigError, ResourceManagerError, AdvisorConnectionError) as exc:
                detail += f"; could not revert {state.request.request_id}: {exc}"
        if undone:
            detail += f"; reverted {', '.join(undone)}"
        return Outcome(rec.id, rec.target.node, "failed", detail, tuple(done))

    # reverting ----------------------------------------------------------------------------
    def revert(self, ident: str) -> list[Outcome]:
        """Undo the succeeded, not yet reverted actions of a recommendation (newest first),
        or one action when ``ident`` is a request id.
        """
        if self.audit is None or self.dry_run:
            raise ConfigError("revert needs a real resource manager and its audit log")
        self.recover()
        single = self.audit.entry(ident)
        entries: Iterable[AuditEntry] = (
            [single] if single is not None else reversed(self.audit.entries(ident))
        )
        chosen = [
            e
            for e in entries
            if e.result == "succeeded" and not e.reverted_by and e.reverts is None
        ]
        if not chosen:
            raise ConfigError(f"nothing applied and not yet reverted under {ident!r}")
        outcomes = []
        for entry in chosen:
            try:
                state = self._revert_entry(entry.request_id)
            except (ConfigError, ResourceManagerError, AdvisorConnectionError) as exc:
                outcomes.append(
                    Outcome(entry.recommendation_id, entry.node or "", "failed", str(exc))
                )
                continue
            outcomes.append(
                Outcome(
                    entry.recommendation_id,
                    entry.node or "",
                    "reverted",
                    f"{entry.request_id} by {state.request.request_id}",
                    (state,),
                )
            )
        return outcomes

    def _revert_entry(self, request_id: str) -> ActionState:
        assert self.audit is not None
        entry = self.audit.entry(request_id)
        if entry is None:
            raise ConfigError(f"no audit entry {request_id}")
        request = inverse_request(entry)
        existing = self.audit.entry(request.request_id)
        if existing is None or existing.result == "not-applied":
            self.audit.record_intent(
                entry.recommendation_id,
                request,
                actor=self.actor,
                backend=self.backend,
                before=entry.after,
                reverts=entry.request_id,
            )
        try:
            state = self.manager.apply(request)
        except ResourceManagerError as exc:
            self.audit.record_result(request.request_id, "failed", error=str(exc))
            raise
        except AdvisorConnectionError as exc:
            self.audit.record_result(request.request_id, "unknown", error=str(exc))
            raise
        if self._record(request.request_id, state) == "failed":
            raise ResourceManagerError(f"revert {request.request_id} failed: {state.error}", 409)
        self.audit.mark_reverted(entry.request_id, request.request_id)
        self.counts[(entry.kind, "reverted")] += 1
        return state
