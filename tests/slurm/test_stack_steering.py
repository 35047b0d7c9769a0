"""``make up RM=slurm`` end to end: the advisor steers jobs that a real Slurm placed.

The stack is started as ``make up RM=slurm`` starts it (``deploy/stack.py up --rm slurm``):
a local Slurm cluster built from the ``slurm-steering`` scenario's nodes, the simulator as its
hardware (Slurm allocates, the simulator mirrors), the queue exporter, Prometheus scraping
them, the advisor service applying through ``--resource-manager slurm``, and the Dash app.
Slurm's own choice leaves training jobs on GPUs across switches and sockets while the DGX
has NVLinked pairs free. The checks read Slurm's own view (``scontrol show job``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO
from tests.procs import poll, require_binary
from tests.slurm.conftest import require_slurm, state_dir
from toposcope.dashboards.app.advisorclient import AdvisorClient, AdvisorRefused

pytestmark = pytest.mark.integration

PREFIX = f"k{os.getpid()}-"
NODES = ("pcie8-01", "pcie4-01", "dgx-01")
TOPOSCOPE = str(Path(sys.executable).parent / "toposcope")


@dataclass
class Stack:
    """The running stack: its URLs, Slurm's connection, an audit log for the CLI."""

    run_dir: Path
    urls: dict[str, str]
    info: dict[str, Any]
    audit_db: Path

    def slurm(self, *argv: str) -> str:
        """Run a Slurm command against the stack's cluster; its output."""
        env = {**os.environ, "SLURM_CONF": self.info["slurm_conf"]}
        return subprocess.run(
            list(argv), env=env, capture_output=True, text=True, check=True, timeout=30
        ).stdout

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job``'s fields of one job."""
        text = self.slurm("scontrol", "show", "job", "-o", job_id)
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def job_id(self, name: str) -> str:
        """The Slurm job id of the scenario job ``name``."""
        found = self.slurm("squeue", "-h", "-n", name, "-o", "%A").split()
        assert len(found) == 1, found
        return found[0]

    def advise(self, *args: str, then: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        """``toposcope advise`` against the stack's Prometheus and Slurm (a real process);
        ``then`` its action (``log``, ``revert ID``).
        """
        info = self.info
        return subprocess.run(
            [
                TOPOSCOPE, "advise", "--prometheus", self.urls["prometheus"],
                "--window", "2m", "--resource-manager", "slurm",
                "--slurm-url", info["rest_url"], "--slurm-user", "root",
                "--slurm-token-file", info["token_file"], "--slurm-conf", info["slurm_conf"],
                "--audit-db", str(self.audit_db), *args, *then,
            ],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    def recommendations(self, policy: str) -> list[dict[str, Any]]:
        """The recommendations of one policy now (no apply)."""
        done = self.advise("--policy", policy, "--format", "json")
        assert done.returncode == 0, done.stderr
        return list(json.loads(done.stdout)["recommendations"])


def _stack(action: str, run_dir: Path, scenario: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TOPOSCOPE_RUN_DIR": str(run_dir),
        "TOPOSCOPE_SLURM_SCENARIO": str(scenario),
    }
    return subprocess.run(
        [sys.executable, str(REPO / "deploy" / "stack.py"), action, "--rm", "slurm"],
        capture_output=True, text=True, env=env, timeout=180, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """The RM=slurm stack, with node names of this test run; always stopped."""
    require_slurm()
    require_binary("prometheus")
    require_binary("prometheus-alertmanager")
    home = state_dir("stack")  # slurmrestd (nobody) must reach the cluster's files
    text = (REPO / "sim" / "scenarios" / "slurm-steering.yaml").read_text()
    for node in NODES:
        text = text.replace(f"name: {node}", f"name: {PREFIX}{node}")
    scenario = home / "scenario.yaml"
    scenario.write_text(text)
    run_dir = home / "run"
    try:
        started = _stack("up", run_dir, scenario)
        assert started.returncode == 0, started.stdout + started.stderr
        urls = json.loads((run_dir / "urls.json").read_text())
        info = json.loads((run_dir / "slurm" / "info.json").read_text())
        yield Stack(run_dir, urls, info, home / "audit.sqlite")
    finally:
        stopped = _stack("down", run_dir, scenario)
        shutil.rmtree(home, ignore_errors=True)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def _migration(recs: list[dict[str, Any]], skip: str = "") -> dict[str, Any] | None:
    return next(
        (r for r in recs if r["kind"] == "migrate-job" and r["actions"][0]["workload"] != skip),
        None,
    )


def test_the_cli_requeues_a_badly_placed_job_onto_the_better_node(stack: Stack) -> None:
    rec = poll(
        lambda: _migration(stack.recommendations("job-migration")),
        90,
        1.0,
        what="a migrate-job recommendation",
    )
    action = rec["actions"][0]
    job_id = action["workload"].removeprefix("slurm-job-")
    before = stack.job(job_id)
    assert before["JobState"] == "RUNNING" and before["NodeList"] != action["node"]
    assert "toposcope:migratable" in before["Comment"]

    applied = stack.advise(
        "--policy", "job-migration", "--workload", action["workload"], "--apply",
        "--max-actions", "1", "--format", "json",
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    rec = _migration(json.loads(applied.stdout)["recommendations"])
    assert rec is not None and rec["actions"][0]["workload"] == action["workload"]
    action = rec["actions"][0]
    assert f"apply {rec['id']}: applied" in applied.stderr

    def moved() -> bool:
        now = stack.job(job_id)
        return now["JobState"] == "RUNNING" and now["NodeList"] == action["node"]

    poll(moved, 60, 0.5, what=f"job {job_id} running on {action['node']}")
    after = stack.job(job_id)
    assert after["ReqNodeList"] == action["node"] and after["Restarts"] == "1"
    log = stack.advise(then=("log",))
    assert log.returncode == 0, log.stderr
    row = next(line for line in log.stdout.splitlines() if f"/{action['workload']} " in line)
    assert " slurm " in row and f" migrate {action['node']}/" in row


def test_the_cli_steers_a_queued_job_and_the_revert_clears_it(stack: Stack) -> None:
    job_id = stack.job_id("i-finetune")
    queued = stack.job(job_id)
    assert queued["JobState"] == "PENDING" and queued["ReqNodeList"] == "(null)"
    workload = f"slurm-job-{job_id}"
    applied = stack.advise(
        "--policy", "gpu-placement", "--workload", workload, "--apply", "--format", "json"
    )
    assert applied.returncode == 0, applied.stderr
    rec = next(r for r in json.loads(applied.stdout)["recommendations"] if r["kind"] == "place")
    node = rec["actions"][0]["node"]
    assert f"apply {rec['id']}: applied" in applied.stderr
    steered = stack.job(job_id)
    assert steered["JobState"] == "PENDING" and steered["ReqNodeList"] == node

    reverted = stack.advise(then=("revert", rec["id"]))
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    assert stack.job(job_id)["ReqNodeList"] == "(null)"


def test_the_service_applies_what_the_dash_app_asks_and_lists_it(stack: Stack) -> None:
    token = (stack.run_dir / "advisor" / "token").read_text().strip()
    client = AdvisorClient(stack.urls["advisor"].removesuffix("/api/v1/recommendations"), token)
    moving = {r.workload for r in client.audit()}

    def not_yet_done(kind: str, workload: str, node: str | None) -> bool:
        """Whether Slurm has not done this yet: an analysis from before the CLI tests moved or
        steered a job can still offer that change, which Slurm rightly refuses."""
        job = stack.job(workload.removeprefix("slurm-job-"))
        if kind == "migrate-job":
            return job["NodeList"] != node
        return job["JobState"] == "PENDING" and job["ReqNodeList"] != node

    def offered() -> Any:
        # after the CLI test's requeue, job-migration leaves the DGX's last NVLinked pairs to
        # the queued jobs that gpu-placement starts there, so the service may offer either
        report = client.report()
        return next(
            (
                r for r in report.recommendations
                if r.kind in ("migrate-job", "place") and r.actions[0].workload not in moving
                and not_yet_done(r.kind, r.actions[0].workload, r.actions[0].node)
            ),
            None,
        )  # fmt: skip

    rec = poll(
        offered,
        90,
        1.0,
        what="a migrate-job or place recommendation from the service",
        errors=(OSError, AdvisorRefused),
    )
    target = rec.actions[0]
    result = client.apply(rec.id, "slurmsteer-test")
    assert result.ok, result.details
    rows = [r for r in client.audit() if r.recommendation_id == rec.id]
    kind = "migrate" if rec.kind == "migrate-job" else "place"
    assert rows and rows[0].kind == kind and rows[0].backend == "slurm"
    assert rows[0].workload == target.workload and rows[0].node == target.node
    job_id = target.workload.removeprefix("slurm-job-")
    field = "NodeList" if kind == "migrate" else "ReqNodeList"
    poll(
        lambda: stack.job(job_id)[field] == target.node,
        60,
        0.5,
        what=f"job {job_id}'s {field} {target.node}",
    )
