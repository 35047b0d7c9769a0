"""``toposcope kube webhook``: the placement-gate admission webhook over real TLS on loopback.

The server is built from the command line (``kube webhook --web.config.file``) with
certificates the core makes (:mod:`toposcope.serving.devcerts`) and sent AdmissionReviews shaped
like
the API server's (tests/fixtures/kube, its source in the README there). Each answered patch is
applied to the pod (RFC 6902 ``add``, the only operation the webhook sends) and the patched
pod validated against the official schemas with ``kubernetes-validate``.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_validate import validate  # type: ignore[import-untyped]

from tests.helpers import REPO
from toposcope.cli import EXIT_USAGE, build_parser, main
from toposcope.errors import ConfigError
from toposcope.kube.cli import serve_webhook
from toposcope.kube.webhook import MAX_BODY
from toposcope.serving import devcerts

REVIEW = REPO / "tests" / "fixtures" / "kube" / "admissionreview-pod-create.json"
GATE = {"name": "toposcope.io/placement"}
TIMEOUT = 10.0
KUBERNETES_VERSION = "1.30"


class Webhook:
    """A running webhook: its port and the client context that trusts its CA."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.port = port
        self.context = context

    def post(
        self, body: bytes, content_type: str = "application/json", path: str = "/mutate"
    ) -> tuple[int, Any]:
        """POST ``body``; the status and the JSON answer."""
        connection = http.client.HTTPSConnection(
            "127.0.0.1", self.port, timeout=TIMEOUT, context=self.context
        )
        try:
            connection.request("POST", path, body=body, headers={"Content-Type": content_type})
            answer = connection.getresponse()
            return answer.status, json.loads(answer.read())
        finally:
            connection.close()

    def get(self, path: str) -> tuple[int, bytes]:
        """GET ``path``; the status and the body."""
        connection = http.client.HTTPSConnection(
            "127.0.0.1", self.port, timeout=TIMEOUT, context=self.context
        )
        try:
            connection.request("GET", path)
            answer = connection.getresponse()
            return answer.status, answer.read()
        finally:
            connection.close()

    def review(self, review: dict[str, Any]) -> dict[str, Any]:
        """The ``response`` of an AdmissionReview answered 200."""
        status, answer = self.post(json.dumps(review).encode())
        assert status == 200, answer
        assert answer["apiVersion"] == "admission.k8s.io/v1"
        assert answer["kind"] == "AdmissionReview"
        assert answer["response"]["uid"] == review["request"]["uid"]
        assert answer["response"]["allowed"] is True
        response: dict[str, Any] = answer["response"]
        return response


def _certificates(folder: Path) -> Path:
    try:
        return devcerts.make_certificates(folder, ["webhook"])
    except ConfigError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    folder = tmp_path_factory.mktemp("webhook")
    certs = _certificates(folder / "pki")
    config = folder / "web.yml"
    config.write_text(
        "tls_server_config:\n"
        f"  cert_file: {certs / 'webhook.crt'}\n"
        f"  key_file: {certs / 'webhook.key'}\n"
    )
    parser, _ = build_parser(["kube"])
    args = parser.parse_args(
        ["kube", "webhook", "--web.listen-address", "127.0.0.1:0", "--web.config.file", str(config)]
    )
    server = serve_webhook(args)
    server.start()
    try:
        yield Webhook(server.port, ssl.create_default_context(cafile=certs / "ca.crt"))
    finally:
        server.shutdown()


def review(**changes: Any) -> dict[str, Any]:
    """The fixture's review with ``changes`` merged into its pod's spec or metadata."""
    data: dict[str, Any] = json.loads(REVIEW.read_text(encoding="utf-8"))
    pod = data["request"]["object"]
    for key, value in changes.items():
        where, _, field = key.partition("__")
        pod[where][field] = value
    return data


def apply_patch(pod: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """``pod`` with the response's JSONPatch applied (RFC 6902 ``add`` only)."""
    assert response["patchType"] == "JSONPatch"
    patched = copy.deepcopy(pod)
    for operation in json.loads(base64.b64decode(response["patch"])):
        assert operation["op"] == "add", operation
        *parents, last = operation["path"].lstrip("/").split("/")
        target = patched
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            assert last == "-", operation
            target.append(operation["value"])
        else:
            target[last] = operation["value"]
    return patched


def test_an_opted_in_pod_gets_the_gate_and_stays_valid(webhook: Webhook) -> None:
    sent = review()
    response = webhook.review(sent)
    pod = apply_patch(sent["request"]["object"], response)
    assert pod["spec"]["schedulingGates"] == [GATE]
    validate(pod, KUBERNETES_VERSION, strict=True)
    unchanged = {k: v for k, v in pod["spec"].items() if k != "schedulingGates"}
    assert unchanged == sent["request"]["object"]["spec"]


def test_other_gates_are_kept(webhook: Webhook) -> None:
    sent = review(spec__schedulingGates=[{"name": "example.com/quota"}])
    pod = apply_patch(sent["request"]["object"], webhook.review(sent))
    assert pod["spec"]["schedulingGates"] == [{"name": "example.com/quota"}, GATE]
    validate(pod, KUBERNETES_VERSION, strict=True)


def test_a_pod_already_gated_is_left_alone(webhook: Webhook) -> None:
    sent = review()
    sent["request"]["object"] = apply_patch(sent["request"]["object"], webhook.review(sent))
    again = webhook.review(sent)
    assert "patch" not in again and "patchType" not in again


@pytest.mark.parametrize(
    "changes",
    [
        {"metadata__labels": {"app": "llm-train"}},
        {"metadata__labels": {"toposcope.io/placement": "yes"}},
        {"metadata__annotations": {"toposcope.io/placement": "gate"}, "metadata__labels": {}},
        {"spec__nodeName": "gpu-1"},
    ],
    ids=["no-label", "other-value", "annotation-only", "bound"],
)
def test_pods_that_did_not_opt_in_or_are_bound_are_left_alone(
    webhook: Webhook, changes: dict[str, Any]
) -> None:
    assert "patch" not in webhook.review(review(**changes))


def test_kube_system_and_other_operations_are_left_alone(webhook: Webhook) -> None:
    system = review()
    system["request"]["namespace"] = "kube-system"
    assert "patch" not in webhook.review(system)
    update = review()
    update["request"]["operation"] = "UPDATE"
    update["request"]["oldObject"] = copy.deepcopy(update["request"]["object"])
    assert "patch" not in webhook.review(update)
    other = review()
    other["request"]["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    assert "patch" not in webhook.review(other)


def _malformed() -> list[tuple[str, bytes, str]]:
    good = json.loads(REVIEW.read_text(encoding="utf-8"))

    def changed(path: str, value: Any) -> bytes:
        data = copy.deepcopy(good)
        *parents, last = path.split(".")
        target = data
        for part in parents:
            target = target[part]
        if value is KeyError:
            del target[last]
        else:
            target[last] = value
        return json.dumps(data).encode()

    return [
        ("not-json", b"{not json", "not valid JSON"),
        ("a-list", b"[]", "AdmissionReview"),
        ("v1beta1", changed("apiVersion", "admission.k8s.io/v1beta1"), "apiVersion"),
        ("no-uid", changed("request.uid", KeyError), "request.uid"),
        ("empty-uid", changed("request.uid", ""), "request.uid"),
        ("bad-operation", changed("request.operation", "PATCH"), "request.operation"),
        ("no-object", changed("request.object", KeyError), "request.object"),
        ("spec-not-object", changed("request.object.spec", "x"), "request.object.spec"),
        ("gates-not-list", changed("request.object.spec.schedulingGates", {}), "schedulingGates"),
        ("deep", b"[" * 5000 + b"]" * 5000, "deeper"),
    ]


@pytest.mark.parametrize(
    ("body", "named"), [m[1:] for m in _malformed()], ids=[m[0] for m in _malformed()]
)
def test_a_malformed_review_is_a_400_naming_what_is_wrong(
    webhook: Webhook, body: bytes, named: str
) -> None:
    status, answer = webhook.post(body)
    assert status == 400
    assert named in answer["error"]
    assert "Traceback" not in answer["error"]


def test_the_server_limits_hold(webhook: Webhook) -> None:
    status, answer = webhook.post(b"{}", content_type="text/plain")
    assert status == 415 and "application/json" in answer["error"]
    status, answer = webhook.post(b" " * (MAX_BODY + 1))
    assert status == 413
    status, answer = webhook.post(b"{}", path="/other")
    assert status == 404 and "/mutate" in answer["error"]


def test_the_webhook_serves_its_own_process_metrics(webhook: Webhook) -> None:
    status, body = webhook.get("/metrics")
    assert status == 200
    names = {line.split()[2] for line in body.decode().splitlines() if line.startswith("# TYPE")}
    assert {"process_resident_memory_bytes", "toposcope_build_info"} <= names


def test_the_webhook_refuses_to_start_without_tls(tmp_path: Path) -> None:
    listen = ["kube", "webhook", "--web.listen-address", "127.0.0.1:0"]
    assert main(listen) == EXIT_USAGE
    plain = tmp_path / "web.yml"
    plain.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    assert main([*listen, "--web.config.file", str(plain)]) == EXIT_USAGE
    assert main([*listen, "--web.config.file", str(tmp_path / "missing.yml")]) == EXIT_USAGE
