"""Driving the verification of applied recommendations, once per analysis of the service.

:mod:`toposcope.advisor.outcomes` holds the rule (baseline, measurement, verdict) and the
table of verifications; :class:`Verifier` applies the rule to every verification still
pending against the model an analysis just built, settles each one whose wait is over, and
hands the harmful ones to a revert (the advisor service's; see the rule in
docs/policies.md, "Verifying applied recommendations").
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from toposcope.advisor.audit import REVERTED, AuditLog, recommendation_state
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.outcomes import (
    OutcomeLog,
    VerificationRule,
    find_workload,
    judge,
    measure,
)
from toposcope.report.advisor_api import Verdict, Verification

LOG = logging.getLogger("toposcope.advisor.verifier")

#: reverts a harmful recommendation: (recommendation id, kind, verdict detail) -> the detail
#: to record, saying whether the revert worked
RevertHarmful = Callable[[str, str, str], str]


class Verifier:
    """Settles the pending verifications of ``outcomes`` (the audit log tells which changes a
    person reverted first); ``revert_harmful`` undoes a change judged harmful.
    """

    def __init__(
        self,
        audit: AuditLog,
        outcomes: OutcomeLog,
        rule: VerificationRule,
        revert_harmful: RevertHarmful,
    ) -> None:
        self.audit = audit
        self.outcomes = outcomes
        self.rule = rule
        self.revert_harmful = revert_harmful

    def verify(self, model: ClusterModel, now: float) -> None:
        """Judge applied recommendations whose wait is over; revert the harmful ones."""
        for item in self.outcomes.pending():
            self._verify_one(item, model, now)

    def _verify_one(self, item: Verification, model: ClusterModel, now: float) -> None:
        rec_id = item.recommendation_id
        if recommendation_state(self.audit.entries(rec_id)) == REVERTED:
            self.outcomes.settle(rec_id, Verdict.REVERTED, None, "reverted", now)
            return
        waited = now - item.applied_at
        if waited < self.rule.verify_after_seconds:
            return
        workload = find_workload(model, item.node, item.workload)
        if workload is None:
            if waited >= self.rule.give_up_seconds:
                detail = "the workload has had no series since it was changed"
                self.outcomes.settle(rec_id, Verdict.UNVERIFIABLE, None, detail, now)
            else:
                detail = "the workload has no series in this analysis"
                self.outcomes.settle(rec_id, Verdict.PENDING, None, detail, now)
            return
        measured = measure(model, item.kind, workload, item.target_numa)
        verdict, detail = judge(self.rule, item.baseline, measured)
        if verdict == Verdict.PENDING and waited >= self.rule.give_up_seconds:
            verdict = Verdict.UNVERIFIABLE
        if verdict == Verdict.HARMFUL:
            detail = self.revert_harmful(rec_id, item.kind, detail)
        self.outcomes.settle(rec_id, verdict, measured, detail, now)
        LOG.info("verification of %s: %s (%s)", rec_id, verdict, detail)
