"""The full loop: a real Prometheus scrapes the simulator, ``toposcope advise --apply``
reads it, applies through the simulator's resource-manager API, and a second run over the
same window (``--at`` the first run's time) applies nothing again: it recommends the same
ids, and the audit log already holds them.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.procs import Prometheus, free_port, http_get, poll, running
from toposcope.cpulist import parse_cpulist

pytestmark = pytest.mark.integration

WINDOW_S = 8
#: one 2-socket Xeon node: a job with its memory on the wrong socket and two jobs pinned to
#: the same CPUs while the other socket idles (small working sets: actions finish at once)
SCENARIO = """\
name: loop
seed: 0
scheduler: none
nodes:
  - {name: xeon, template: xeon-2s, count: 1}
jobs:
  - {name: remote-memory, type: cpu-train, threads: 8, memory_gb: 2,
     placement: {node: xeon-01, cpus: "0-3,28-31", mems: [1]}}
  - {name: overlap-a, type: cpu-train, threads: 20, memory_gb: 1,
     placement: {node: xeon-01, cpus: "14-27,42-55", mems: [1]}}
  - {name: overlap-b, type: cpu-train, threads: 20, memory_gb: 1,
     placement: {node: xeon-01, cpus: "14-27,42-55", mems: [1]}}
"""


def api(base: str, path: str) -> Any:
    """GET a resource-manager API path and decode the JSON."""
    return json.loads(http_get(f"{base}/api/v1{path}"))


def advise(
    prom: str, sim: str, token: Path, audit: Path, at: float
) -> tuple[int, dict[str, Any], str]:
    """Run ``toposcope advise --apply --resource-manager sim`` as a user would, over the
    window ending at ``at`` (Unix seconds).
    """
    argv = [
        sys.executable, "-m", "toposcope.cli", "advise", "--prometheus", prom,
        "--window", f"{WINDOW_S}s", "--at", f"{at:.3f}", "--format", "json", "--apply",
        "--resource-manager", "sim", "--rm-url", sim, "--rm-token-file", str(token),
        "--audit-db", str(audit), "--max-actions-per-node", "5",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, json.loads(done.stdout or "{}"), done.stderr


def outcomes(stderr: str) -> dict[str, str]:
    """``apply ID: RESULT (detail)`` lines by recommendation id."""
    found = {}
    for line in stderr.splitlines():
        if line.startswith("apply "):
            rec_id, _, rest = line[len("apply ") :].partition(": ")
            found[rec_id] = rest
    return found


def test_advise_applies_to_the_simulator_and_is_idempotent(tmp_path: Path) -> None:
    scenario = tmp_path / "loop.yaml"
    scenario.write_text(SCENARIO)
    token = tmp_path / "token"
    token.write_text("loop-test-token\n")
    token.chmod(0o600)
    port = free_port()
    sim_url = f"http://127.0.0.1:{port}"
    targets = tmp_path / "targets.json"
    audit = tmp_path / "audit.sqlite"
    sim = [
        sys.executable, "-m", "toposcope.cli", "sim", "--scenario", str(scenario),
        "--listen", f"127.0.0.1:{port}", "--file-sd", str(targets), "--speed", "1",
        "--token-file", str(token), "--state-dir", str(tmp_path / "state"),
    ]  # fmt: skip
    with running(sim, tmp_path / "sim.log"):
        poll(lambda: http_get(f"{sim_url}/-/ready"))
        poll(targets.exists)
        prometheus = Prometheus(
            tmp_path, [{"job_name": "sim", "file_sd_configs": [{"files": [str(targets)]}]}]
        )
        with prometheus.run() as prom:
            # samples from before the window's start: rates need two, the window must be
            # covered, and a counter's first samples would make its rate extrapolate short.
            # The window ends at the oldest of the targets' latest scrapes: every sample
            # ingested later is newer, so a second run at the same time sees the same data
            span = WINDOW_S + 3
            history = f"min(count_over_time(toposcope_workload_cpu_seconds_total[{span}s]))"

            def covered_until() -> float | None:
                latest = prom.query("min(timestamp(up))")
                if not latest:
                    return None  # not scraped yet
                at = float(latest[0]["value"][1])
                found = prom.query(history, at)
                return at if found and float(found[0]["value"][1]) >= span - 1 else None

            at = poll(covered_until, deadline_s=30)
            before = {w["name"]: w for w in api(sim_url, "/workloads")}
            code, report, stderr = advise(prom.url, sim_url, token, audit, at)
            assert code == 0, stderr  # recommendations found and applied: the run worked
            first = outcomes(stderr)
            applied = [i for i, text in first.items() if text.startswith("applied")]
            assert applied, stderr
            recs = {r["id"]: r for r in report["recommendations"]}
            kinds = {recs[i]["kind"] for i in applied}
            assert {"pin"} <= kinds or {"migrate-memory"} <= kinds

            # the simulator's state changed as proposed
            after = {w["name"]: w for w in api(sim_url, "/workloads")}
            for rec_id in applied:
                rec = recs[rec_id]
                name = rec["target"]["workload"]
                allocation = after[name]["allocation"]
                assert allocation != before[name]["allocation"]
                if rec["kind"] == "pin":
                    assert allocation["cpus"] == list(parse_cpulist(rec["proposed"]["cpus"]))
                assert allocation["mems"] == rec["proposed"]["mems"]
            moved = {recs[i]["target"]["workload"] for i in applied}
            assert "remote-memory.service" in moved
            assert moved & {"overlap-a.service", "overlap-b.service"}

            # every applied action is in the audit log with its before-state
            with sqlite3.connect(audit) as db:
                rows = db.execute(
                    "SELECT request_id, recommendation_id, result, before_json FROM actions"
                ).fetchall()
            logged = {r[1] for r in rows}
            assert set(applied) <= logged
            assert all(r[3] for r in rows if r[1] in applied)

            # the same window again, once the page migrations are done (the audit log then
            # records them as succeeded): the same ids, all already applied, nothing sent
            def finished() -> bool:
                return all(api(sim_url, f"/actions/{r[0]}")["status"] == "succeeded" for r in rows)

            poll(finished, deadline_s=20)
            actions_before = _actions_total(http_get(f"{sim_url}/truth/metrics").decode())
            code, again, stderr = advise(prom.url, sim_url, token, audit, at)
            assert code == 0, stderr
            assert {r["id"] for r in again["recommendations"]} == set(recs)
            second = outcomes(stderr)
            assert not [t for t in second.values() if t.startswith("applied")], stderr
            assert set(applied) <= set(second), stderr
            for rec_id in applied:
                assert second[rec_id].startswith("skipped (already applied"), second[rec_id]
            with sqlite3.connect(audit) as db:
                assert db.execute("SELECT count(*) FROM actions").fetchone()[0] == len(rows)
            actions_after = _actions_total(http_get(f"{sim_url}/truth/metrics").decode())
            assert actions_after == actions_before
            assert {w["name"]: w["allocation"] for w in api(sim_url, "/workloads")} == {
                n: w["allocation"] for n, w in after.items()
            }


def _actions_total(text: str) -> float:
    """Sum of ``toposcope_sim_actions_total`` in a ``/truth/metrics`` page."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("toposcope_sim_actions_total{")
    )
