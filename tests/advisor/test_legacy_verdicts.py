"""An audit database written before the verdicts were renamed (effective, ineffective,
unverifiable -> paid, neutral, undetermined) still reads: the verdicts under their new
names, stored so in place, and calibration learned from its settled outcomes.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from tests.advisor.builders import cluster, pcie8
from tests.advisor.test_calibration_cells import _pin
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.calibration import (
    PRIOR_WEIGHT,
    RATIO_FLOOR,
    calibrate,
    calibration_from,
)
from toposcope.advisor.outcomes import OutcomeLog
from toposcope.report.advisor_api import LEGACY_VERDICTS, Verdict, Verification

FIXTURE = Path(__file__).parents[1] / "fixtures" / "advisor-audit" / "verdicts-before-rename.sql"
K = PRIOR_WEIGHT


def legacy_audit_db(directory: Path) -> Path:
    """The fixture's audit database, written to a new file in ``directory``."""
    path = directory / "audit-before-rename.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(FIXTURE.read_text(encoding="utf-8"))
    return path


def _stored(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT verdict FROM verifications ORDER BY applied_at").fetchall()
    return [str(r[0]) for r in rows]


def test_the_fixture_holds_the_earlier_names(tmp_path: Path) -> None:
    stored = _stored(legacy_audit_db(tmp_path))
    assert set(LEGACY_VERDICTS) <= set(stored)


def test_old_verdicts_read_under_their_new_names_and_are_renamed_in_place(
    tmp_path: Path,
) -> None:
    path = legacy_audit_db(tmp_path)
    found = [v.verdict for v in OutcomeLog(path).all()]
    assert found == [
        Verdict.PAID,
        Verdict.PAID,
        Verdict.NEUTRAL,
        Verdict.HARMFUL,
        Verdict.UNDETERMINED,
        Verdict.PENDING,
    ]
    assert _stored(path) == [str(v) for v in found]
    assert len(OutcomeLog(path).pending()) == 1  # opening again changes nothing
    # the audit rows beside them are untouched
    entries = AuditLog(path).entries()
    assert len(entries) == 6 and {e.state for e in entries} == {"succeeded"}


def test_reopening_a_renamed_log_leaves_it_as_it_is(tmp_path: Path) -> None:
    path = legacy_audit_db(tmp_path)
    OutcomeLog(path)
    renamed = path.read_bytes()
    assert len(OutcomeLog(path).all()) == 6
    assert path.read_bytes() == renamed


def test_calibration_from_an_old_log_is_what_it_was(tmp_path: Path) -> None:
    """The factors the earlier release learned from this log (settled: two pins behind one
    switch gained twice their estimate, two across sockets half of it and -1.5 times it,
    clipped to the floor; the undetermined and pending ones do not count), learned in
    logarithms as calibration learns now.
    """
    found = calibration_from(OutcomeLog(legacy_audit_db(tmp_path)))
    assert found["pin"].outcomes == 4
    logs = [math.log(2.0), math.log(2.0), math.log(0.5), math.log(RATIO_FLOOR)]
    assert found["pin"].factor == pytest.approx(math.exp(sum(logs) / (K + 4)))
    near = found.levels[("pin", "numa-pinning", "unknown GPU x8", "PIX")]
    far = found.levels[("pin", "numa-pinning", "unknown GPU x8", "SYS")]
    across = (math.log(0.5) + math.log(RATIO_FLOOR)) / (K + 2)  # the SYS cell, toward 1
    assert near.factor == pytest.approx(math.exp((K * across + 2 * math.log(2.0)) / (K + 2)))
    assert near.factor > 1.0 > far.factor
    [scaled] = calibrate([_pin(0.1, "next", (0, 1))], found, cluster([pcie8()]))
    assert scaled.estimated_gain == pytest.approx(0.1 * near.factor, rel=1e-3)


def test_an_api_answer_with_an_old_verdict_reads_as_the_new_one() -> None:
    answer = {"recommendation_id": "pin-1", "kind": "pin", "verdict": "unverifiable"}
    assert Verification.from_json(answer).verdict == Verdict.UNDETERMINED
    with pytest.raises(ValueError, match="not a valid Verdict"):
        Verification.from_json({**answer, "verdict": "splendid"})
