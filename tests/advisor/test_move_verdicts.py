"""The verdict on a job move: only a fall of its progress signal is harm (and undoes the move
through another checkpoint and restart); link traffic that fell is reported, never harm alone.
"""

from __future__ import annotations

import pytest

from toposcope.advisor.outcomes import VerificationRule, judge_move
from toposcope.report.advisor_api import Measurement, Verdict

RULE = VerificationRule(verify_after_seconds=60)


def test_link_traffic_that_fell_is_said_but_is_no_harm_alone() -> None:
    before = Measurement(sm_active=0.9, link_bytes_per_second=4e9)
    after = Measurement(sm_active=0.92, link_bytes_per_second=1e9)
    verdict, detail, gain = judge_move(RULE, before, after, estimated=0.5)
    assert verdict == Verdict.NEUTRAL
    assert "link traffic fell from 4e+09 to 1e+09 B/s" in detail
    assert gain == pytest.approx(0.92 / 0.9 - 1)


def test_a_progress_signal_that_fell_is_harm() -> None:
    before = Measurement(sm_active=0.8, link_bytes_per_second=4e9)
    after = Measurement(sm_active=0.4, link_bytes_per_second=4e9)
    verdict, detail, gain = judge_move(RULE, before, after, estimated=0.5)
    assert verdict == Verdict.HARMFUL
    assert "SM active 80% -> 40%" in detail
    assert gain == pytest.approx(-0.5)


def test_a_gain_near_the_estimate_is_paid() -> None:
    before = Measurement(progress=10.0)
    after = Measurement(progress=14.0)
    verdict, _, gain = judge_move(RULE, before, after, estimated=0.5)
    assert verdict == Verdict.PAID
    assert gain == pytest.approx(0.4)
