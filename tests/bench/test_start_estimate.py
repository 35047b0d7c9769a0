"""The closed loop compares a job move's true change with its estimate less the start of a
pending job the move makes possible (``proposed.starts``): the moved job's true change
does not hold that start.
"""

from __future__ import annotations

from typing import Any

import pytest
from round_truth import gross_estimate

from tests.advisor.builders import cluster, pcie4, workload
from toposcope.advisor.model import PendingWorkload
from toposcope.advisor.policies.job_migration import JobMigration


def _move(*pending: PendingWorkload) -> dict[str, Any]:
    """train across sockets on a, moving to b's free switch pair; a keeps one free GPU."""
    jobs = [
        workload("train", node="a", gpus=[0, 2]),
        workload("x", node="a", gpus=[1]),
        workload("zw", node="b", gpus=[2, 3]),
    ]
    model = cluster([pcie4("a"), pcie4("b")], jobs, pending=pending)
    [rec] = JobMigration().evaluate(model).recommendations
    return rec.to_dict()


def test_a_moves_gross_estimate_leaves_the_start_out() -> None:
    plain, with_start = _move(), _move(PendingWorkload("wait", 3))
    assert with_start["estimated_gain"] > plain["estimated_gain"] + 0.5
    assert gross_estimate(with_start) == pytest.approx(gross_estimate(plain), abs=1e-6)
