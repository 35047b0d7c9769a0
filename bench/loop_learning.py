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
that model (and its cell: node type and link tier). Harmful changes are recorded but not
reverted: the loop's judge counts them.

**Progress.** With ``progress_metrics`` (:func:`step_counter_metric`: every job's step
counter, which the simulator publishes on ``/jobs/metrics`` as a training job's own metrics
endpoint would), the verifier reads each job's progress rate as the advisor service does
with ``--progress-metric``: a job move's verdict and every kind's measured gain rest on it.
Without, they rest on the default proxies (SM active and link bytes for a job move, GPU
utilization or CPU cores for the calibration of the others). The baseline's progress is read
over the window that ended when the round's model was built (before the round applied
anything), the measurement's over the window before the next round.

**Across seeds.** A deployment keeps its audit log from job to job, so what it learned
from one job's outcomes prices the next job's advice. With ``--learn-across-seeds`` the
closed loop keeps an outcome store per scenario across its seeds (:func:`carry_outcomes`):
before a seed's first round the settled outcomes of every earlier seed are copied into the
seed's own audit log (their ids prefixed with the seed they came from, so that the same
recommendation made again in this seed is a new outcome), and after its last round its own
settled outcomes are added to the store. Only verdicts and measured gains travel, never
the truth.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from toposcope.advisor.audit import AuditLog
from toposcope.advisor.calibration import SETTLED, calibration_from
from toposcope.advisor.joint_verification import start_verification
from toposcope.advisor.loaders import PrometheusLoader
from toposcope.advisor.loaders.base import Window
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.outcomes import VERIFIED_KINDS, OutcomeLog, VerificationRule
from toposcope.advisor.progress_metrics import ProgressMetric, parse_progress_metric
from toposcope.advisor.progress_probe import ProgressProbe
from toposcope.advisor.runner import load_model
from toposcope.advisor.verifier import Verifier
from toposcope.report.decoder import decode_recommendation

#: what a calibrated recommendation's gain model says (:func:`toposcope.advisor.calibration.
#: calibrate`)
CALIBRATED = "calibration from"
#: what the detail of a harmful verdict says instead of a revert
NOT_REVERTED = "not reverted: the closed loop judges harm itself"
#: the step counter the simulator publishes for every job (:mod:`toposcope.sim.job_steps`)
STEP_COUNTER = "toposcope_sim_job_steps_total"


def step_counter_metric(window_s: int) -> tuple[ProgressMetric, ...]:
    """The ``--progress-metric`` setting that judges every job by its step counter: its
    rate over the loop's window, the setting parsed and checked as the service does.
    """
    promql = f"sum(rate({STEP_COUNTER}{{workload={{workload}}}}[{window_s}s]))"
    return (parse_progress_metric(f".+={promql}"),)


def keep_harmful(rec_id: str, kind: str, detail: str, reversible: bool) -> str:
    """The verifier's revert hook for the loop: the change stays, the detail says so."""
    return f"{detail}; {NOT_REVERTED}"


class LoopLearning:
    """The outcome log ``audit_db`` of a closed loop whose advisor reads ``prom_url`` over a
    window of ``window_s`` seconds (verdicts are due one window after applying); jobs'
    progress is read by ``progress_metrics`` (none: the proxies alone).
    """

    def __init__(
        self,
        audit_db: Path,
        prom_url: str,
        window_s: int,
        progress_metrics: Sequence[ProgressMetric] = (),
    ) -> None:
        self.audit_db = audit_db
        self.window = f"{window_s}s"
        self.backend = PrometheusLoader(prom_url)
        self.outcomes = OutcomeLog(audit_db)
        self.metrics = tuple(progress_metrics)
        self.verifier = Verifier(
            AuditLog(audit_db),
            self.outcomes,
            VerificationRule(verify_after_seconds=float(window_s)),
            keep_harmful,
        )
        self.observed_at: float | None = None

    def _probe(self, end: float | None) -> ProgressProbe | None:
        """The progress probe over the window ending at ``end`` (``None``: now)."""
        if not self.metrics:
            return None
        return ProgressProbe(self.backend, Window.parse(self.window, end=end), self.metrics)

    def observe(self, now: float) -> ClusterModel:
        """The advisor's model of the window ending now, with every verification whose
        wait is over settled against it (progress read over the same window).
        """
        model = load_model(self.backend, Window.parse(self.window))
        self.verifier.probe = self._probe(None)
        self.verifier.verify(model, now)
        self.observed_at = now
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
        probe = self._probe(self.observed_at)
        for data in recommendations:
            if data.get("id") not in wanted:
                continue
            rec = decode_recommendation(data)
            if rec.kind in VERIFIED_KINDS and rec.target.workload:
                start_verification(self.outcomes, rec, model, now, probe)

    def factors(self) -> dict[str, dict[str, float | int]]:
        """The calibration ``--calibrate-from`` derives from the log now, by kind."""
        return {
            kind: {"factor": round(c.factor, 4), "outcomes": c.outcomes}
            for kind, c in calibration_from(self.outcomes).items()
        }

    def cells(self) -> list[dict[str, Any]]:
        """The per-cell factors ``--calibrate-from`` derives from the log now (kind, policy,
        node type, link tier: :mod:`toposcope.advisor.calibration`).
        """
        return [
            {
                "kind": key[0],
                "policy": key[1],
                "node_type": key[2],
                "link_tier": key[3],
                "factor": round(c.factor, 4),
                "outcomes": c.outcomes,
            }
            for key, c in sorted(calibration_from(self.outcomes).levels.items())
            if len(key) == 4
        ]

    def verdicts(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The verification of each of ``ids`` so far: verdict, measured gain, detail and
        the calibration cell it was recorded in (kind, policy, node type, link tier).
        """
        wanted = set(ids)
        cells = self.outcomes.cells()
        return {
            v.recommendation_id: {
                "verdict": str(v.verdict),
                "measured_gain": None if v.measured_gain is None else round(v.measured_gain, 4),
                "detail": v.detail,
                "cell": list(cells[v.recommendation_id][0]),
            }
            for v in self.outcomes.all()
            if v.recommendation_id in wanted
        }


def verdict_counts(actions: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many of ``actions`` got each verdict (``unrecorded``: never verified)."""
    return dict(sorted(Counter(str(a.get("verdict") or "unrecorded") for a in actions).items()))


def carry_outcomes(source: Path, dest: Path, prefix: str = "") -> int:
    """Copy the settled verifications of the outcome log ``source`` into the one at ``dest``
    (both opened, and so created, as outcome logs), each id prefixed with ``prefix``; ids
    ``dest`` already holds (as carried, or as prefixed) are left as they are. Returns how
    many were copied. Pending and undetermined ones stay behind: calibration does not read
    them, and a later run's verifier must not judge a change another run made.
    """
    OutcomeLog(source)
    OutcomeLog(dest)
    db = sqlite3.connect(dest)
    try:
        columns = [str(row[1]) for row in db.execute("PRAGMA table_info(verifications)")]
        rest = ", ".join(c for c in columns if c != "recommendation_id")
        settled = sorted(str(v) for v in SETTLED)
        marks = ",".join("?" for _ in settled)
        db.execute("ATTACH DATABASE ? AS carried", (str(source),))
        with db:
            copied = db.execute(
                f"INSERT INTO main.verifications (recommendation_id, {rest})"
                f" SELECT ? || recommendation_id, {rest} FROM carried.verifications"
                f" WHERE verdict IN ({marks})"
                " AND recommendation_id NOT IN (SELECT recommendation_id FROM main.verifications)"
                " AND ? || recommendation_id NOT IN"
                " (SELECT recommendation_id FROM main.verifications)"
                " ORDER BY applied_at",
                (prefix, *settled, prefix),
            ).rowcount
        db.execute("DETACH DATABASE carried")
    finally:
        db.close()
    return int(copied)
