"""Plans as shell lines (toposcope.rm.plan_script): each step's spelling, comments, quoting."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from toposcope.rm import ActionKind, ActionRequest
from toposcope.rm.plan import CommandStep, FileStep, HttpStep, Plan, WaitStep, refused
from toposcope.rm.plan_script import MAX_COMMENT, comment, plan_lines, step_lines

REQUEST = ActionRequest("r-1", ActionKind.PIN, "w", "n1", [0])


def bash_ok(lines: list[str]) -> bool:
    script = "\n".join(lines) + "\n"
    return subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0


def test_a_comment_is_one_line_with_control_characters_escaped() -> None:
    line = comment("first\nsecond\x1b[31m   third")
    assert line == "# first second\\x1b[31m third"
    assert "\n" not in comment("a\r\nb") and len(comment("x" * 5000)) == MAX_COMMENT + 2


def test_a_command_is_shell_quoted_word_by_word() -> None:
    argv = ("scontrol", "update", "JobId=1", "Comment=a'b; rm -rf /")
    (line,) = step_lines(CommandStep(argv))
    assert shlex.split(line) == list(argv) and bash_ok([line])


def test_an_api_request_keeps_its_token_out_and_its_body_intact() -> None:
    body = {"workload": "it's $(here)", "cpus": [0]}
    (line,) = step_lines(HttpStep("POST", "http://n1:9848/api/v1/actions", body))
    words = shlex.split(line)
    assert words[:3] == ["curl", "-fsS", "-X"] and words[-1] == "http://n1:9848/api/v1/actions"
    assert json.loads(words[words.index("--data") + 1]) == body
    assert "Authorization: Bearer $TOKEN" in words
    user = (("X-SLURM-USER-NAME", "o'neil"),)
    slurm = HttpStep("POST", "http://s:6820/slurm/v0.0.38/job/1", {}, "slurmrestd", headers=user)
    (rest,) = step_lines(slurm)
    assert "X-SLURM-USER-TOKEN: $SLURM_JWT" in shlex.split(rest)
    assert "X-SLURM-USER-NAME: o'neil" in shlex.split(rest)


def test_kubernetes_requests_are_kubectl_lines() -> None:
    patch = HttpStep(
        "PATCH",
        "/apis/apps/v1/namespaces/ml/deployments/train/scale",
        {"spec": {"replicas": 0}},
        "kubernetes",
        "application/merge-patch+json",
        "scale to 0",
    )
    what, line = step_lines(patch)
    assert what == "# scale to 0"
    assert shlex.split(line) == [
        "kubectl", "patch", "deployments.apps", "train", "--namespace", "ml",
        "--subresource=scale", "--type=merge", "-p", '{"spec":{"replicas":0}}',
    ]  # fmt: skip
    body = {"apiVersion": "policy/v1", "kind": "Eviction"}
    (post,) = step_lines(
        HttpStep("POST", "/api/v1/namespaces/ml/pods/a/eviction", body, "kubernetes")
    )
    assert post.endswith("| kubectl create --raw /api/v1/namespaces/ml/pods/a/eviction -f -")
    with pytest.raises(ValueError, match="no kubectl form"):
        step_lines(HttpStep("DELETE", "/api/v1/namespaces/ml/pods/a", None, "kubernetes"))


def test_files_and_waits() -> None:
    (write,) = step_lines(FileStep("/sys/fs/cgroup/a b/cpuset.cpus", "0-3"))
    assert shlex.split(write) == ["printf", "%s\\n", "0-3", ">", "/sys/fs/cgroup/a b/cpuset.cpus"]
    assert step_lines(WaitStep("the job ended")) == ["# wait until the job ended"]
    waiting = step_lines(WaitStep("it ended", 30, ("sh", "-c", "test -z x")))
    assert waiting == [
        "# wait until it ended (at most 30 s)",
        "until sh -c 'test -z x'; do sleep 1; done",
    ]
    assert bash_ok([*waiting, write])


def test_a_plan_lists_checks_unknowns_refusals_and_notes_as_comments() -> None:
    plan = Plan(
        REQUEST,
        "agent",
        (CommandStep(("true",)),),
        checked=("it runs",),
        unknown=("its owner: not read",),
        notes=("see the docs",),
    )
    assert plan_lines(plan) == [
        "# agent: pin w on n1 (r-1)",
        "# checked: it runs",
        "# not checked: its owner: not read",
        "true",
        "# note: see the docs",
    ]
    no = refused(REQUEST, "slurm", "Slurm does not pin")
    assert (
        not no.runnable and plan_lines(no)[-1] == "# slurm refuses this action: Slurm does not pin"
    )
