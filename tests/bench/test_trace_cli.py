"""The trace replay's command line: ``--json`` prints the documented figures, ``--plot``
writes the figure, and bad arguments exit 2 with a message naming what is wrong.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

SMALL = ("--cluster", "dgx-a100=1,pcie-4gpu=2", "--days", "0.3", "--load", "2")
FIGURES = {
    "policy",
    "jobs",
    "finished",
    "never_started",
    "mean_queue_s",
    "p95_queue_s",
    "mean_jct_s",
    "mean_locality_slowdown",
    "gpu_utilisation",
    "fragmented_share",
    "migrations",
    "actions",
    "seconds",
}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "bench/trace_replay.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_json_output_has_the_documented_keys_and_the_plot_is_written(tmp_path: Path) -> None:
    figure = tmp_path / "replay.html"
    done = _run(*SMALL, "--json", "--plot", str(figure))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result) == {"trace", "cluster", "gpus", "jobs", "policies", "target"}
    assert result["gpus"] == 16 and result["jobs"] > 0
    assert [p["policy"] for p in result["policies"]] == [
        "first-fit",
        "k8s-spread",
        "gandiva",
        "hived",
        "toposcope",
    ]
    for row in result["policies"]:
        assert set(row) == FIGURES
        assert row["jobs"] == result["jobs"]
    assert set(result["target"]) == {"queue_ratio_to_first_fit", "locality_slowdown", "met"}
    first_fit, toposcope = result["policies"][0], result["policies"][-1]
    assert result["target"]["queue_ratio_to_first_fit"] == pytest.approx(
        toposcope["mean_queue_s"] / first_fit["mean_queue_s"], abs=1e-3
    )
    assert "queueing delay CDF" in figure.read_text()


def test_one_policy_and_a_trace_file_replay_without_the_target(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("submit_time,gpus,duration\n0,2,600\n30,1,60\n")
    done = _run("--trace", str(trace), "--policies", "hived", "--cluster", "pcie-4gpu=1", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["target"] == {}
    (row,) = result["policies"]
    assert (row["policy"], row["jobs"], row["finished"], row["mean_queue_s"]) == ("hived", 2, 2, 0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--policies", "first-fit,best-fit"), "unknown policy 'best-fit'"),
        (("--days", "-1"), "--days must be in (0, 60]"),
        (("--drain-days", "-0.5"), "--drain-days in [0, 60]"),
        (("--trace", "{tmp}/missing.csv"), "cannot read trace"),
        (("--trace", "{tmp}/empty.csv"), "no GPU job with a run time"),
        (("--cluster", "xeon-2s=2"), "no node has a GPU"),
        (("--cluster", "dgx-a100=x"), "--cluster: bad entry"),
        (("--cluster", "pcie-4gpu=1", "--days", "0.01"), "the generated trace has no job"),
        (("--plot", "{tmp}/no-dir/replay.html"), "--plot: no such directory"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    (tmp_path / "empty.csv").write_text("submit_time,gpus,duration\n0,0,600\n")
    done = _run(*(a.format(tmp=tmp_path) for a in args))
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
