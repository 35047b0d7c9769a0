"""deploy/kubernetes/: every manifest validates offline, and the objects fit together.

Built-in kinds are checked with ``kubernetes-validate`` against the Kubernetes 1.29 schemas
in strict mode (unknown fields fail). The Prometheus Operator kinds have no schema there
(``SchemaNotFoundError``), so their required fields are checked by hand. The PrometheusRule
must be exactly what ``gen_prometheusrule.py`` writes and hold exactly the rule groups of
``alerts/*.rules.yml``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import promql_parser as pp
import pytest
import yaml
from kubernetes_validate import (  # type: ignore[import-untyped]
    SchemaNotFoundError,
    ValidationError,
    validate,
)

from tests.helpers import REPO
from tests.procs import require_binary

K8S = REPO / "deploy" / "kubernetes"
GENERATOR = K8S / "gen_prometheusrule.py"
RULE_FILE = K8S / "prometheusrule.yaml"
KUSTOMIZATION = K8S / "kustomization.yaml"
MANIFESTS = sorted(p for p in K8S.glob("*.yaml") if p != KUSTOMIZATION)
KUBERNETES_VERSION = "1.29.0"
NAMESPACE = "toposcope"
#: Kinds served by CRDs (Prometheus Operator): no schema in kubernetes-validate.
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
IMAGE_PREFIX = "ghcr.io/toposcope/toposcope:"


def _docs(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    assert docs, f"{path.name} holds no object"
    assert all(isinstance(d, dict) for d in docs)
    return docs


def _objects() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, doc) for path in MANIFESTS for doc in _docs(path)]


def _one(kind: str) -> dict[str, Any]:
    found = [doc for _, doc in _objects() if doc["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


def _pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = _one("DaemonSet")["spec"]["template"]["spec"]
    return spec


def _container() -> dict[str, Any]:
    containers = _pod_spec()["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def _kind_and_name(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def _generator(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATOR), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _alert_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = []
    for path in sorted((REPO / "alerts").glob("*.rules.yml")):
        groups.extend(yaml.safe_load(path.read_text(encoding="utf-8"))["groups"])
    return groups


def test_the_expected_objects_are_there() -> None:
    kinds = sorted(doc["kind"] for _, doc in _objects())
    assert kinds == sorted(
        [
            "Namespace",
            "ServiceAccount",
            "DaemonSet",
            "Service",
            "ServiceMonitor",
            "PrometheusRule",
        ]
    )


@pytest.mark.parametrize(
    ("name", "doc"),
    _objects(),
    ids=[f"{name}:{doc['kind']}" for name, doc in _objects()],
)
def test_manifest_validates(name: str, doc: dict[str, Any]) -> None:
    if doc["kind"] in CRD_KINDS:
        with pytest.raises(SchemaNotFoundError):
            validate(doc, KUBERNETES_VERSION, strict=True)
        return
    try:
        validate(doc, KUBERNETES_VERSION, strict=True)
    except ValidationError as exc:
        where = "/".join(str(part) for part in exc.path)
        pytest.fail(f"{name} {doc['kind']} at {where}: {exc.message}")


def test_validation_is_strict() -> None:
    """Guard: a misspelt field deep in the DaemonSet must fail, or the test above proves nothing."""
    daemonset = _one("DaemonSet")
    daemonset["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilties"] = {}
    with pytest.raises(ValidationError):
        validate(daemonset, KUBERNETES_VERSION, strict=True)


def test_namespaced_objects_live_in_toposcope() -> None:
    namespace = _one("Namespace")
    assert namespace["metadata"]["name"] == NAMESPACE
    # hostPID, hostPath and SYS_PTRACE are forbidden by the baseline Pod Security Standard.
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for name, doc in _objects():
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE, name


def test_daemonset_reads_the_host_read_only() -> None:
    spec = _pod_spec()
    container = _container()
    assert spec["hostPID"] is True
    assert spec.get("hostNetwork", False) is False
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host_paths == {"sys": "/sys", "proc": "/proc", "root": "/"}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    for volume in host_paths:
        assert mounts[volume]["readOnly"] is True, volume
    assert {mounts[v]["mountPath"] for v in host_paths} == {"/host/sys", "/host/proc", "/host/root"}
    args = container["args"]
    assert args[0] == "exporter"
    for flag in (
        "--path.sysfs=/host/sys",
        "--path.procfs=/host/proc",
        "--path.rootfs=/host/root",
        "--listen=:9847",
    ):
        assert flag in args
    assert container["ports"] == [{"name": "metrics", "containerPort": 9847, "protocol": "TCP"}]


def test_daemonset_least_privilege() -> None:
    spec = _pod_spec()
    container = _container()
    security = container["securityContext"]
    assert security["capabilities"]["drop"] == ["ALL"]
    assert sorted(security["capabilities"]["add"]) == ["DAC_READ_SEARCH", "SYS_PTRACE"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["privileged"] is False
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    assert _one("ServiceAccount")["automountServiceAccountToken"] is False
    resources = container["resources"]
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}
    probes = (container["livenessProbe"], container["readinessProbe"])
    assert {probe["httpGet"]["path"] for probe in probes} == {"/-/healthy", "/-/ready"}


def test_image_is_the_project_version() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "version"
    ]
    assert _container()["image"] == f"{IMAGE_PREFIX}{version}"


def test_service_is_headless_and_selects_the_exporter_pods() -> None:
    service = _one("Service")
    pod_labels = _one("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    assert port["port"] == 9847
    assert port["targetPort"] in {p["name"] for p in _container()["ports"]}


def test_servicemonitor_required_fields() -> None:
    monitor = _one("ServiceMonitor")
    service = _one("Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["name"]
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert NAMESPACE in spec["namespaceSelector"]["matchNames"]
    (endpoint,) = spec["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert re.fullmatch(r"\d+[smh]", endpoint["interval"])
    relabel = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    assert relabel["hostname"] == ["__meta_kubernetes_pod_node_name"]


def test_scrape_job_is_one_the_exporter_alerts_watch() -> None:
    """The operator names the job after the Service; ToposcopeExporterDown must select it."""
    job = _one("Service")["metadata"]["name"]
    (rule,) = [
        r for g in _alert_groups() for r in g["rules"] if r.get("alert") == "ToposcopeExporterDown"
    ]
    matchers: list[tuple[pp.MatchOp, str]] = []

    def visit(node: object) -> None:
        if isinstance(node, pp.VectorSelector):
            matchers.extend((m.op, m.value) for m in node.matchers.matchers if m.name == "job")

    pp.walk(pp.parse(rule["expr"]), pre_visit=visit)
    assert matchers
    for op, pattern in matchers:
        matched = re.fullmatch(pattern, job) is not None
        assert matched == (op == pp.MatchOp.Re), (op, pattern, job)


def test_prometheusrule_required_fields() -> None:
    rule = _one("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["name"]
    groups = rule["spec"]["groups"]
    assert groups
    for group in groups:
        assert isinstance(group["name"], str) and group["rules"]
        for item in group["rules"]:
            assert ("alert" in item) != ("record" in item), item
            assert isinstance(item["expr"], str) and item["expr"].strip()
            for key in ("labels", "annotations"):
                assert all(isinstance(v, str) for v in item.get(key, {}).values())


def test_prometheusrule_is_what_the_generator_writes() -> None:
    printed = _generator("-o", "-")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == RULE_FILE.read_text(encoding="utf-8"), (
        "deploy/kubernetes/prometheusrule.yaml is stale: "
        "run python deploy/kubernetes/gen_prometheusrule.py"
    )
    check = _generator("--check")
    assert check.returncode == 0, check.stderr


def test_generator_check_reports_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "prometheusrule.yaml"
    stale.write_text(RULE_FILE.read_text(encoding="utf-8").replace("for: 5m", "for: 6m"))
    result = _generator("--check", "--output", str(stale))
    assert result.returncode == 1
    assert "stale" in result.stderr


def test_prometheusrule_holds_exactly_the_alert_groups() -> None:
    assert _one("PrometheusRule")["spec"]["groups"] == _alert_groups()


def test_prometheusrule_groups_pass_promtool(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": _one("PrometheusRule")["spec"]["groups"]}))
    result = subprocess.run(
        [require_binary("promtool"), "check", "rules", str(rules)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load(KUSTOMIZATION.read_text(encoding="utf-8"))
    assert kustomization["kind"] == "Kustomization"
    assert sorted(kustomization["resources"]) == [p.name for p in MANIFESTS]
    # Namespace first, so that `kubectl apply -f` in this order works too.
    assert kustomization["resources"][0] == "namespace.yaml"


def test_kustomize_builds_the_same_objects() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (kustomize build check only)")
    result = subprocess.run(
        [kubectl, "kustomize", str(K8S)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    built = [d for d in yaml.safe_load_all(result.stdout) if d is not None]
    assert sorted(map(_kind_and_name, built)) == sorted(_kind_and_name(d) for _, d in _objects())


def test_docs_cover_every_manifest() -> None:
    text = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    for path in [*MANIFESTS, KUSTOMIZATION, GENERATOR]:
        assert path.name in text, path.name
