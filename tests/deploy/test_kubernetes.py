"""deploy/kubernetes/: every manifest validates offline, and the objects fit together.

Built-in kinds are checked with ``kubernetes-validate`` against the Kubernetes 1.29 schemas
in strict mode (unknown fields fail). The Prometheus Operator kinds have no schema there
(``SchemaNotFoundError``), so their required fields are checked by hand. The PrometheusRule
must be exactly what ``gen_prometheusrule.py`` writes and hold exactly the rule groups of
``alerts/*.rules.yml``. Every container's ``args`` parse with the real ``toposcope`` parser,
and the advisor, agent and their Secrets, volumes and network policy fit together: the
advisor recommends only unless the ``apply-with-agents`` component is added, keeps its
SQLite file on the PersistentVolumeClaim and reaches each node's agent by node name.
"""

from __future__ import annotations

import os
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

from tests.deploy.cliargs import parse_cli
from tests.helpers import REPO
from tests.procs import require_binary

K8S = REPO / "deploy" / "kubernetes"
GENERATOR = K8S / "gen_prometheusrule.py"
RULE_FILE = K8S / "prometheusrule.yaml"
KUSTOMIZATION = K8S / "kustomization.yaml"
APPLY_COMPONENT = K8S / "components" / "apply-with-agents"
MANIFESTS = sorted(p for p in K8S.glob("*.yaml") if p != KUSTOMIZATION)
KUBERNETES_VERSION = "1.29.0"
NAMESPACE = "toposcope"
#: Kinds served by CRDs (Prometheus Operator): no schema in kubernetes-validate.
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
#: where the manifests' images live until users name their own registry (docs/deploy.md)
REGISTRY = "registry.example.com/"
COMPONENTS = K8S / "components"
#: what the downward API puts in for $(NODE_NAME) on a node, for parsing args
NODE = "gpu-node-01"
#: the only container allowed host-level privileges, and which (documented in each manifest)
HOST_PRIVILEGES = {
    "toposcope-exporter": {"SYS_PTRACE", "DAC_READ_SEARCH"},
    "toposcope-agent": {"SYS_NICE", "SYS_PTRACE"},
}
AGENT_PORT = 9848
#: the kubelet's pod-resources directory and socket, mounted at the same paths
POD_RESOURCES = "/var/lib/kubelet/pod-resources"
SOCKET = f"{POD_RESOURCES}/kubelet.sock"
ADVISOR_PORT = 9849


def _docs(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    assert docs, f"{path.name} holds no object"
    assert all(isinstance(d, dict) for d in docs)
    return docs


def _objects() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, doc) for path in MANIFESTS for doc in _docs(path)]


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        doc
        for _, doc in _objects()
        if doc["kind"] == kind and name in (None, doc["metadata"]["name"])
    ]
    assert len(found) == 1, f"{len(found)} {kind} objects named {name or 'anything'}"
    return found[0]


def _workloads() -> list[dict[str, Any]]:
    return [doc for _, doc in _objects() if doc["kind"] in ("DaemonSet", "Deployment")]


def _pod_spec(kind: str = "DaemonSet", name: str = "toposcope-exporter") -> dict[str, Any]:
    spec: dict[str, Any] = _one(kind, name)["spec"]["template"]["spec"]
    return spec


def _container(kind: str = "DaemonSet", name: str = "toposcope-exporter") -> dict[str, Any]:
    containers = _pod_spec(kind, name)["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def _advisor() -> dict[str, Any]:
    return _container("Deployment", "toposcope-advisor")


def _agent() -> dict[str, Any]:
    return _container("DaemonSet", "toposcope-agent")


def _args(container: dict[str, Any]) -> list[str]:
    """The container's args with the downward-API variables filled in as on a node."""
    return [arg.replace("$(NODE_NAME)", NODE) for arg in container["args"]]


def _mount_of(pod: dict[str, Any], container: dict[str, Any], path: str) -> dict[str, Any]:
    """The volume (from ``pod``'s volumes) whose mount in ``container`` holds ``path``."""
    mounts = [
        m for m in container["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    assert mounts, f"nothing mounted above {path}"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    return {"mount": mount, "volume": volume}


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
    found = sorted(map(_kind_and_name, (doc for _, doc in _objects())))
    assert found == sorted(
        [
            ("Namespace", "toposcope"),
            ("ServiceAccount", "toposcope-exporter"),
            ("DaemonSet", "toposcope-exporter"),
            ("Service", "toposcope-exporter"),
            ("ServiceMonitor", "toposcope-exporter"),
            ("PrometheusRule", "toposcope-rules"),
            ("ServiceAccount", "toposcope-advisor"),
            ("Deployment", "toposcope-advisor"),
            ("Role", "toposcope-advisor-leader-election"),
            ("RoleBinding", "toposcope-advisor-leader-election"),
            ("PersistentVolumeClaim", "toposcope-advisor-state"),
            ("Service", "toposcope-advisor"),
            ("ServiceMonitor", "toposcope-advisor"),
            ("ServiceAccount", "toposcope-agent"),
            ("DaemonSet", "toposcope-agent"),
            ("NetworkPolicy", "toposcope-agent"),
        ]
    )
    # No cluster-wide RBAC; the one Role is the advisor's Lease (advisor-leader-rbac.yaml).
    assert not {kind for kind, _ in found} & {"ClusterRole", "ClusterRoleBinding"}


def test_the_advisor_may_touch_its_lease_and_nothing_else() -> None:
    role = _one("Role", "toposcope-advisor-leader-election")
    assert {(tuple(r["apiGroups"]), tuple(r["resources"])) for r in role["rules"]} == {
        (("coordination.k8s.io",), ("leases",))
    }
    verbs = {v for r in role["rules"] for v in r["verbs"]}
    assert verbs == {"get", "create", "update"}
    args = parse_cli(_args(_advisor()))
    for rule in role["rules"]:
        if "create" not in rule["verbs"]:
            assert rule["resourceNames"] == [args.leader_elect_resource_name]
    binding = _one("RoleBinding", "toposcope-advisor-leader-election")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "toposcope-advisor", "namespace": "toposcope"}
    ]


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
    daemonset = _one("DaemonSet", "toposcope-exporter")
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
    assert host_paths == {
        "sys": "/sys",
        "proc": "/proc",
        "root": "/",
        "pod-resources": POD_RESOURCES,
    }
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    for volume in host_paths:
        assert mounts[volume]["readOnly"] is True, volume
    assert {mounts[v]["mountPath"] for v in host_paths} == {
        "/host/sys",
        "/host/proc",
        "/host/root",
        POD_RESOURCES,
    }
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
    assert _one("ServiceAccount", "toposcope-exporter")["automountServiceAccountToken"] is False
    resources = container["resources"]
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}
    probes = (container["livenessProbe"], container["readinessProbe"])
    assert {probe["httpGet"]["path"] for probe in probes} == {"/-/healthy", "/-/ready"}


def test_image_is_the_release_version_in_the_placeholder_registry() -> None:
    """Images carry the version a source tree without git tags builds as (no image is
    published: users build, push and name their registry in kustomization.yaml)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    version = pyproject["tool"]["setuptools_scm"]["fallback_version"]
    kustomization = yaml.safe_load(KUSTOMIZATION.read_text(encoding="utf-8"))
    listed = {image["name"]: image["newTag"] for image in kustomization["images"]}
    for workload in _workloads():
        for container in workload["spec"]["template"]["spec"]["containers"]:
            name, _, tag = container["image"].rpartition(":")
            assert name.startswith(REGISTRY) and tag == version, container["image"]
            assert listed[name] == version, name


@pytest.mark.parametrize("name", ["toposcope-exporter", "toposcope-agent"])
def test_daemonsets_are_node_critical_and_linux_only(name: str) -> None:
    pod = _pod_spec("DaemonSet", name)
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}


def _kustomize(folder: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize folder`` builds (skips without kubectl)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (kustomize build check only)")
    result = subprocess.run(
        [kubectl, "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


def _overlay(tmp_path: Path, *components: str) -> list[dict[str, Any]]:
    """The objects kustomize builds from the base with ``components`` added."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    kustomization = {
        "resources": [os.path.relpath(K8S, overlay)],
        "components": [os.path.relpath(COMPONENTS / c, overlay) for c in components],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return _kustomize(overlay)


def test_gpu_nodes_only_component_selects_gpu_nodes(tmp_path: Path) -> None:
    built = _overlay(tmp_path, "gpu-nodes-only")
    daemonsets = [d for d in built if d["kind"] == "DaemonSet"]
    assert {d["metadata"]["name"] for d in daemonsets} == {"toposcope-exporter", "toposcope-agent"}
    for daemonset in daemonsets:
        assert daemonset["spec"]["template"]["spec"]["nodeSelector"] == {
            "kubernetes.io/os": "linux",
            "nvidia.com/gpu.present": "true",
        }
        validate(daemonset, KUBERNETES_VERSION, strict=True)


def test_kube_prometheus_stack_component_labels_what_its_prometheus_selects(
    tmp_path: Path,
) -> None:
    built = _overlay(tmp_path, "kube-prometheus-stack")
    selected = [d for d in built if d["kind"] in CRD_KINDS]
    assert sorted(_kind_and_name(d) for d in selected) == [
        ("PrometheusRule", "toposcope-rules"),
        ("ServiceMonitor", "toposcope-advisor"),
        ("ServiceMonitor", "toposcope-exporter"),
    ]
    for doc in selected:
        assert doc["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    for doc in built:
        if doc["kind"] not in CRD_KINDS:
            assert "release" not in doc["metadata"].get("labels", {}), doc["metadata"]["name"]


def test_service_is_headless_and_selects_the_exporter_pods() -> None:
    service = _one("Service", "toposcope-exporter")
    pod_labels = _one("DaemonSet", "toposcope-exporter")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    assert port["port"] == 9847
    assert port["targetPort"] in {p["name"] for p in _container()["ports"]}


@pytest.mark.parametrize("name", ["toposcope-exporter", "toposcope-advisor"])
def test_servicemonitor_required_fields(name: str) -> None:
    monitor = _one("ServiceMonitor", name)
    service = _one("Service", name)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    # ... and only that Service: the exporter's monitor must not scrape the advisor
    for _, other in _objects():
        if other["kind"] == "Service" and other["metadata"]["name"] != name:
            labels = other["metadata"]["labels"].items()
            assert not spec["selector"]["matchLabels"].items() <= labels, other["metadata"]
    assert NAMESPACE in spec["namespaceSelector"]["matchNames"]
    (endpoint,) = spec["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert re.fullmatch(r"\d+[smh]", endpoint["interval"])
    if name == "toposcope-exporter":
        relabelings = endpoint["relabelings"]
        relabel = {r["targetLabel"]: r["sourceLabels"] for r in relabelings if "targetLabel" in r}
        assert relabel["hostname"] == ["__meta_kubernetes_pod_node_name"]
        # workload series carry their pod's namespace/pod/container: the target's own go
        dropped = [r["regex"] for r in relabelings if r["action"] == "labeldrop"]
        assert dropped and all(
            re.fullmatch(dropped[0], label) for label in ("namespace", "pod", "container")
        )


@pytest.mark.parametrize(
    ("service", "alert"),
    [
        ("toposcope-exporter", "ToposcopeExporterDown"),
        ("toposcope-advisor", "ToposcopeAdvisorDown"),
    ],
)
def test_scrape_job_is_one_the_alerts_watch(service: str, alert: str) -> None:
    """The operator names the job after the Service; the `...Down` alert must select it."""
    job = _one("Service", service)["metadata"]["name"]
    (rule,) = [r for g in _alert_groups() for r in g["rules"] if r.get("alert") == alert]
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
    built = _kustomize(K8S)
    assert sorted(map(_kind_and_name, built)) == sorted(_kind_and_name(d) for _, d in _objects())


def test_docs_cover_every_manifest() -> None:
    text = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    for path in [*MANIFESTS, KUSTOMIZATION, GENERATOR]:
        assert path.name in text, path.name
    for component in sorted(p.name for p in COMPONENTS.iterdir() if p.is_dir()):
        assert f"components/{component}" in text, component
    assert "release: kube-prometheus-stack" in text


# advisor and node agent -------------------------------------------------------------------
def _pod_labels(kind: str, name: str) -> dict[str, str]:
    labels: dict[str, str] = _one(kind, name)["spec"]["template"]["metadata"]["labels"]
    return labels


def _port(listen: str) -> int:
    return int(listen.rpartition(":")[2])


def _component_object(kind: str, name: str) -> dict[str, Any]:
    """The object ``kind``/``name`` among the apply-with-agents component's resources (valid)."""
    component = yaml.safe_load((APPLY_COMPONENT / "kustomization.yaml").read_text("utf-8"))
    for resource in component["resources"]:
        for doc in yaml.safe_load_all((APPLY_COMPONENT / resource).read_text("utf-8")):
            if doc and doc["kind"] == kind and doc["metadata"]["name"] == name:
                try:
                    validate(doc, KUBERNETES_VERSION, strict=True)
                except ValidationError as exc:
                    pytest.fail(f"{resource}: {exc.message}")
                return dict(doc)
    raise AssertionError(f"no {kind} {name} in the apply-with-agents component")


def _apply_component(deployment: dict[str, Any]) -> dict[str, Any]:
    """``deployment`` with the apply-with-agents component's JSON patches applied.

    Only the operations the component uses are understood (``add`` with an existing parent,
    ``-`` appending to a list; ``replace`` of an existing key); anything else fails, so the
    component stays simple.
    """
    component = yaml.safe_load((APPLY_COMPONENT / "kustomization.yaml").read_text("utf-8"))
    assert component["kind"] == "Component"
    patched: dict[str, Any] = yaml.safe_load(yaml.safe_dump(deployment))
    targets = [(p["target"]["kind"], p["target"]["name"]) for p in component["patches"]]
    assert _kind_and_name(deployment) in targets
    for patch in component["patches"]:
        target = patch["target"]
        if (target["kind"], target["name"]) != _kind_and_name(deployment):
            continue
        for op in yaml.safe_load(patch["patch"]):
            assert op["op"] in ("add", "replace"), op
            *parents, last = op["path"].strip("/").split("/")
            node: Any = patched
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node[part]
            if op["op"] == "replace":
                assert isinstance(node, dict) and last in node, op["path"]
                node[last] = op["value"]
                continue
            assert last == "-" and isinstance(node, list), op["path"]
            node.append(op["value"])
    return patched


@pytest.mark.parametrize(
    ("kind", "name", "command"),
    [
        ("DaemonSet", "toposcope-exporter", "exporter"),
        ("Deployment", "toposcope-advisor", "advisor"),
        ("DaemonSet", "toposcope-agent", "agent"),
    ],
)
def test_container_args_parse_with_the_cli(kind: str, name: str, command: str) -> None:
    """Every container's args are a valid `toposcope` command line (no drift from the CLI)."""
    assert {w["metadata"]["name"] for w in _workloads()} == {
        "toposcope-exporter",
        "toposcope-advisor",
        "toposcope-agent",
    }
    args = parse_cli(_args(_container(kind, name)))
    assert args.command == command


def test_every_container_is_unprivileged_or_documented() -> None:
    """No container is privileged; added capabilities are the documented ones, nothing more."""
    for workload in _workloads():
        name = workload["metadata"]["name"]
        pod = workload["spec"]["template"]["spec"]
        source = next(path for path, doc in _objects() if doc is workload or doc == workload)
        comments = "\n".join(
            line for line in (K8S / source).read_text("utf-8").splitlines() if "#" in line
        )
        assert pod.get("hostNetwork", False) is False, name
        assert pod.get("hostIPC", False) is False, name
        assert pod.get("hostPID", False) is (name in HOST_PRIVILEGES), name
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["privileged"] is False, name
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["readOnlyRootFilesystem"] is True, name
            assert security["capabilities"]["drop"] == ["ALL"], name
            added = set(security["capabilities"].get("add", []))
            assert added == HOST_PRIVILEGES.get(name, set()), name
            for capability in added:
                assert capability in comments, f"{name}: {capability} is not explained"


def test_advisor_is_two_elected_pods_with_their_sqlite_on_the_claim() -> None:
    deployment = _one("Deployment", "toposcope-advisor")
    assert deployment["spec"]["replicas"] == 2
    # never more than two advisors on the file, one of them acting
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
    pod = _pod_spec("Deployment", "toposcope-advisor")
    args = parse_cli(_args(_advisor()))
    assert args.leader_elect and args.leader_elect_resource_lock == "leases"
    # ReadWriteOnce: both replicas on the node that mounts the claim
    [term] = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert (
        term["labelSelector"]["matchLabels"].items()
        <= _pod_labels("Deployment", "toposcope-advisor").items()
    )
    # the Lease's credentials: a projected token where in-cluster clients look for it
    found = _mount_of(pod, _advisor(), "/var/run/secrets/kubernetes.io/serviceaccount/token")
    assert found["mount"]["readOnly"] is True
    sources = found["volume"]["projected"]["sources"]
    assert {next(iter(s)) for s in sources} == {"serviceAccountToken", "configMap", "downwardAPI"}
    found = _mount_of(pod, _advisor(), args.audit_db)
    claim = _one("PersistentVolumeClaim", "toposcope-advisor-state")
    assert found["volume"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert found["mount"].get("readOnly", False) is False
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    # fsGroup makes the claim writable for the non-root user
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]


def test_advisor_recommends_only_and_reads_its_token_from_a_secret() -> None:
    pod = _pod_spec("Deployment", "toposcope-advisor")
    args = parse_cli(_args(_advisor()))
    assert args.advisor_command == "serve"
    assert args.resource_manager == "dry-run"
    assert args.rm_url is None and args.rm_token_file is None
    assert args.prometheus.startswith("http")
    found = _mount_of(pod, _advisor(), args.api_token_file)
    secret = found["volume"]["secret"]
    assert secret["secretName"] == "toposcope-advisor-token"
    assert found["mount"]["readOnly"] is True
    relative = os.path.relpath(args.api_token_file, found["mount"]["mountPath"])
    assert {"key": "token", "path": relative} in secret["items"]
    assert secret["defaultMode"] & 0o007 == 0  # not world-readable


def test_advisor_listens_on_every_interface_only_behind_a_cluster_ip() -> None:
    args = parse_cli(_args(_advisor()))
    assert _port(args.listen) == ADVISOR_PORT
    (port,) = _advisor()["ports"]
    assert port["containerPort"] == ADVISOR_PORT and "hostPort" not in port
    service = _one("Service", "toposcope-advisor")
    assert service["spec"]["type"] == "ClusterIP"
    assert (
        service["spec"]["selector"].items()
        <= _pod_labels("Deployment", "toposcope-advisor").items()
    )
    assert (
        not service["spec"]["selector"].items()
        <= _pod_labels("DaemonSet", "toposcope-agent").items()
    )
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] == port["name"]
    probes = {_advisor()[p]["httpGet"]["path"] for p in ("readinessProbe", "livenessProbe")}
    assert probes == {"/-/ready", "/-/healthy"}
    assert set(_advisor()["resources"]["limits"]) == {"cpu", "memory"}


def test_agent_reads_the_host_and_writes_only_cgroups() -> None:
    pod = _pod_spec("DaemonSet", "toposcope-agent")
    container = _agent()
    args = parse_cli(_args(container))
    assert args.hostname == NODE  # the node name, as the exporter's --hostname
    assert parse_cli(_args(_container())).hostname == NODE
    cgroup = _mount_of(pod, container, f"{args.path_rootfs}/sys/fs/cgroup/cpuset.cpus")
    assert cgroup["volume"]["hostPath"]["path"] == "/sys/fs/cgroup"
    assert cgroup["mount"]["readOnly"] is False
    for mount in container["volumeMounts"]:
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        if "hostPath" in volume and mount["name"] != cgroup["mount"]["name"]:
            assert mount["readOnly"] is True, mount
    assert _mount_of(pod, container, f"{args.path_sysfs}/devices")["volume"]["hostPath"] == {
        "path": "/sys",
        "type": "Directory",
    }
    assert (
        _mount_of(pod, container, f"{args.path_procfs}/1")["volume"]["hostPath"]["path"] == "/proc"
    )
    probes = {container[p]["httpGet"]["path"] for p in ("readinessProbe", "livenessProbe")}
    assert probes == {"/api/v1/healthz"}


@pytest.mark.parametrize("name", ["toposcope-exporter", "toposcope-agent"])
def test_daemonsets_mount_the_kubelet_pod_resources_directory_read_only(name: str) -> None:
    """The directory, not the socket: a restarted kubelet's new socket is seen in it."""
    pod = _pod_spec("DaemonSet", name)
    container = _container("DaemonSet", name)
    found = _mount_of(pod, container, SOCKET)
    assert found["mount"]["mountPath"] == POD_RESOURCES
    assert found["mount"]["readOnly"] is True
    assert found["volume"]["hostPath"]["path"] == POD_RESOURCES
    assert found["volume"]["hostPath"]["type"] in ("Directory", "DirectoryOrCreate")


def test_the_exporter_asks_the_kubelet_at_the_mounted_socket() -> None:
    args = parse_cli(_args(_container()))
    assert args.pod_resources_socket == SOCKET
    # the runtime state that names containers is read under the host's root
    assert args.path_rootfs == "/host/root" and args.runtime_state == []
    root = _mount_of(_pod_spec(), _container(), "/host/root/run/containerd")
    assert root["volume"]["hostPath"]["path"] == "/"


def test_agent_alone_holds_no_shared_token_and_refuses_changes() -> None:
    """Without apply-with-agents the agent is read-only; with it, TokenReview, no Secret."""
    pod = _pod_spec("DaemonSet", "toposcope-agent")
    args = parse_cli(_args(_agent()))
    assert args.token_file is None and not args.auth_tokenreview
    assert not [v for v in pod["volumes"] if "secret" in v]


def test_agent_is_reachable_at_its_pod_ip_on_the_api_port() -> None:
    args = parse_cli(_args(_agent()))
    (port,) = _agent()["ports"]
    assert _port(args.listen) == port["containerPort"] == AGENT_PORT
    assert "hostPort" not in port  # reached at its pod IP, resolved through the API server
    assert args.listen.startswith(":")  # all of the pod's interfaces


def test_only_the_advisor_may_reach_the_agents() -> None:
    policy = _one("NetworkPolicy", "toposcope-agent")["spec"]
    selected = policy["podSelector"]["matchLabels"].items()
    assert selected <= _pod_labels("DaemonSet", "toposcope-agent").items()
    assert not selected <= _pod_labels("DaemonSet", "toposcope-exporter").items()
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}  # same namespace, the advisor's pods only
    allowed = peer["podSelector"]["matchLabels"].items()
    assert allowed <= _pod_labels("Deployment", "toposcope-advisor").items()
    assert not allowed <= _pod_labels("DaemonSet", "toposcope-exporter").items()
    assert rule["ports"] == [{"protocol": "TCP", "port": AGENT_PORT}]


def test_apply_component_points_the_advisor_at_each_nodes_agent() -> None:
    deployment = _apply_component(_one("Deployment", "toposcope-advisor"))
    try:
        validate(deployment, KUBERNETES_VERSION, strict=True)
    except ValidationError as exc:
        pytest.fail(f"apply-with-agents: {exc.message}")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = parse_cli(_args(container))
    assert args.resource_manager == "agent"
    # the agent of a node is resolved from the agent Service's EndpointSlices (pod IP by node
    # name), never from the node name alone; the URL template gives scheme, port and path
    assert args.rm_url == f"http://{{node}}:{AGENT_PORT}/api/v1"
    namespace, _, service_name = args.rm_endpoints.removeprefix("kubernetes:").partition("/")
    service = _component_object("Service", service_name)
    assert service["metadata"]["namespace"] == namespace
    assert service["spec"]["clusterIP"] == "None"
    assert (
        service["spec"]["selector"].items() <= _pod_labels("DaemonSet", "toposcope-agent").items()
    )
    assert [p["port"] for p in service["spec"]["ports"]] == [AGENT_PORT]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    role = _component_object("Role", "toposcope-advisor-agent-endpoints")
    assert role["rules"] == [
        {
            "apiGroups": ["discovery.k8s.io"],
            "resources": ["endpointslices"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    binding = _component_object("RoleBinding", "toposcope-advisor-agent-endpoints")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": namespace}
    ]
    # the advisor's own projected token for the agents, no shared Secret
    found = _mount_of(deployment["spec"]["template"]["spec"], container, args.rm_token_file)
    (source,) = found["volume"]["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "toposcope-agent"
    assert args.api_token_file != args.rm_token_file
    # everything else as in the recommend-only Deployment
    base = _args(_advisor())
    assert _args(container)[: len(base)] == base


def test_kustomize_builds_the_apply_component(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (the component was checked in Python above)")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(K8S, overlay)
    component = os.path.relpath(APPLY_COMPONENT, overlay)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [base], "components": [component]}), encoding="utf-8"
    )
    result = subprocess.run(
        [kubectl, "kustomize", str(overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    built = [d for d in yaml.safe_load_all(result.stdout) if d is not None]
    (deployment,) = [d for d in built if d["kind"] == "Deployment"]
    expected = _apply_component(_one("Deployment", "toposcope-advisor"))
    assert deployment["spec"]["template"] == expected["spec"]["template"]
