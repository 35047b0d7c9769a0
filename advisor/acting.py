"""How the advisor service applies and reverts recommendations, and settles what a crash left.

:class:`Acting` wraps the one :class:`~toposcope.advisor.rmclients.Applier` for the service:
one call at a time (a lock; a second apply of a recommendation whose apply is under way is
answered ``in_progress`` at once, without waiting or sending anything), one recommendation
per call, the audit log as the truth (none
in a dry run, where calls are only written out), the person who asked recorded as
``USER via <service actor>``, and the results counted for ``toposcope_advisor_actions_total``.
An applied recommendation of a verified kind (every kind but ``config``) starts its
verification; a revert that undid everything a recommendation applied settles it.

An action the resource manager still runs when a call returns (a revert waits
``wait_seconds`` for it) is settled later: :meth:`Acting.settle_running`, which the service
calls after each analysis, asks how it stands, and an action whose revert has finished since
is marked reverted then, as a second revert would mark it.
"""

from __future__ import annotations

import io
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from toposcope.advisor.applying import Applier, Outcome
from toposcope.advisor.applying.applier import DEFAULT_WAIT_SECONDS, REVERT_DONE
from toposcope.advisor.audit import (
    IN_PROGRESS,
    REVERTED,
    RUNNING,
    SUCCEEDED,
    AuditEntry,
    AuditLog,
    recommendation_state,
)
from toposcope.advisor.errors import AdvisorConnectionError
from toposcope.advisor.joint_verification import start_verification
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.outcomes import VERIFIED_KINDS, OutcomeLog
from toposcope.advisor.progress_probe import ProgressProbe
from toposcope.advisor.rmclients import DryRunResourceManager
from toposcope.errors import ConfigError
from toposcope.report.advisor_api import Verdict
from toposcope.report.recommendation import Recommendation, RecommendationKind
from toposcope.rm import ResourceManager, ResourceManagerError

LOG = logging.getLogger("toposcope.advisor.acting")

#: the resource manager for the nodes a call concerns; dry-run calls are written to the text
ManagerFactory = Callable[[Sequence[str], TextIO], ResourceManager]


class ServiceError(Exception):
    """A request the service refuses, with the HTTP status, any fields to answer besides
    ``error`` and any headers (``Retry-After``).
    """

    def __init__(
        self,
        message: str,
        status: int,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.extra = extra or {}
        self.headers = headers or {}


def kind_of(recommendation_id: str) -> str:
    """The recommendation kind in an id (``pin-0123abcd4567`` -> ``pin``), or ``unknown``."""
    kind = recommendation_id.rsplit("-", 1)[0]
    return kind if kind in set(RecommendationKind) else "unknown"


def dry_run_factory(nodes: Sequence[str], out: TextIO) -> ResourceManager:
    """The dry-run resource manager (the default): calls are written to ``out``."""
    return DryRunResourceManager(out)


@dataclass
class Acting:
    """Applying, reverting and recovering for the service.

    ``manager_factory`` builds the resource manager for a call (``backend_name`` names it in
    the audit log; ``dry-run`` records nothing); ``known_nodes`` lists the nodes the latest
    model knows; ``clock`` gives Unix seconds; ``wait_seconds`` bounds how long a revert
    waits for running actions. ``counts`` holds the results per (recommendation kind,
    result), for ``toposcope_advisor_actions_total``. ``probe`` reads a moved job's progress
    metric for its verification's baseline.
    """

    manager_factory: ManagerFactory
    backend_name: str
    audit: AuditLog
    outcomes: OutcomeLog
    actor: str
    known_nodes: Callable[[], Iterable[str]]
    clock: Callable[[], float]
    wait_seconds: float = DEFAULT_WAIT_SECONDS
    probe: ProgressProbe | None = None
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _applying: set[str] = field(default_factory=set, repr=False)
    _applying_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def dry_run(self) -> bool:
        """Whether calls are only written out (nothing is applied, nothing audited)."""
        return self.backend_name == "dry-run"

    def actor_for(self, user: str | None) -> str:
        """Who the audit log names: ``USER via <service actor>``, or the service alone."""
        return f"{user} via {self.actor}" if user else self.actor

    def _applier(self, nodes: Sequence[str], out: TextIO, user: str | None = None) -> Applier:
        return Applier(
            self.manager_factory(nodes, out),
            None if self.dry_run else self.audit,
            actor=self.actor_for(user),
            backend=self.backend_name,
            dry_run=self.dry_run,
            max_per_run=1,
            max_per_node=1,
            wait_seconds=self.wait_seconds,
        )

    def _count(self, applier: Applier) -> None:
        for (kind, result), value in applier.counts.items():
            if result != "reverted":  # counted per recommendation by revert()
                self.counts[(kind, result)] += value

    def _nodes(self) -> list[str]:
        nodes = set(self.known_nodes())
        nodes |= {e.node for e in self.audit.entries() if e.node}
        return sorted(nodes)

    def wait_idle(self) -> None:
        """Return once no apply, revert or recovery is under way."""
        with self._lock:
            return

    def recover(self) -> list[AuditEntry]:
        """Settle intents an earlier run left without a result (the audit log is the truth)."""
        if self.dry_run:
            return []
        with self._lock:
            applier = self._applier(self._nodes(), io.StringIO())
            try:
                settled = applier.recover()
            except (ResourceManagerError, AdvisorConnectionError) as exc:
                LOG.warning("cannot settle unfinished actions yet: %s", exc)
                return []
        for entry in settled:
            LOG.info("settled %s: %s", entry.request_id, entry.result)
        return settled

    def settle_running(self) -> list[Outcome]:
        """Ask the resource manager about the actions the audit log has as running; mark an
        action reverted whose revert finished after the revert call returned (one outcome
        each). Nothing while an apply or revert is under way: that call settles them.
        """
        if self.dry_run or not self._lock.acquire(blocking=False):
            return []
        try:
            if not any(e.result == RUNNING for e in self.audit.unresolved()):
                return []
            applier = self._applier(self._nodes(), io.StringIO())
            outcomes: list[Outcome] = []
            try:
                settled = applier.recover()
                for entry in settled:
                    if entry.reverts is not None and entry.state == SUCCEEDED:
                        undone = self.audit.entry(entry.reverts)
                        if undone is not None and undone.state == SUCCEEDED:
                            outcomes.extend(applier.revert(entry.reverts))
            except (ResourceManagerError, AdvisorConnectionError, ConfigError) as exc:
                LOG.warning("cannot settle running actions yet: %s", exc)
            finally:
                self._count(applier)
            self._settle_reverted(outcomes, "reverted by request (the revert finished later)")
        finally:
            self._lock.release()
        for outcome in outcomes:
            LOG.info(
                "settled revert %s: %s %s",
                outcome.recommendation_id,
                outcome.result,
                outcome.detail,
            )
        return outcomes

    def apply(
        self, rec: Recommendation, model: ClusterModel | None, user: str | None = None
    ) -> tuple[Outcome, str]:
        """Apply ``rec`` (made from ``model``); the outcome and any dry-run calls.

        ``user`` is who asked. An applied recommendation of a verified kind starts its
        verification.
        While an earlier apply of ``rec`` is under way the outcome is ``in_progress`` and
        nothing is sent (not ``skipped`` once the earlier one is done: the caller learns that
        its call did nothing).
        """
        with self._applying_lock:
            if rec.id in self._applying:
                detail = (
                    f"{rec.id} is in progress: an earlier apply of it is under way; nothing "
                    "was sent, try again once it has finished"
                )
                return Outcome(rec.id, rec.target.node, IN_PROGRESS, detail), ""
            self._applying.add(rec.id)
        try:
            return self._apply(rec, model, user)
        finally:
            with self._applying_lock:
                self._applying.discard(rec.id)

    def _apply(
        self, rec: Recommendation, model: ClusterModel | None, user: str | None
    ) -> tuple[Outcome, str]:
        out = io.StringIO()
        with self._lock:
            applier = self._applier(sorted({rec.target.node, *self._nodes()}), out, user)
            try:
                [outcome] = applier.apply([rec])
            finally:
                self._count(applier)
            if outcome.result == "applied" and rec.kind in VERIFIED_KINDS and rec.target.workload:
                start_verification(self.outcomes, rec, model, self.clock(), self.probe)
        LOG.info("apply %s: %s %s", rec.id, outcome.result, outcome.detail)
        return outcome, out.getvalue()

    def revert(self, rec_id: str, reason: str = "", user: str | None = None) -> list[Outcome]:
        """Revert what was applied under ``rec_id`` (a recommendation or a request id).

        One outcome per action (see :class:`Outcome`); a recommendation counts as reverted,
        and its verification is settled, only once everything it applied is undone.
        """
        if self.dry_run:
            raise ServiceError(
                "revert needs a resource manager (--resource-manager sim, agent or local)", 409
            )
        with self._lock:
            applier = self._applier(self._nodes(), io.StringIO(), user)
            try:
                outcomes = applier.revert(rec_id)
            except ConfigError as exc:
                raise ServiceError(str(exc), 409) from exc
            finally:
                self._count(applier)
            self._settle_reverted(outcomes, reason)
        LOG.info("revert %s: %s", rec_id, ", ".join(o.result for o in outcomes))
        return outcomes

    def _settle_reverted(self, outcomes: Sequence[Outcome], reason: str) -> None:
        """Settle each recommendation of ``outcomes`` whose every action is now undone."""
        for rec in sorted({o.recommendation_id for o in outcomes if o.result == "reverted"}):
            if recommendation_state(self.audit.entries(rec)) == REVERTED:
                self._reverted(rec, reason)

    def _reverted(self, rec_id: str, reason: str) -> None:
        """Count a recommendation whose every action is undone; settle its verification."""
        self.counts[(kind_of(rec_id), "reverted")] += 1
        verification = self.outcomes.get(rec_id)
        if verification is not None and verification.verdict == Verdict.PENDING:
            detail = reason or "reverted by request"
            self.outcomes.settle(rec_id, Verdict.REVERTED, None, detail, self.clock())

    def revert_harmful(self, rec_id: str, kind: str, detail: str, revert: bool = True) -> str:
        """Count a change judged harmful and revert it unless ``revert`` is false (a kind or
        action that cannot be undone); the verdict's detail, saying how the revert went.
        """
        self.counts[(kind, "harmful")] += 1
        if not revert:
            LOG.warning("harmful %s is not reverted: it cannot be undone", rec_id)
            return f"{detail}; not reverted: this {kind} cannot be undone automatically"
        try:
            outcomes = self.revert(rec_id, reason=f"harmful: {detail}")
        except (ServiceError, ResourceManagerError, AdvisorConnectionError) as exc:
            LOG.error("harmful %s could not be reverted: %s", rec_id, exc)
            return f"{detail}; revert failed: {exc}"
        results = ", ".join(f"{o.result} {o.detail}".strip() for o in outcomes)
        done = all(o.result in REVERT_DONE for o in outcomes)
        return f"{detail}; {'reverted' if done else 'revert incomplete'} ({results})"
