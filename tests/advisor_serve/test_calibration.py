"""The advisor service calibrates its estimates from the outcomes it verified."""

from __future__ import annotations

import pytest

from tests.advisor_serve.conftest import PINNED, SPREAD, Bench, the_pin
from toposcope.advisor.calibration import PRIOR_WEIGHT
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
    assert judged is not None and judged.verdict == Verdict.EFFECTIVE
    assert judged.estimated_gain == pytest.approx(prior, rel=1e-3)
    # spread again (another change undid it): the pin comes back, priced lower
    bench.promql.set({"train": SPREAD})
    service.analyse_once()
    again = service.report.recommendations
    [rec] = [r for r in again if r.kind == "pin"]
    # one outcome of ratio 0 shrunk toward 1: its cell is its kind's only one
    assert rec.estimated_gain == pytest.approx(prior * PRIOR_WEIGHT / (PRIOR_WEIGHT + 1), rel=1e-3)
    assert "calibration from 1 verified pin outcome(s) of numa-pinning on" in rec.gain_model
    assert [e.value for e in rec.evidence if e.labels.get("recommendation") == rec.id] == [
        pytest.approx(prior, rel=1e-3)
    ]
