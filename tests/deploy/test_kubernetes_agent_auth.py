"""apply-with-agents without a shared secret: the advisor's projected token, TokenReview.

The advisor sends its own ServiceAccount token (projected, audience ``toposcope-agent``,
rotated by the kubelet) and every agent checks it with the API server, allowed by a
ClusterRole that grants ``tokenreviews create`` and nothing else.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import ValidationError, validate  # type: ignore[import-untyped]

from tests.deploy.cliargs import parse_cli
from tests.deploy.rbac import granted, rbac_documents
from tests.deploy.test_kubernetes import (
    APPLY_COMPONENT,
    K8S,
    KUBERNETES_VERSION,
    _apply_component,
    _args,
    _mount_of,
    _one,
)
from toposcope.kubeapi.client import SERVICE_ACCOUNT_DIR
from toposcope.kubeapi.tokenreview import parse_service_account

RBAC = APPLY_COMPONENT / "agent-tokenreview-rbac.yaml"


def _patched(kind: str, name: str) -> dict[str, Any]:
    patched = _apply_component(_one(kind, name))
    try:
        validate(patched, KUBERNETES_VERSION, strict=True)
    except ValidationError as exc:
        pytest.fail(f"apply-with-agents {kind}: {exc.message}")
    return patched


def _pod(workload: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = workload["spec"]["template"]["spec"]
    return pod


def test_the_agents_check_the_advisors_own_token_with_tokenreview() -> None:
    agent = _pod(_patched("DaemonSet", "toposcope-agent"))
    advisor = _pod(_patched("Deployment", "toposcope-advisor"))
    agent_args = parse_cli(_args(agent["containers"][0]))
    advisor_args = parse_cli(_args(advisor["containers"][0]))
    assert agent_args.auth_tokenreview and agent_args.token_file is None
    # exactly the advisor's ServiceAccount, in the advisor's namespace
    namespace = _one("Deployment", "toposcope-advisor")["metadata"]["namespace"]
    expected = parse_service_account(f"{namespace}:{advisor['serviceAccountName']}")
    assert [parse_service_account(a) for a in agent_args.auth_allowed] == [expected]
    # the advisor's token for the agents is projected for the audience the agents require
    found = _mount_of(advisor, advisor["containers"][0], advisor_args.rm_token_file)
    assert found["mount"]["readOnly"] is True
    (source,) = found["volume"]["projected"]["sources"]
    token = source["serviceAccountToken"]
    assert token["audience"] == agent_args.auth_audience == "toposcope-agent"
    assert 600 <= token["expirationSeconds"] <= 3600
    assert os.path.relpath(advisor_args.rm_token_file, found["mount"]["mountPath"]) == "token"
    # group-readable for fsGroup, never by others (the token reader refuses that)
    assert found["volume"]["projected"]["defaultMode"] & 0o007 == 0


def test_the_agent_reaches_the_api_server_with_its_own_token_only() -> None:
    agent = _pod(_patched("DaemonSet", "toposcope-agent"))
    assert agent["automountServiceAccountToken"] is False  # only what is mounted explicitly
    container = agent["containers"][0]
    found = _mount_of(agent, container, str(SERVICE_ACCOUNT_DIR / "token"))
    assert found["mount"]["readOnly"] is True
    sources = found["volume"]["projected"]["sources"]
    (token,) = [s["serviceAccountToken"] for s in sources if "serviceAccountToken" in s]
    assert "audience" not in token  # the API server's audience, not the advisor's
    (ca,) = [s["configMap"] for s in sources if "configMap" in s]
    assert ca["name"] == "kube-root-ca.crt"
    assert {"key": "ca.crt", "path": "ca.crt"} in ca["items"]


def test_the_agent_may_create_tokenreviews_and_nothing_else() -> None:
    role, binding = rbac_documents(RBAC)
    for doc in (role, binding):
        validate(doc, KUBERNETES_VERSION, strict=True)
    assert role["kind"] == "ClusterRole"
    assert granted(role) == {("authentication.k8s.io", "tokenreviews", "create")}
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    daemonset = _one("DaemonSet", "toposcope-agent")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": _pod(daemonset)["serviceAccountName"],
            "namespace": daemonset["metadata"]["namespace"],
        }
    ]
    component = yaml.safe_load((APPLY_COMPONENT / "kustomization.yaml").read_text("utf-8"))
    assert RBAC.name in component["resources"]


def test_no_shared_agent_secret_is_left_anywhere() -> None:
    for path in sorted(K8S.rglob("*.yaml")):
        assert not re.search(r"toposcope-agent-token\b(?!review)", path.read_text("utf-8")), path


def test_kustomize_builds_the_component_with_its_rbac(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (the component was checked in Python above)")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(K8S, overlay)],
                "components": [os.path.relpath(APPLY_COMPONENT, overlay)],
            }
        ),
        encoding="utf-8",
    )
    built = subprocess.run(
        [kubectl, "kustomize", str(overlay)], capture_output=True, text=True, check=True
    ).stdout
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(built) if d}
    assert ("ClusterRoleBinding", "toposcope-agent-tokenreview") in docs
    agent = docs[("DaemonSet", "toposcope-agent")]
    assert (
        "--auth.kubernetes-tokenreview"
        in agent["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    assert not [d for d in docs.values() if d["kind"] == "Secret"]
