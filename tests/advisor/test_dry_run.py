"""``toposcope advise --dry-run``: each backend's plans as a script, offline, checked by real tools.

The scripts are made with no resource manager reachable (no slurmctld, no kubeconfig, no
agent), from the real exporter's scrape (the CLI) and from the report fixture with names that
try to break out of their quoting. Every script passes ``bash -n``; each ``systemctl
set-property`` line's unit and properties pass ``systemd-analyze verify``; each Kubernetes
request body, applied to a valid object, passes kubernetes-validate (strict); Slurm's
``scontrol`` lines run against the real cluster in tests/slurm/test_plans.py.
"""

from __future__ import annotations

import argparse
import copy
import json
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_validate import validate  # type: ignore[import-untyped]

from tests.advisor.conftest import ExporterScrape
from tests.advisor.fakes import ExpositionPrometheus, FakeServer
from tests.helpers import FIXTURES
from tests.kube.fake_apiserver import json_patch, merge_patch
from toposcope.advisor import cli as advise_cli
from toposcope.advisor.dry_run import planner_for, render_dry_run
from toposcope.kube.paths import eviction_step
from toposcope.report.decoder import report_from_json
from toposcope.report.recommendation import Report
from toposcope.rm import ActionKind, ActionRequest
from toposcope.rm.plan import PlanHints, WorkloadHints

LABELS = {"job": "toposcope", "instance": "10.1.2.3:9400"}
BACKENDS = ("dry-run", "agent", "sim", "systemd", "slurm", "kubernetes")
KUBERNETES_VERSION = "1.30"
#: a name from a metric label that tries to end its quoting and run a command
HOSTILE = "job'; touch pwned; echo '$(reboot)`id`"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No cluster to ask: a Slurm configuration whose controller does not answer, no
    kubeconfig, and no token in the environment.
    """
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=gone\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\nMessageTimeout=1\n"
    )
    monkeypatch.setenv("SLURM_CONF", str(conf))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.fixture(scope="module")
def prometheus(exporter_scrape: ExporterScrape) -> Iterator[FakeServer]:
    with FakeServer(ExpositionPrometheus(exporter_scrape.text, LABELS)).run() as fake:
        yield fake


def invoke(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="toposcope advise")
    advise_cli.add_arguments(parser)
    code: int = advise_cli.run(parser.parse_args(argv))
    return code


def bash_n(script: str) -> None:
    done = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr


def commands(script: str) -> list[list[str]]:
    """The script's commands, split as the shell splits them (not its ``set -eu`` line)."""
    lines = script.splitlines()
    return [shlex.split(line) for line in lines if line and line[0] != "#" and line != "set -eu"]


def fixture_report(**renames: str) -> Report:
    text = (FIXTURES / "advisor" / "report.json").read_text()
    for old, new in renames.items():
        text = text.replace(old, new)
    return report_from_json(text)


def script_of(backend: str, report: Report, hints: PlanHints | None = None) -> str:
    return render_dry_run(report, backend, planner_for(backend, None, {}), hints or PlanHints())


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_prints_a_valid_script_offline(
    backend: str, prometheus: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--prometheus", prometheus.url, "--dry-run", "--resource-manager", backend]
    assert invoke(argv) == 0
    script = capsys.readouterr().err
    assert script.startswith("#!/bin/sh\n") and f"--resource-manager {backend}" in script
    unread = "# pending workloads were not read, so nothing is placed" in script
    assert unread == (backend in ("sim", "slurm", "kubernetes"))
    bash_n(script)


def test_the_agent_plan_uses_the_allow_list(
    prometheus: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--prometheus", prometheus.url, "--dry-run", "--resource-manager", "agent"]
    assert invoke([*base, "--rm-url-map", "n1=http://10.9.8.7:9848/api/v1"]) == 0
    script = capsys.readouterr().err
    urls = {c[-1] for c in commands(script) if c[0] == "curl"}
    assert urls == {"http://10.9.8.7:9848/api/v1/actions"}
    assert invoke([*base, "--rm-url-map", "other=http://10.9.8.7:9848/api/v1"]) == 0
    script = capsys.readouterr().err
    assert "curl" not in script and "node n1 has no allowed agent endpoint" in script


def test_slurm_and_kubernetes_say_what_they_could_not_check() -> None:
    report = fixture_report(**{"pending-c": "slurm-job-42", "job-b": "slurm-job-7"})
    slurm = script_of("slurm", report)
    assert "scontrol update JobId=42 ReqNodeList=n8\n" in slurm
    assert "scontrol requeuehold 7\n" in slurm and "scontrol release 7\n" in slurm
    assert "# not checked: whether job 42 is still pending" in slurm
    assert "sbatch --cpu-bind=cores --mem-bind=local --gres-flags=enforce-binding" not in slurm
    hints = PlanHints({"n8/notebook": WorkloadHints("ml", "notebook-0", "main")})
    kube = script_of("kubernetes", fixture_report(), hints)
    assert "# not checked: the pod's owner was not read" in kube
    assert "Binding" not in kube and "eviction" not in kube  # release scales an owner down
    bash_n(slurm + kube)


def test_the_agent_plan_never_holds_a_call_the_agent_refuses() -> None:
    script = script_of("agent", fixture_report())
    posted = [json.loads(c[c.index("--data") + 1]) for c in commands(script)]
    assert {p["kind"] for p in posted} == {"pin", "migrate-memory"}
    assert "# agent refuses this action: migrate: not supported on a single host" in script
    sim = [
        json.loads(c[c.index("--data") + 1]) for c in commands(script_of("sim", fixture_report()))
    ]
    assert {p["kind"] for p in sim} >= {"migrate", "place", "release"}


def test_hostile_names_stay_inside_their_quotes() -> None:
    report = fixture_report(**{"train-a": json.dumps(HOSTILE)[1:-1]})
    for backend in BACKENDS:
        script = script_of(backend, report)
        bash_n(script)
        for words in commands(script):
            assert "reboot" not in " ".join(w for w in words if not w.startswith("{")), words
            if "--data" in words:
                assert json.loads(words[words.index("--data") + 1])["workload"]
        assert "\ntouch" not in script


def _unit_file(unit: str, settings: list[str]) -> str:
    section = {"service": "Service", "scope": "Scope", "slice": "Slice"}[unit.rpartition(".")[2]]
    body = "ExecStart=/bin/true\n" if section == "Service" else ""
    return f"[Unit]\nDescription=check\n[{section}]\n{body}" + "".join(f"{s}\n" for s in settings)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemctl_lines_are_accepted_by_systemd(tmp_path: Path) -> None:
    hints = PlanHints({"n1/train-a": WorkloadHints(cgroup="/system.slice/train-a.service")})
    script = script_of("systemd", fixture_report(), hints)
    lines = [c for c in commands(script) if c[:2] == ["systemctl", "set-property"]]
    assert lines[0] == [
        "systemctl", "set-property", "train-a.service", "AllowedCPUs=0-7", "AllowedMemoryNodes=0"
    ]  # fmt: skip
    assert "# systemd refuses this action: the workload is not a systemd unit" in script
    for number, (_, _, unit, *settings) in enumerate(lines):
        folder = tmp_path / str(number)
        folder.mkdir()
        (folder / unit).write_text(_unit_file(unit, settings))
        done = subprocess.run(
            ["systemd-analyze", "verify", "--man=no", str(folder / unit)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0 and "Unknown key" not in done.stderr, done.stderr
        assert "Failed to parse" not in done.stderr, done.stderr
    # the check itself fails on a wrong property
    (tmp_path / "bad.service").write_text(_unit_file("bad.service", ["AllowedCPUz=0-7"]))
    bad = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / "bad.service")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "Unknown key" in bad.stderr


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "notebook-0", "namespace": "ml"},
    "spec": {"containers": [{"name": "main", "image": "trainer:1"}]},
}
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "trainer", "namespace": "ml"},
    "spec": {
        "selector": {"matchLabels": {"app": "trainer"}},
        "template": {
            "metadata": {"labels": {"app": "trainer"}},
            "spec": copy.deepcopy(POD["spec"]),
        },
    },
}


def _validated(obj: dict[str, Any]) -> None:
    validate(obj, KUBERNETES_VERSION, strict=True)


def test_kubernetes_bodies_validate() -> None:
    hints = PlanHints(
        {
            "n8/notebook": WorkloadHints("ml", "notebook-0", "main"),
            "n1/train-a": WorkloadHints("ml", "train-a", "main"),
        }
    )
    report = fixture_report(**{"pending-c": "ml/pending-c", "job-b": "ml/job-b"})
    planner = planner_for("kubernetes", None, {})
    checked = 0
    for rec in report.recommendations:
        for action in rec.actions:
            plan = planner.plan(action, hints)
            for step in plan.steps:
                body = getattr(step, "body", None)
                if isinstance(body, list):  # a JSON patch: to a pod that has the gate
                    gated = merge_patch(POD, {"spec": {"schedulingGates": body[0]["value"]}})
                    _validated(json_patch(gated, body))
                elif isinstance(body, dict) and body.get("kind") == "Eviction":
                    _validated(body)
                else:
                    _validated(merge_patch(POD, body))
                checked += 1
            if action.kind == ActionKind.PIN and plan.notes:
                patch = json.loads(plan.notes[1].split("template: ", 1)[1])
                _validated(merge_patch(DEPLOYMENT, patch))
                checked += 1
    assert checked >= 3
    eviction = eviction_step("ml", "notebook-0").body
    assert isinstance(eviction, dict)
    _validated(eviction)
    with pytest.raises(Exception, match=r"affinty"):
        _validated(merge_patch(POD, {"spec": {"affinty": {}}}))


def test_a_dry_run_with_an_unknown_backend_is_a_usage_error() -> None:
    with pytest.raises(Exception, match="no plan for --resource-manager local"):
        planner_for("local", None, {})
    assert (
        planner_for("slurm", None, {})
        .plan(ActionRequest("x", ActionKind.PLACE, "not-a-job", "n1"))
        .refused
    )
