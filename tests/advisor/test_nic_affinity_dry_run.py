"""nic-affinity's advice as the dry run prints it: a Kubernetes owner's template patch, the
Slurm forms, or the environment, every script valid for ``bash -n`` and every body valid
against the Kubernetes schemas once merged into its owner.
"""

from __future__ import annotations

import copy
import json
import shlex
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from kubernetes_validate import validate  # type: ignore[import-untyped]

from tests.advisor.test_dry_run import DEPLOYMENT, KUBERNETES_VERSION, bash_n, fixture_report
from tests.advisor.test_policy_nic_affinity import POD, SLURM, loaded, model_of, used
from toposcope.advisor.dry_run import planner_for, render_dry_run
from toposcope.advisor.nic_advice import (
    STRATEGIC_MERGE,
    AdviceError,
    config_lines,
    hca_value,
    kube_plan,
    nccl_env,
    slurm_forms,
    template_patch,
)
from toposcope.advisor.policies.nic_affinity import NicAffinity, NicAffinitySettings
from toposcope.advisor.report_schema import report_schema
from toposcope.report.decoder import report_from_json
from toposcope.rm.plan import HttpStep, PlanHints

ENV = nccl_env(hca_value([("mlx5_0", ("1",)), ("mlx5_1", ("1",))]), "PXB", False)


def proposed(owner: tuple[str, str], container: str = "main") -> dict[str, Any]:
    return {
        "workload": "pod-trainer",
        "node": "dgx-a100-1",
        "env": ENV,
        "slurm": slurm_forms(ENV, "4242", "dgx-a100-1"),
        "kubernetes": {
            "namespace": "ml",
            "pod": "trainer-7d9f-abcde",
            "container": container,
            "owner_kind": owner[0],
            "owner_name": owner[1],
            "template_patch": template_patch(container, ENV, {"rdma/hca_a": "1"}, ["rdma/hca_c"]),
        },
    }


def strategic_merge(owner: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """The owner with the patch's containers merged by name (env merged by name, resources by
    key, null keys deleted), as the API server's strategic merge does for a pod template; the
    test below has real kubectl do the same.
    """
    merged = copy.deepcopy(owner)
    containers = merged["spec"]["template"]["spec"]["containers"]
    for change in patch["spec"]["template"]["spec"]["containers"]:
        (target,) = [c for c in containers if c["name"] == change["name"]]
        env = {e["name"]: e for e in target.get("env", [])}
        env.update({e["name"]: e for e in change["env"]})
        target["env"] = list(env.values())
        for part, amounts in change.get("resources", {}).items():  # a null key is deleted
            kept = {**target.get("resources", {}).get(part, {}), **amounts}
            target.setdefault("resources", {})[part] = {
                k: v for k, v in kept.items() if v is not None
            }
    return merged


def test_a_deployments_template_is_patched_by_a_strategic_merge() -> None:
    plan = kube_plan("pod-trainer", "dgx-a100-1", proposed(("Deployment", "trainer"))["kubernetes"])
    (step,) = plan.steps
    assert isinstance(step, HttpStep) and step.content_type == STRATEGIC_MERGE
    assert step.url == "/apis/apps/v1/namespaces/ml/deployments/trainer"
    assert isinstance(step.body, dict)
    validate(strategic_merge(DEPLOYMENT, step.body), KUBERNETES_VERSION, strict=True)
    lines = config_lines(proposed(("Deployment", "trainer")), "kubernetes")
    script = "\n".join(lines) + "\n"
    bash_n(script)
    (command,) = [shlex.split(line) for line in lines if not line.startswith("#")]
    assert command[:4] == ["kubectl", "patch", "deployments.apps", "trainer"]
    assert "--type=strategic" in command and "--namespace" in command


def test_a_jobs_immutable_template_is_refused_with_the_patch_as_a_note() -> None:
    lines = config_lines(proposed(("Job", "llm-pretrain")), "kubernetes")
    bash_n("\n".join(lines) + "\n")
    assert all(line.startswith("#") for line in lines)
    text = "\n".join(lines)
    assert "refuses this action" in text and "NCCL_IB_HCA" in text


def test_slurm_and_other_backends_print_comments_only() -> None:
    for backend in ("slurm", "sim", "agent"):
        lines = config_lines(proposed(("", "")), backend)
        bash_n("\n".join(lines) + "\n")
        assert all(line.startswith("#") for line in lines)
    slurm = "\n".join(config_lines(proposed(("", "")), "slurm"))
    assert "TaskProlog" in slurm and "export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1" in slurm
    other = "\n".join(config_lines(proposed(("", "")), "sim"))
    assert "# NCCL_IB_HCA==mlx5_0:1,mlx5_1:1" in other


def test_a_single_nic_gets_an_export_flag() -> None:
    env = nccl_env(hca_value([("mlx5_0", ("1",))]), "PIX", True)
    forms = slurm_forms(env, "77", "node-1")
    assert forms["export_flag"] == (
        "--export=ALL,NCCL_CROSS_NIC=0,NCCL_IB_HCA==mlx5_0:1,NCCL_NET_GDR_LEVEL=PIX"
    )
    assert env == {"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_NET_GDR_LEVEL": "PIX", "NCCL_CROSS_NIC": "0"}


def test_a_nic_without_known_ports_is_named_whole() -> None:
    assert hca_value([("mlx5_0", ()), ("mlx5_1", ("1", "2"))]) == "=mlx5_0,mlx5_1:1,mlx5_1:2"


@pytest.mark.parametrize(
    ("call", "what"),
    [
        (lambda: hca_value([("mlx5_0 ", ())]), "NIC name"),
        (lambda: hca_value([("mlx5_0", ("1;id",))]), "port"),
        (lambda: hca_value([]), "no NIC"),
        (lambda: slurm_forms(ENV, "42; id", "n1"), "Slurm job id"),
        (lambda: slurm_forms(ENV, "42", "n1;id"), "host name"),
        (lambda: template_patch("Main", ENV, {}), "container name"),
        (
            lambda: kube_plan(
                "w", "n", {**proposed(("Deployment", "a/b"))["kubernetes"]}
            ),
            "owner name",
        ),
        (
            lambda: kube_plan("w", "n", {**proposed(("Deployment", "x"))["kubernetes"],
                                         "namespace": "ML"}),
            "namespace",
        ),
    ],
)  # fmt: skip
def test_names_from_metrics_are_checked_before_any_command(call: Any, what: str) -> None:
    with pytest.raises(AdviceError, match=what):
        call()


@pytest.mark.parametrize("backend", ["kubernetes", "slurm", "sim"])
def test_the_dry_run_prints_a_reports_nic_advice_for_each_backend(backend: str) -> None:
    """A report with one rank per kind (a Slurm job, a Deployment's pod) read back from its
    JSON, rendered by the dry run as it renders every report.
    """
    far_job = used(SLURM, "mlx5_2", "nccl_env", "SYS", near=False)
    far_pod = used(POD, "mlx5_2", "nccl_env", "SYS", near=False)
    recs = [
        *NicAffinity().evaluate(model_of(loaded(SLURM, [far_job]))).recommendations,
        *NicAffinity()
        .evaluate(model_of(loaded({**POD, "container": "main"}, [
            replace(far_pod, labels={**far_pod.labels, "container": "main"})
        ], owner=("Deployment", "trainer"))))
        .recommendations,
    ]  # fmt: skip
    assert len(recs) == 2
    report = replace(fixture_report(), recommendations=tuple(recs))
    again = report_from_json(json.dumps(report.to_dict()))
    script = render_dry_run(again, backend, planner_for(backend, None, {}), PlanHints())
    bash_n(script)
    assert "advice for a person" not in script
    assert script.count("config (never applied): NCCL environment") == 2
    if backend == "kubernetes":
        assert "kubectl patch deployments.apps trainer --namespace research --type=strategic" in (
            script
        )
    if backend == "slurm":
        assert "# TaskProlog lines" in script and '"$SLURM_JOB_ID" = 4242' in script


def test_a_report_edited_to_hold_a_bad_name_prints_a_comment() -> None:
    far = used(SLURM, "mlx5_2", "nccl_env", "SYS", near=False)
    (rec,) = NicAffinity().evaluate(model_of(loaded(SLURM, [far]))).recommendations
    bad = replace(rec, proposed={**rec.proposed, "slurm": None, "kubernetes": {
        **proposed(("Deployment", "x; reboot"))["kubernetes"]}})  # fmt: skip
    report = replace(fixture_report(), recommendations=(bad,))
    script = render_dry_run(report, "kubernetes", planner_for("kubernetes", None, {}), PlanHints())
    bash_n(script)
    assert "nic-affinity advice not printed: owner name" in script
    assert "reboot" not in "\n".join(line for line in script.splitlines() if line[:1] != "#")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")
def test_real_kubectl_merges_the_printed_patch_into_the_owner(tmp_path: Path) -> None:
    """The printed ``kubectl patch`` body, applied by kubectl itself to the owner's manifest
    (``--local``: no API server): the container's other variables and the other containers
    stay, the rank's old ``NCCL_IB_HCA`` is replaced, and the result validates.
    """
    owner: dict[str, Any] = copy.deepcopy(DEPLOYMENT)
    containers = owner["spec"]["template"]["spec"]["containers"]
    containers[0]["env"] = [
        {"name": "KEEP", "value": "1"},
        {"name": "NCCL_IB_HCA", "value": "mlx5_2"},
    ]
    far = {"rdma/hca_c": "1", "cpu": "2"}
    containers[0]["resources"] = {"limits": dict(far), "requests": dict(far)}
    containers.insert(0, {"name": "sidecar", "image": "proxy:1"})
    manifest = tmp_path / "deployment.json"
    manifest.write_text(json.dumps(owner))
    lines = config_lines(proposed(("Deployment", "trainer")), "kubernetes")
    (command,) = [shlex.split(line) for line in lines if not line.startswith("#")]
    body = command[command.index("-p") + 1]
    done = subprocess.run(
        ["kubectl", "patch", "--local", "-f", str(manifest), "--type=strategic", "-p", body,
         "-o", "json"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    patched = json.loads(done.stdout)
    validate(patched, KUBERNETES_VERSION, strict=True)
    sidecar, main = patched["spec"]["template"]["spec"]["containers"]
    assert sidecar == {"name": "sidecar", "image": "proxy:1"}
    env = {e["name"]: e["value"] for e in main["env"]}
    assert env == {"KEEP": "1", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_NET_GDR_LEVEL": "PXB"}
    assert main["resources"]["limits"] == {"rdma/hca_a": "1", "cpu": "2"}
    assert main["resources"]["requests"] == {"rdma/hca_a": "1", "cpu": "2"}


def test_a_report_of_nic_advice_is_valid_against_the_report_schema() -> None:
    """Both forms (a Slurm job measured, a pod with device plugin resources swapped) in one
    report, as JSON, against the published schema; then read back unchanged.
    """
    far_pod = used(POD, "mlx5_2", "uverbs", "SYS", near=False)
    pairs = ("mlx5_0=rdma/hca_a", "mlx5_1=rdma/hca_b", "mlx5_2=rdma/hca_c")
    policy = NicAffinity(NicAffinitySettings(rdma_resources=pairs))
    data = loaded(POD, [far_pod], owner=("StatefulSet", "llm"))
    far_job = used(SLURM, "mlx5_2", "nccl_env", "SYS", near=False)
    recs = (
        *policy.evaluate(model_of(data)).recommendations,
        *NicAffinity().evaluate(model_of(loaded(SLURM, [far_job]))).recommendations,
    )
    document = json.loads(json.dumps(replace(fixture_report(), recommendations=recs).to_dict()))
    jsonschema.validate(document, report_schema())
    again = report_from_json(json.dumps(document))
    assert {r.id: r.proposed for r in again.recommendations} == {r.id: r.proposed for r in recs}
