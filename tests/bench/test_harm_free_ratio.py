"""The closed loop's ratio to the best allocation that slows no job (``--harm-free-bound``):
reported beside the ratio on a scenario with gang jobs, summed up over runs, and absent
where it was not asked for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import loop_seeds
import pytest

from tests.procs import require_binary

REPO = Path(__file__).resolve().parents[2]


def test_runs_with_a_harm_free_ratio_are_summed_up_and_others_say_nothing() -> None:
    base = {
        "ratio": 0.5,
        "ratio_to_bound": 0.4,
        "harmful_actions": 0,
        "collateral_harm": 0,
        "useless_actions": 0,
        "applied_actions": 3,
    }
    runs = [{**base, "ratio_to_harm_free": 0.8}, {**base, "ratio_to_harm_free": 0.6}]
    summary = loop_seeds.summarize("s", runs)
    assert summary["worst_ratio_to_harm_free"] == 0.6
    assert summary["mean_ratio_to_harm_free"] == pytest.approx(0.7)
    assert summary["worst_ratio"] == 0.5  # the ratio and its target are unchanged
    assert "worst_ratio_to_harm_free" not in loop_seeds.summarize("s", [base])


@pytest.mark.integration
def test_a_gang_scenario_reports_its_ratio_to_the_harm_free_allocation() -> None:
    require_binary("prometheus")
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "closed_loop.py"), "--scenario", "fabric-spread",
         "--rounds", "1", "--window", "3", "--oracle-budget", "5", "--harm-free-bound",
         "--no-learn", "--progress", "proxies", "--json"],
        capture_output=True, text=True, timeout=600, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-2000:]
    out = json.loads(done.stdout)
    [run] = out["scenarios"]
    assert 0.0 <= run["ratio"] <= run["ratio_to_harm_free"] <= 1.0
    assert run["harm_free_gain"] <= run["oracle_gain"] + 1e-9
    [summary] = out["summary"]
    assert summary["worst_ratio_to_harm_free"] == run["ratio_to_harm_free"]
