"""The closed loop's learning: each round's applied recommendations verified as the advisor
service verifies them, so that the next round calibrates its estimates from them.

The outcome log is the round's audit log (``audit.sqlite``): the service keeps its
``verifications`` table in the same SQLite file as the ``actions`` the CLI writes, and
``toposcope advise --calibrate-from`` reads it (:func:`toposcope.advisor.calibration.
calibration_from`). Before every round the bench builds the advisor's model from the same
Prometheus and window the CLI reads, settles the verifications whose wait is over with the
service's :class:`~toposcope.advisor.verifier.Verifier` (the rule of
:mod:`toposcope.advisor.outcomes`: measured figures only, the simulator's truth is never
read), and, after the round applied its recommendations, records each one's baseline from
that model. Harmful changes are recorded but not reverted: the loop's judge counts them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from toposcope.advisor.audit import AuditLog
from toposcope.advisor.calibration import calibration_from
from toposcope.advisor.loaders import PrometheusLoader
from toposcope.advisor.loaders.base import Window
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.outcomes import VERIFIED_KINDS, OutcomeLog, VerificationRule, baseline
from toposcope.advisor.runner import load_model
from toposcope.advisor.verifier import Verifier
from toposcope.report.decoder import decode_recommendation

#: what a calibrated recommendation's gain model says (:func:`toposcope.advisor.calibration.
#: calibrate`)
CALIBRATED = "calibration from"
#: what the detail of a harmful verdict says instead of a revert
NOT_REVERTED = "not reverted: the closed loop judges harm itself"


def keep_harmful(rec_id: str, kind: str, detail: str, reversible: bool) -> str:
    """The verifier's revert hook for the loop: the change stays, the detail says so."""
    return f"{detail}; {NOT_REVERTED}"


class LoopLearning:
    """The outcome log ``audit_db`` of a closed loop whose advisor reads ``prom_url`` over a
    window of ``window_s`` seconds (verdicts are due one window after applying).
    """

    def __init__(self, audit_db: Path, prom_url: str, window_s: int) -> None:
        self.audit_db = audit_db
        self.window = f"{window_s}s"
        self.backend = PrometheusLoader(prom_url)
        self.outcomes = OutcomeLog(audit_db)
        self.verifier = Verifier(
            AuditLog(audit_db),
            self.outcomes,
            VerificationRule(verify_after_seconds=float(window_s)),
            keep_harmful,
        )

    def observe(self, now: float) -> ClusterModel:
        """The advisor's model of the window ending now, with every verification whose
        wait is over settled against it.
        """
        model = load_model(self.backend, Window.parse(self.window))
        self.verifier.verify(model, now)
        return model

    def record(
        self,
        recommendations: Iterable[Mapping[str, Any]],
        applied: Iterable[str],
        model: ClusterModel,
        now: float,
    ) -> None:
        """Start the verification of the ``applied`` ones of a round's report
        ``recommendations`` (JSON objects), their baselines from ``model``.
        """
        wanted = set(applied)
        for data in recommendations:
            if data.get("id") not in wanted:
                continue
            rec = decode_recommendation(data)
            if rec.kind in VERIFIED_KINDS and rec.target.workload:
                self.outcomes.start(rec, baseline(rec, model), now)

    def factors(self) -> dict[str, dict[str, float | int]]:
        """The calibration ``--calibrate-from`` derives from the log now, by kind."""
        return {
            kind: {"factor": round(c.factor, 4), "outcomes": c.outcomes}
            for kind, c in calibration_from(self.outcomes).items()
        }

    def verdicts(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The verification of each of ``ids`` so far: verdict, measured gain, detail."""
        wanted = set(ids)
        return {
            v.recommendation_id: {
                "verdict": str(v.verdict),
                "measured_gain": None if v.measured_gain is None else round(v.measured_gain, 4),
                "detail": v.detail,
            }
            for v in self.outcomes.all()
            if v.recommendation_id in wanted
        }


def verdict_counts(actions: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many of ``actions`` got each verdict (``unrecorded``: never verified)."""
    return dict(sorted(Counter(str(a.get("verdict") or "unrecorded") for a in actions).items()))
