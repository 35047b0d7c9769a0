"""Ready-to-apply commands of ``toposcope advise --dry-run``, per resource manager."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.helpers import FIXTURES
from toposcope.advisor.formatters.commands import (
    RENDERERS,
    CommandContext,
    render_commands,
)
from toposcope.report.decoder import report_from_json
from toposcope.report.recommendation import Report

REPORT_JSON = FIXTURES / "advisor" / "report.json"


def fixture_report(**renames: str) -> Report:
    text = REPORT_JSON.read_text()
    for old, new in renames.items():
        text = text.replace(old, new)
    return report_from_json(text)


def command_lines(script: str) -> list[str]:
    return [line for line in script.splitlines() if line and not line.startswith("#")]


def test_every_line_is_a_comment_or_a_command_that_shell_splits() -> None:
    report = fixture_report()
    for backend in RENDERERS:
        script = render_commands(report, backend, CommandContext())
        for line in script.splitlines():
            assert line.startswith("# ") or shlex.split(line), (backend, line)


def test_slurm_steers_requeues_and_explains_what_it_cannot_do() -> None:
    report = fixture_report(**{"pending-c": "slurm-job-42", "job-b": "slurm-job-7"})
    script = render_commands(report, "slurm", CommandContext())
    lines = command_lines(script)
    assert "scontrol update JobId=42 ReqNodeList=n8" in lines
    migrate = lines.index("scontrol requeuehold 7")
    assert lines[migrate + 1 : migrate + 3] == [
        "scontrol update JobId=7 ReqNodeList=n8 StartTime=now",
        "scontrol release 7",
    ]
    assert "# Slurm cannot pin train-a: the workload is not a Slurm job" in script
    assert "# advice for a person: no action to run" in script


def test_http_backends_post_the_action_without_the_token() -> None:
    report = fixture_report()
    script = render_commands(report, "agent", CommandContext())
    calls = command_lines(script)
    assert len(calls) == sum(len(r.actions) for r in report.recommendations)
    words = shlex.split(calls[0])
    assert words[:4] == ["curl", "-fsS", "-X", "POST"]
    assert "Authorization: Bearer $TOKEN" in words
    assert words[-1] == "http://n8:9848/api/v1/actions"  # the agent of the action's node
    body = json.loads(words[words.index("--data") + 1])
    assert body["request_id"] == report.by_gain()[0].actions[0].request_id
    sim = render_commands(report, "sim", CommandContext(rm_url="http://sim:9850/api/v1/"))
    assert all(shlex.split(c)[-1] == "http://sim:9850/api/v1/actions" for c in command_lines(sim))
    default = render_commands(report, "sim", CommandContext())
    assert "http://127.0.0.1:9850/api/v1/actions" in default


def test_hostile_names_stay_quoted_or_are_refused() -> None:
    report = fixture_report(**{"pending-c": "x'; rm -rf ~; '"})
    script = render_commands(report, "sim", CommandContext())
    for line in command_lines(script):
        assert shlex.split(line)[0] == "curl"
    body = json.loads(shlex.split(command_lines(script)[1])[-2])
    assert body["workload"] == "x'; rm -rf ~; '"  # the name reaches the API as it is
    slurm = render_commands(report, "slurm", CommandContext())
    assert "# Slurm cannot place x'; rm -rf ~; ': the workload is not a Slurm job" in slurm


@pytest.mark.parametrize(
    ("workload", "kind", "path"),
    [("pending-c", "Binding", "binding"), ("job-b", "Eviction", "eviction")],
)
def test_kubernetes_binds_pending_pods_and_evicts_moved_ones(
    workload: str, kind: str, path: str
) -> None:
    pods = {f"n8/{workload}": ("ml", f"{workload}-0")}
    script = render_commands(fixture_report(), "kubernetes", CommandContext(pods=pods))
    line = next(c for c in command_lines(script) if f"/pods/{workload}-0/" in c)
    words = shlex.split(line)
    assert words[:2] == ["printf", "%s"]
    assert json.loads(words[2])["kind"] == kind
    assert words[words.index("|") + 1 :] == [
        "kubectl",
        "create",
        "--raw",
        f"/api/v1/namespaces/ml/pods/{workload}-0/{path}",
        "-f",
        "-",
    ]
    assert "# kubectl cannot pin train-a" in script


def test_kubernetes_pending_pods_are_named_namespace_slash_pod() -> None:
    report = fixture_report(**{"pending-c": "ml/trainer-0"})
    script = render_commands(report, "kubernetes", CommandContext())
    assert "kubectl create --raw /api/v1/namespaces/ml/pods/trainer-0/binding -f -" in script
    assert "# kubectl cannot migrate job-b: no valid pod and namespace known" in script
