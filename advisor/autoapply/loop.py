"""The automatic loop: after each analysis, apply what the policy allows, and nothing else.

:class:`AutoApplier` is driven by the advisor service (one :meth:`AutoApplier.tick` after
each analysis, on the leader only) or by a test with its own clock. A tick does nothing
while the loop is stopped (the kill-switch file exists, or a stop came through the API) or
a blackout window is open. Otherwise it goes through the report's recommendations, highest
calibrated gain first, and for each one:

1. checks the policy (:func:`~toposcope.advisor.autoapply.limits.refusal`); a refusal is
   recorded as ``skipped`` with its reason (once per recommendation and reason, not every
   tick);
2. with ``dry_run_first``, rehearses a recommendation it has not rehearsed before through
   the dry-run backend (the calls it would make are recorded) and applies it at a later
   tick if it is still recommended and still allowed;
3. applies it through the service's :class:`~toposcope.advisor.acting.Acting`, as
   ``auto-apply via <service actor>`` in the audit log, which starts its verification; the
   service's verifier later judges it and reverts it on measured harm, as for a person's
   apply.

The kill switch is checked before every action, and :meth:`AutoApplier.stop` returns only
once the action under way (if any) has finished, so nothing starts after it.
"""

from __future__ import annotations

import io
import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toposcope.advisor.acting import Acting
from toposcope.advisor.applying import Applier
from toposcope.advisor.autoapply.config import AutoApplyPolicy, irreversible_actions
from toposcope.advisor.autoapply.decisions import (
    APPLIED,
    DRY_RUN,
    FAILED,
    SKIPPED,
    WOULD_APPLY,
    Decision,
    DecisionLog,
)
from toposcope.advisor.autoapply.limits import HOUR, WorkloadScope, refusal
from toposcope.advisor.autoapply.scopes import JobGroups, scope_of, slurm_groups
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.rmclients import DryRunResourceManager
from toposcope.advisor.workload_filter import workload_labels
from toposcope.report.recommendation import Recommendation, Report

LOG = logging.getLogger("toposcope.advisor.autoapply")

#: who the audit log names for an automatic action (``auto-apply via <service actor>``)
AUTO_USER = "auto-apply"
#: applier outcomes that left the cluster as it was (recorded as ``skipped``)
UNCHANGED = frozenset({"skipped", "in_progress", "retry-later"})
_NUMBERS = re.compile(r"[0-9][0-9.]*")
#: how long decisions are kept, in seconds (longer when the cool-down is longer)
RETENTION = 30 * 86400.0


class AutoApplier:
    """The automatic loop (see the module docstring) acting through ``acting``.

    ``decisions`` keeps what it decided (in the audit database); ``clock`` gives Unix
    seconds; ``groups`` reads the Slurm partition and account of each job (by default
    through the resource manager, when it is the Slurm backend).
    """

    def __init__(
        self,
        policy: AutoApplyPolicy,
        acting: Acting,
        decisions: DecisionLog,
        clock: Callable[[], float],
        groups: Callable[[], JobGroups] | None = None,
    ) -> None:
        self.policy = policy
        self.acting = acting
        self.decisions = decisions
        self.clock = clock
        self.groups = groups or self._slurm_groups
        self.irreversible = irreversible_actions(acting.backend_name)
        self.last_tick: float | None = None
        self.last_state = "not run yet"
        self._said: dict[str, str] = {}
        self._act_lock = threading.Lock()
        #: decisions per (kind, decision) and skips per code since the start, for /metrics
        self.counts: Counter[tuple[str, str]] = Counter()
        self.skips: Counter[str] = Counter()

    def _slurm_groups(self) -> JobGroups:
        if self.acting.dry_run:
            return {}
        return slurm_groups(self.acting.manager_factory([], io.StringIO()))

    # -- the kill switch -------------------------------------------------------------------

    def halted(self) -> str:
        """Why the loop applies nothing now (empty: it may): the kill-switch file, or a stop
        recorded in the audit database (read each time, so that a stop sent to any replica
        sharing the database stops the leader before its next action).
        """
        switch = self.policy.kill_switch_file
        if switch is not None:
            try:
                if switch.exists():
                    return f"kill switch: {switch} exists"
            except OSError as exc:  # a switch that cannot be checked stops the loop
                return f"kill switch: {switch} cannot be checked: {exc.strerror or exc}"
        stop = self.decisions.stopped()
        if stop is not None:
            return f"stopped by {stop[0]}: {stop[2]}" if stop[2] else f"stopped by {stop[0]}"
        return ""

    def stop(self, by: str, reason: str = "") -> None:
        """Stop the loop (kept across restarts); returns once the action under way is done."""
        self.decisions.stop(by, self.clock(), reason)
        with self._act_lock:  # wait for the action under way: nothing starts after this
            LOG.warning("automatic apply stopped by %s %s", by, reason)

    def resume(self, by: str) -> None:
        """Undo :meth:`stop` (the kill-switch file, if present, still stops the loop)."""
        self.decisions.resume()
        LOG.warning("automatic apply resumed by %s", by)

    def blackout(self, now: float) -> str:
        """The label of the blackout window open at ``now`` (empty: none)."""
        return next((b.label for b in self.policy.blackouts if b.active(now)), "")

    # -- a tick ----------------------------------------------------------------------------

    def tick(
        self, report: Report, model: ClusterModel | None, now: float | None = None
    ) -> list[Decision]:
        """Decide about every recommendation of ``report`` (made from ``model``) at ``now``
        (the clock's time by default); the decisions recorded in this tick.
        """
        now = self.clock() if now is None else now
        self.last_tick = now
        halted = self.halted()
        if halted:
            self.last_state = halted
            return []
        window = self.blackout(now)
        if window:
            self.last_state = f"blackout: {window}"
            return []
        self.last_state = "active"
        self.decisions.prune(now - max(RETENTION, self.policy.cooldown))
        current = {r.id for r in report.recommendations}
        self._said = {k: v for k, v in self._said.items() if k in current}
        labels = workload_labels(model) if model is not None else {}
        groups = self.groups() if _needs_groups(self.policy) else {}
        acted = self.decisions.acted_since(now - max(HOUR, self.policy.cooldown))
        made: list[Decision] = []
        ranked = sorted(report.recommendations, key=lambda r: (-r.estimated_gain, r.id))
        for rec in ranked:
            with self._act_lock:
                halted = self.halted()
                if halted:
                    self.last_state = halted
                    break
                scope = scope_of(rec, model, groups, labels)
                decision = self._decide(rec, model, scope, acted, now)
            if decision is None:
                continue
            made.append(decision)
            if decision.decision in (APPLIED, FAILED):
                acted.append(decision)
        return made

    def _decide(
        self,
        rec: Recommendation,
        model: ClusterModel | None,
        scope: WorkloadScope,
        acted: Sequence[Decision],
        now: float,
    ) -> Decision | None:
        code, reason = refusal(rec, scope, self.policy, acted, now, self.irreversible)
        if code:
            return self._record(rec, scope, now, SKIPPED, reason, code)
        if self.policy.dry_run_first and not self.decisions.rehearsed(rec.id):
            result, calls = self._rehearse(rec)
            if result != "dry-run":
                return self._record(rec, scope, now, SKIPPED, calls, "dry-run")
            return self._record(rec, scope, now, DRY_RUN, calls)
        if self.policy.dry_run_only or self.acting.dry_run:
            why = "the dry-run resource manager" if self.acting.dry_run else "dry_run_only"
            return self._record(rec, scope, now, WOULD_APPLY, f"not applied: {why}")
        outcome, _ = self.acting.apply(rec, model, AUTO_USER)
        if outcome.result == "applied":
            return self._record(rec, scope, now, APPLIED, outcome.detail)
        if outcome.result in UNCHANGED:
            return self._record(rec, scope, now, SKIPPED, outcome.detail, "applier")
        return self._record(rec, scope, now, FAILED, f"{outcome.result}: {outcome.detail}")

    def _rehearse(self, rec: Recommendation) -> tuple[str, str]:
        """Run ``rec`` through the dry-run backend: its result and the calls it printed."""
        out = io.StringIO()
        applier = Applier(
            DryRunResourceManager(out),
            None,
            actor=self.acting.actor_for(AUTO_USER),
            backend="dry-run",
            dry_run=True,
            max_per_run=1,
            max_per_node=1,
        )
        [outcome] = applier.apply([rec])
        calls = out.getvalue().strip()
        if outcome.result != "dry-run":
            return outcome.result, f"the dry run refused it: {outcome.detail}"
        return outcome.result, f"rehearsed: {calls}" if calls else "rehearsed"

    def _record(
        self,
        rec: Recommendation,
        scope: WorkloadScope,
        now: float,
        decision: str,
        reason: str,
        code: str = "",
    ) -> Decision | None:
        """Record a decision; a skip repeating the last one of its recommendation is not
        recorded again (``None``).
        """
        said = f"{decision}:{code}:{_NUMBERS.sub('#', reason)}"
        if decision == SKIPPED and self._said.get(rec.id) == said:
            return None
        self._said[rec.id] = said
        made = Decision(
            now,
            rec.id,
            str(rec.kind),
            rec.target.node,
            rec.target.workload or "",
            scope.group,
            decision,
            reason,
            code,
        )
        self.decisions.record(made)
        self.counts[(made.kind, decision)] += 1
        if decision == SKIPPED:
            self.skips[code] += 1
        log = LOG.info if decision == SKIPPED else LOG.warning
        log("auto-apply %s %s: %s", decision, rec.id, reason)
        return made

    # -- what it reports -------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The loop's state for the API: stopped, blackout, last tick and its policy."""
        now = self.clock()
        halted = self.halted()
        window = self.blackout(now)
        policy = self.policy
        return {
            "active": not halted and not window,
            "stopped": halted or None,
            "blackout": window or None,
            "last_tick": self.last_tick,
            "last_state": self.last_state,
            "policy": {
                "source": policy.source,
                "kinds": sorted(policy.kinds),
                "min_confidence": policy.min_confidence,
                "min_gain": policy.min_gain,
                "max_risk": policy.max_risk,
                "per_node": policy.per_node,
                "per_namespace": policy.per_namespace,
                "per_hour": policy.per_hour,
                "cooldown_seconds": policy.cooldown,
                "blackouts": [b.label for b in policy.blackouts],
                "dry_run_first": policy.dry_run_first,
                "dry_run_only": policy.dry_run_only,
                "kill_switch_file": str(policy.kill_switch_file or "") or None,
            },
        }

    def recent(self, limit: int = 100) -> list[Mapping[str, object]]:
        """The latest ``limit`` decisions, newest first, as the API answers them."""
        return [d.to_dict() for d in self.decisions.recent(limit)]


def _needs_groups(policy: AutoApplyPolicy) -> bool:
    """Whether a rule or limit needs the Slurm partitions and accounts."""
    scopes = (policy.include, policy.exclude)
    return any(s.partitions or s.accounts for s in scopes) or policy.per_namespace > 0
