"""deploy/kubernetes/components/placement-gate-webhook: valid, and wired to what the webhook is.

Every built-in object validates against the Kubernetes schemas (``kubernetes-validate``,
strict); the MutatingWebhookConfiguration never blocks pod creation (``failurePolicy:
Ignore``), sends only opted-in pod creations, and reaches the Service, port and path the
webhook serves; the pod runs ``kube webhook`` with a TLS web configuration whose files come
from the Secret the cert-manager Certificate fills; the Certificate names the Service.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import validate  # type: ignore[import-untyped]

from tests.helpers import REPO
from toposcope.kube.admission import OPT_IN_LABEL, OPT_IN_VALUE
from toposcope.kube.webhook import MUTATE_PATH

COMPONENT = REPO / "deploy" / "kubernetes" / "components" / "placement-gate-webhook"
KUBERNETES_VERSION = "1.30"
#: objects of other API groups (cert-manager's CRDs), which kubernetes-validate cannot check
CRD_GROUPS = ("cert-manager.io/",)


def _objects() -> dict[tuple[str, str], dict[str, Any]]:
    component = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text(encoding="utf-8"))
    assert component["kind"] == "Component"
    found = {}
    for resource in component["resources"]:
        text = (COMPONENT / resource).read_text(encoding="utf-8")
        for doc in yaml.safe_load_all(text):
            if doc:
                found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


OBJECTS = _objects()
NAME = "toposcope-placement-webhook"


def test_every_manifest_is_listed_and_the_builtin_objects_validate() -> None:
    listed = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text("utf-8"))["resources"]
    assert sorted(listed) == sorted(
        p.name for p in COMPONENT.glob("*.yaml") if p.stem != "kustomization"
    )
    for obj in OBJECTS.values():
        if not obj["apiVersion"].startswith(CRD_GROUPS):
            validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_webhook_configuration_never_blocks_and_sends_only_opted_in_creations() -> None:
    config = OBJECTS[("MutatingWebhookConfiguration", "toposcope-placement-gate")]
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["objectSelector"] == {"matchLabels": {OPT_IN_LABEL: OPT_IN_VALUE}}
    (rule,) = hook["rules"]
    assert (rule["apiGroups"], rule["resources"], rule["operations"]) == (
        [""],
        ["pods"],
        ["CREATE"],
    )
    excluded = hook["namespaceSelector"]["matchExpressions"][0]
    assert excluded["operator"] == "NotIn" and "kube-system" in excluded["values"]
    service = hook["clientConfig"]["service"]
    assert (service["name"], service["namespace"], service["path"]) == (
        NAME,
        "toposcope",
        MUTATE_PATH,
    )
    ports = OBJECTS[("Service", NAME)]["spec"]["ports"]
    assert [p["port"] for p in ports] == [service["port"]]
    certificate = OBJECTS[("Certificate", NAME)]
    assert (
        config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"toposcope/{NAME}"
    )
    assert f"{NAME}.toposcope.svc" in certificate["spec"]["dnsNames"]


def test_the_pod_serves_tls_from_the_certificates_secret() -> None:
    deployment = OBJECTS[("Deployment", NAME)]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][:2] == ["kube", "webhook"]
    flags = dict(a.split("=", 1) for a in container["args"][2:])
    port = int(flags["--web.listen-address"].rpartition(":")[2])
    assert [p["containerPort"] for p in container["ports"]] == [port]
    assert (
        OBJECTS[("Service", NAME)]["spec"]["ports"][0]["targetPort"]
        == container["ports"][0]["name"]
    )
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    web_file = Path(flags["--web.config.file"])
    assert str(web_file.parent) == mounts["web"]
    config_map = OBJECTS[("ConfigMap", volumes["web"]["configMap"]["name"])]
    tls = yaml.safe_load(config_map["data"][web_file.name])["tls_server_config"]
    assert {str(Path(tls["cert_file"]).parent), str(Path(tls["key_file"]).parent)} == {
        mounts["tls"]
    }
    secret = volumes["tls"]["secret"]["secretName"]
    assert OBJECTS[("Certificate", NAME)]["spec"]["secretName"] == secret
    assert pod["automountServiceAccountToken"] is False


def test_kustomize_builds_the_component() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (the component was checked in Python above)")
    result = subprocess.run(
        [kubectl, "kustomize", str(COMPONENT)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    built = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(result.stdout) if d}
    assert built == set(OBJECTS)
