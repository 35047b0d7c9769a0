"""The advisor service calibrates its estimates from the outcomes it verified."""

from __future__ import annotations

import pytest

from tests.advisor_serve.conftest import (
    PINNED,
    RATE_DIVISOR,
    SPREAD,
    Bench,
    host_text,
    the_pin,
)
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.calibration import PRIOR_WEIGHT, RATIO_FLOOR
from toposcope.advisor.loaders import PrometheusLoader, Window
from toposcope.advisor.outcomes import OutcomeLog, VerificationRule
from toposcope.advisor.policies import build
from toposcope.advisor.progress_metrics import parse_progress_metric
from toposcope.advisor.service import AdvisorService, AnalysisSettings
from toposcope.report.advisor_api import Verdict


def test_outcomes_below_the_estimate_shrink_the_next_estimates(bench: Bench) -> None:
    service = bench.service()
    service.analyse_once()
    rec_id = the_pin(service)
    assert service.report is not None
    [prior] = [r.estimated_gain for r in service.report.recommendations if r.id == rec_id]
    assert prior > 0
    assert service.apply(rec_id)[0].result == "applied"
    # pinned: local now, but it keeps the same 4 cores busy (it did not get faster)
    bench.promql.set({"train": PINNED})
    bench.clock.now += bench.verify_after + 1
    service.analyse_once()
    judged = service.outcomes.get(rec_id)
    assert judged is not None and judged.verdict == Verdict.PAID
    assert judged.estimated_gain == pytest.approx(prior, rel=1e-3)
    # spread again (another change undid it): the pin comes back, priced lower
    bench.promql.set({"train": SPREAD})
    service.analyse_once()
    again = service.report.recommendations
    [rec] = [r for r in again if r.kind == "pin"]
    # one outcome of ratio 0 (the floor) shrunk toward 1: its cell is its kind's only one
    assert rec.estimated_gain == pytest.approx(
        prior * RATIO_FLOOR ** (1 / (PRIOR_WEIGHT + 1)), rel=1e-3
    )
    learned = "calibration from 1 verified pin outcome(s) of numa-pinning (prior estimate) on"
    assert learned in rec.gain_model
    assert [e.value for e in rec.evidence if e.labels.get("recommendation") == rec.id] == [
        pytest.approx(prior, rel=1e-3)
    ]


def test_a_pin_measured_by_the_jobs_progress_metric_calibrates_by_it(bench: Bench) -> None:
    """The pin's verdict rests on locality, but its measured gain, what calibration learns
    from, is the job's own step rate: 2/s before, 3/s after (+50 %), while its cores, the
    proxy, stay the same.
    """

    def steps(rate: float) -> str:
        return (
            "# TYPE toposcope_test_steps_total counter\n"
            f'toposcope_test_steps_total{{job="train"}} {rate * RATE_DIVISOR}\n'
        )

    service = AdvisorService(
        PrometheusLoader(bench.prometheus.url, timeout=5, retries=0),
        build(["numa-pinning"]),
        AnalysisSettings(Window.parse("10m")),
        manager_factory=bench.http_factory(),
        backend_name="sim",
        audit=AuditLog(bench.db),
        outcomes=OutcomeLog(bench.db),
        rule=VerificationRule(verify_after_seconds=bench.verify_after),
        actor="tester@host",
        clock=bench.clock,
        wait_seconds=5.0,
        progress_metrics=[
            parse_progress_metric("train=rate(toposcope_test_steps_total{job={workload}}[5m])")
        ],
    )
    bench.promql.text = host_text({"train": SPREAD}) + steps(2.0)
    service.analyse_once()
    rec_id = the_pin(service)
    assert service.report is not None
    [prior] = [r.estimated_gain for r in service.report.recommendations if r.id == rec_id]
    assert service.apply(rec_id)[0].result == "applied"
    bench.promql.text = host_text({"train": PINNED}) + steps(3.0)
    bench.clock.now += bench.verify_after + 1
    service.analyse_once()
    judged = service.outcomes.get(rec_id)
    assert judged is not None and judged.verdict == Verdict.PAID
    assert judged.baseline.progress == pytest.approx(2.0)
    assert judged.measured_gain == pytest.approx(0.5)
    assert "progress metric 2/s -> 3/s (+50%)" in judged.detail
    bench.promql.text = host_text({"train": SPREAD}) + steps(3.0)
    service.analyse_once()
    [rec] = [r for r in service.report.recommendations if r.kind == "pin"]
    ratio = 0.5 / prior
    expected = ratio ** (1 / (PRIOR_WEIGHT + 1))
    assert rec.estimated_gain == pytest.approx(prior * expected, rel=1e-3)
