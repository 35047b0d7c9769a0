"""An API server that answers TokenReviews over real HTTP on loopback, as Kubernetes does.

The rules, from k8s.io/kubernetes release-1.30 (``pkg/registry/authentication/tokenreview/
storage.go`` and the ``authentication.k8s.io/v1`` API reference):

* ``POST /apis/authentication.k8s.io/v1/tokenreviews`` needs the caller's own credentials
  and the ``tokenreviews create`` permission: no or another bearer token is 401, a caller
  without the permission 403 (a Status object each time);
* ``spec.token`` empty is 400 ``token is required``;
* ``spec.audiences`` empty means the API server's own audiences;
* a token is authenticated only when its audiences intersect the requested ones;
  ``status.audiences`` is that intersection, and an unknown token, or one with no audience in
  common, answers 201 with ``status.authenticated: false`` and an ``error`` (never an HTTP
  error status);
* an authenticated service-account token names ``system:serviceaccount:NS:NAME`` with the
  groups ``system:serviceaccounts`` and ``system:serviceaccounts:NS``.

Each review body is validated against the official schema with ``kubernetes-validate``; one
that fails is answered 422 and kept in :attr:`FakeTokenReview.invalid`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kubernetes_validate import ValidationError, validate  # type: ignore[import-untyped]

PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
#: the API server's own audience (what a pod's default token is for)
API_AUDIENCE = "https://kubernetes.default.svc"


@dataclass
class FakeTokenReview:
    """Issued tokens, the reviewer's credentials, and every review asked for.

    ``reviewer`` is the bearer token the caller (the agent) must present; ``may_review``
    whether that caller holds ``tokenreviews create``.
    """

    reviewer: str
    may_review: bool = True
    tokens: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    reviews: list[dict[str, Any]] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def issue(self, token: str, namespace: str, name: str, *audiences: str) -> str:
        """Make ``token`` a projected token of service account ``namespace/name``."""
        self.tokens[token] = (f"system:serviceaccount:{namespace}:{name}", audiences)
        return token

    def answer(self, authorization: str | None, body: Any) -> tuple[int, Any]:
        """The status and JSON answer of one POST to :data:`PATH`."""
        with self.lock:
            if authorization != f"Bearer {self.reviewer}":
                return 401, _status(401, "Unauthorized", "Unauthorized")
            if not self.may_review:
                return 403, _status(
                    403, "Forbidden", 'tokenreviews.authentication.k8s.io is forbidden: User '
                    '"system:serviceaccount:toposcope:toposcope-agent" cannot create resource'
                )  # fmt: skip
            try:
                validate(body, "1.30", strict=True)
            except ValidationError as exc:
                self.invalid.append(exc.message)
                return 422, _status(422, "Invalid", exc.message)
            self.reviews.append(body)
            spec = body.get("spec") or {}
            if not spec.get("token"):
                return 400, _status(400, "BadRequest", "token is required")
            return 201, {**body, "status": self._status_of(spec)}

    def _status_of(self, spec: dict[str, Any]) -> dict[str, Any]:
        wanted = spec.get("audiences") or [API_AUDIENCE]
        issued = self.tokens.get(spec["token"])
        if issued is None:
            return {"authenticated": False, "error": "invalid bearer token", "user": {}}
        username, audiences = issued
        common = [a for a in wanted if a in audiences]
        if not common:
            return {
                "authenticated": False,
                "user": {},
                "error": f"token audiences {list(audiences)} is invalid for the target "
                f"audiences {wanted}",
            }
        namespace = username.split(":")[2]
        return {
            "authenticated": True,
            "audiences": common,
            "user": {
                "username": username,
                "uid": f"uid-{username}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
            },
        }


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    }  # fmt: skip


@contextmanager
def serving(fake: FakeTokenReview) -> Iterator[str]:
    """Serve ``fake`` on a free loopback port; yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"null")
            except ValueError:
                body = None
            if self.path != PATH or not isinstance(body, dict):
                code, answer = (
                    404,
                    _status(404, "NotFound", f"the server could not find {self.path}"),
                )
            else:
                code, answer = fake.answer(self.headers.get("Authorization"), body)
            raw = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the tests read :attr:`FakeTokenReview.reviews` instead."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
