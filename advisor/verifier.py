"""Driving the verification of applied recommendations, once per analysis of the service.

:mod:`toposcope.advisor.outcomes` holds the rule (baseline, measurement, verdict) and the
table of verifications; :class:`Verifier` applies the rule to every verification still
pending against the model an analysis just built, settles each one whose wait is over, and
hands the harmful ones to a revert (the advisor service's; see the rule in
docs/policies.md, "Verifying applied recommendations"). A moved or placed job is looked for
where it went (a multi-node job by its parts, wherever each runs now:
:func:`~toposcope.advisor.outcomes.parts_of`), its own progress metric read by a
:class:`~toposcope.advisor.progress_probe.ProgressProbe`; a release is judged by who holds
the GPUs it gave back. A recommendation that changes several jobs (an exchange, a joint
move, a move with the jobs moved out of its way) is judged on every job it changed, each
measured where it went (:mod:`~toposcope.advisor.joint_verification`); a clearing for
another job on the jobs it moved aside and on whether that job took the GPUs it freed
(:mod:`~toposcope.advisor.clearing_verification`). Only a kind that
can be undone, whose resource manager did not call the change irreversible, is reverted;
another harmful one keeps its verdict, saying so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from toposcope.advisor.audit import REVERTED, AuditLog, recommendation_state
from toposcope.advisor.clearing_verification import judge_clearing
from toposcope.advisor.joint_verification import judge_jobs, measure_jobs
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.outcomes import (
    JOB_KINDS,
    REVERSIBLE_KINDS,
    Judgement,
    OutcomeLog,
    VerificationRule,
    judge_locality,
    judge_move,
    judge_placement,
    judge_release,
    measure,
    measure_release,
    parts_of,
)
from toposcope.advisor.progress_probe import ProgressProbe
from toposcope.report.advisor_api import JobOutcome, Measurement, Verdict, Verification
from toposcope.report.recommendation import RecommendationKind

LOG = logging.getLogger("toposcope.advisor.verifier")

#: handles a harmful recommendation: (recommendation id, kind, verdict detail, whether to
#: revert it) -> the detail to record, saying whether it was reverted and how that went
RevertHarmful = Callable[[str, str, str, bool], str]


class Verifier:
    """Settles the pending verifications of ``outcomes`` (the audit log tells which changes a
    person reverted first); ``revert_harmful`` undoes a change judged harmful; ``probe``
    reads the progress metric of moved and placed jobs (``None``: the model's figures only).
    """

    def __init__(
        self,
        audit: AuditLog,
        outcomes: OutcomeLog,
        rule: VerificationRule,
        revert_harmful: RevertHarmful,
        probe: ProgressProbe | None = None,
    ) -> None:
        self.audit = audit
        self.outcomes = outcomes
        self.rule = rule
        self.revert_harmful = revert_harmful
        self.probe = probe

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
        jobs: tuple[JobOutcome, ...] = ()
        measured: Measurement | None
        if item.made_for:
            judged, measured, jobs = judge_clearing(self.rule, model, item, waited, self.probe)
            verdict, detail, gain = judged
        elif item.kind == RecommendationKind.RELEASE_IDLE:
            measured = measure_release(model, item.target_node, item.workload, item.gpus)
            verdict, detail, gain = judge_release(self.rule, measured, waited, item.gpus)
        else:
            node = item.target_node if item.kind in JOB_KINDS else item.node
            parts = parts_of(model, item.kind, node or item.node, item.workload)
            if not parts:
                if waited >= self.rule.give_up_seconds:
                    detail = "the workload has had no series since it was changed"
                    self.outcomes.settle(rec_id, Verdict.UNDETERMINED, None, detail, now)
                else:
                    detail = "the workload has no series in this analysis"
                    self.outcomes.settle(rec_id, Verdict.PENDING, None, detail, now)
                return
            measured = measure(model, item.kind, parts, item.target_numa, self.probe)
            verdict, detail, gain = self._judge(item, measured)
            if item.jobs:
                jobs = measure_jobs(model, item.jobs, measured, self.probe)
                judged = (verdict, detail, gain)
                (verdict, detail, gain), jobs = judge_jobs(
                    self.rule, item.kind, jobs, judged, item.estimated_gain
                )
        if verdict == Verdict.PENDING and waited >= self.rule.give_up_seconds:
            verdict = Verdict.UNDETERMINED
        if verdict == Verdict.HARMFUL:
            detail = self.revert_harmful(rec_id, item.kind, detail, self._reversible(item))
        self.outcomes.settle(rec_id, verdict, measured, detail, now, gain, jobs or None)
        LOG.info("verification of %s: %s (%s)", rec_id, verdict, detail)

    def _judge(self, item: Verification, measured: Measurement) -> Judgement:
        if item.kind == RecommendationKind.MIGRATE_JOB:
            return judge_move(self.rule, item.baseline, measured, item.estimated_gain)
        if item.kind == RecommendationKind.PLACE:
            return judge_placement(measured)
        return judge_locality(self.rule, item.baseline, measured)

    def _reversible(self, item: Verification) -> bool:
        """Whether the service may undo ``item``'s change: a kind that can be undone, none of
        whose actions its resource manager called irreversible.
        """
        if item.kind not in REVERSIBLE_KINDS:
            return False
        return not any(e.irreversible for e in self.audit.entries(item.recommendation_id))
