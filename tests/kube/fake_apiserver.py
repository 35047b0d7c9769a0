"""A contract server: the few API-server semantics toposcope relies on, over real HTTP.

Only what the ``kubernetes`` backend uses is served, each rule from its upstream source
(k8s.io/kubernetes, release-1.30 unless said):

* **Eviction** (``pkg/registry/core/pod/storage/eviction.go``): a pod matched by no
  PodDisruptionBudget is deleted, 201 with a Success status; a pod matched by several is 500
  "This pod has more than one PodDisruptionBudget, which the eviction subresource does not
  support."; a budget with ``status.disruptionsAllowed == 0`` is 429 TooManyRequests with the
  cause ``DisruptionBudget`` (``checkAndDecrement``), otherwise the budget's allowance drops by
  one. A terminating pod is evicted without a budget check. Deleting a pod with a grace period
  sets ``metadata.deletionTimestamp`` (``pkg/registry/rest/delete.go``).
* **dryRun=All** (``staging/src/k8s.io/apiserver/pkg/endpoints/handlers``): the request is
  checked and answered as usual and nothing is persisted.
* **resourceVersion** (``staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go``
  ``GuaranteedUpdate``): an update or patch naming another ``metadata.resourceVersion`` than
  the stored one is 409 Conflict.
* **Scheduling gates** (``pkg/apis/core/validation/validation.go`` ``ValidatePodUpdate``,
  KEP-3521/3838): gates can only be removed, never added; a gated pod's required node
  affinity may only be narrowed (the same number of terms, each keeping all its
  expressions); no other pod spec field may change.
* Merge patches are RFC 7386 JSON merge patches.

Every body the backend sends (the Eviction, each patched Pod/Deployment/StatefulSet, each
Scale) is validated against the official schemas with ``kubernetes-validate``; a body that
fails is answered 422 and kept in :attr:`FakeApiServer.invalid` for the tests to check.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes_validate import ValidationError, validate  # type: ignore[import-untyped]

#: the Kubernetes version whose schemas bodies are validated against
KUBERNETES_VERSION = "1.30"

_ROUTE = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[a-z0-9.]+)/(?P<version>v[0-9a-z]+))"
    r"(?:/namespaces/(?P<ns>[a-z0-9-]+))?/(?P<plural>[a-z]+)"
    r"(?:/(?P<name>[a-z0-9.-]+))?(?:/(?P<sub>eviction|scale))?$"
)
_KINDS = {
    "pods": ("v1", "Pod"),
    "nodes": ("v1", "Node"),
    "replicasets": ("apps/v1", "ReplicaSet"),
    "deployments": ("apps/v1", "Deployment"),
    "statefulsets": ("apps/v1", "StatefulSet"),
    "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget"),
    "notebooks": ("kubeflow.org/v1", "Notebook"),
    "resourceslices": ("resource.k8s.io/v1", "ResourceSlice"),
}
_VALIDATED = {"Pod", "Deployment", "StatefulSet", "ReplicaSet"}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: ``patch`` applied to ``target``."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def discovery(path: str) -> dict[str, Any] | None:
    """The legacy discovery documents kubectl reads (``/api``, ``/apis``, ``/api/v1``,
    ``/apis/GROUP/VERSION``) for the kinds this server holds; ``None`` for other paths.
    """
    groups: dict[str, list[tuple[str, str]]] = {}
    for plural, (api_version, kind) in _KINDS.items():
        groups.setdefault(api_version, []).append((plural, kind))
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    if path == "/apis":
        named = sorted(v for v in groups if "/" in v)
        entries = [
            {"name": v.split("/")[0], "versions": [{"groupVersion": v, "version": v.split("/")[1]}],
             "preferredVersion": {"groupVersion": v, "version": v.split("/")[1]}}
            for v in named
        ]  # fmt: skip
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": entries}
    version = path.removeprefix("/api/").removeprefix("/apis/")
    if version not in groups or path not in (f"/api/{version}", f"/apis/{version}"):
        return None
    resources: list[dict[str, Any]] = []
    for plural, kind in groups[version]:
        namespaced = kind not in ("Node", "ResourceSlice")
        verbs = ["get", "list", "patch", "create", "update"]
        resources.append(
            {"name": plural, "singularName": kind.lower(), "namespaced": namespaced,
             "kind": kind, "verbs": verbs}
        )  # fmt: skip
        if kind in ("Deployment", "StatefulSet"):
            resources.append(
                {"name": f"{plural}/scale", "singularName": "", "namespaced": True,
                 "group": "autoscaling", "version": "v1", "kind": "Scale",
                 "verbs": ["get", "patch", "update"]}
            )  # fmt: skip
        if kind == "Pod":
            resources.append(
                {"name": "pods/eviction", "singularName": "", "namespaced": True,
                 "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}
            )  # fmt: skip
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": version,
            "resources": resources}  # fmt: skip


def _unescape(part: str) -> str:
    """One JSON pointer token unescaped (RFC 6901)."""
    return part.replace("~1", "/").replace("~0", "~")


def json_patch(target: Any, operations: list[dict[str, Any]]) -> Any:
    """RFC 6902 ``operations`` applied to a copy of ``target`` as the API server's JSON patch
    library does (evanphx/json-patch): ``test``, ``add``, ``remove`` and ``replace`` on object
    members and array positions, pointers unescaped (``~1`` is ``/``, ``~0`` is ``~``); a failed
    ``test``, a missing parent or member is the API server's 422.
    """
    result = copy.deepcopy(target)
    for operation in operations:
        *parents, last = [_unescape(p) for p in operation["path"].split("/")[1:]]
        holder: Any = result
        for part in parents:
            if isinstance(holder, dict) and part in holder:
                holder = holder[part]
            elif isinstance(holder, list) and part.isdigit() and int(part) < len(holder):
                holder = holder[int(part)]
            else:
                raise ApiFailure(422, "Invalid", f"no parent for {operation['path']}")
        op, value = operation["op"], copy.deepcopy(operation.get("value"))
        if isinstance(holder, list):
            if not last.isdigit() or int(last) >= len(holder) + (op == "add"):
                raise ApiFailure(422, "Invalid", f"no member {operation['path']}")
            index = int(last)
            if op == "test" and holder[index] != value:
                raise ApiFailure(422, "Invalid", f"the test of {operation['path']} failed")
            if op == "remove":
                del holder[index]
            if op == "add":
                holder.insert(index, value)
            if op == "replace":
                holder[index] = value
            continue
        if not isinstance(holder, dict):
            raise ApiFailure(422, "Invalid", f"no parent for {operation['path']}")
        if op == "test" and holder.get(last) != value:
            raise ApiFailure(422, "Invalid", f"the test of {operation['path']} failed")
        if op in ("remove", "replace") and last not in holder:
            raise ApiFailure(422, "Invalid", f"no {operation['path']} to {op}")
        if op == "remove":
            del holder[last]
        if op in ("add", "replace"):
            holder[last] = value
    return result


class ApiFailure(Exception):
    """An API-server error answer: a Status object with ``code``."""

    def __init__(self, code: int, reason: str, message: str, causes: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.status: dict[str, Any] = {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code,
        }  # fmt: skip
        if causes:
            self.status["details"] = {"causes": causes}


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    wanted = selector.get("matchLabels") or {}
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def _terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = pod["spec"].get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    return list(required.get("nodeSelectorTerms") or [])


def check_pod_update(old: dict[str, Any], new: dict[str, Any]) -> None:
    """``ValidatePodUpdate``'s rules for gates and affinity (module docstring); 422 otherwise."""
    old_gates = [g["name"] for g in old["spec"].get("schedulingGates") or []]
    new_gates = [g["name"] for g in new["spec"].get("schedulingGates") or []]
    if not set(new_gates) <= set(old_gates):
        raise ApiFailure(422, "Invalid", "spec.schedulingGates: only deletion is allowed")
    if _terms(old) != _terms(new):
        if not old_gates:
            raise ApiFailure(422, "Invalid", "spec.affinity: pod updates may not change fields")
        old_terms, new_terms = _terms(old), _terms(new)
        if old_terms and (
            len(old_terms) != len(new_terms)
            or any(
                any(
                    e not in (n.get("matchExpressions") or [])
                    for e in o.get("matchExpressions") or []
                )
                for o, n in zip(old_terms, new_terms, strict=True)
            )
        ):
            raise ApiFailure(
                422, "Invalid", "spec.affinity: only additions to nodeAffinity are allowed"
            )
    rest_old = {k: v for k, v in old["spec"].items() if k not in ("schedulingGates", "affinity")}
    rest_new = {k: v for k, v in new["spec"].items() if k not in ("schedulingGates", "affinity")}
    if rest_old != rest_new:
        raise ApiFailure(422, "Invalid", "spec: Forbidden: pod updates may not change fields")


@dataclass
class Request:
    """One request the server answered: method, path, query and body."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any

    @property
    def dry_run(self) -> bool:
        """Whether it asked for ``dryRun=All``."""
        return self.query.get("dryRun") == ["All"]


@dataclass
class FakeApiServer:
    """The objects of a small cluster and the requests made to it (module docstring)."""

    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    version: int = 100
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` (its plural from its kind) with a new resourceVersion and uid."""
        plural = next(p for p, (_, kind) in _KINDS.items() if kind == obj["kind"])
        meta = obj.setdefault("metadata", {})
        self.version += 1
        meta["resourceVersion"] = str(self.version)
        meta.setdefault("uid", f"uid-{self.version}")
        self.objects[(plural, meta.get("namespace", ""), meta["name"])] = obj
        return obj

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        """A stored object (KeyError when absent)."""
        return self.objects[(plural, namespace, name)]

    def writes(self) -> Iterator[Request]:
        """The requests that would change something."""
        return (r for r in self.requests if r.method in ("POST", "PATCH", "PUT"))

    # -- serving -------------------------------------------------------------------------------

    def answer(self, method: str, url: str, body: Any) -> tuple[int, Any]:
        """The status and JSON answer of one request."""
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        with self.lock:
            self.requests.append(Request(method, parts.path, query, body))
            try:
                found = discovery(parts.path) if method == "GET" else None
                if found is not None:
                    return 200, found
                return self._route(method, parts.path, query, body)
            except ApiFailure as failure:
                return failure.code, failure.status

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        found = _ROUTE.match(path)
        if found is None or found["plural"] not in _KINDS:
            raise ApiFailure(404, "NotFound", f"the server could not find {path}")
        plural, ns, name, sub = found["plural"], found["ns"] or "", found["name"], found["sub"]
        dry = query.get("dryRun") == ["All"]
        if name is None:
            if method != "GET":
                raise ApiFailure(405, "MethodNotAllowed", method)
            items = [
                o for (p, n, _), o in self.objects.items() if p == plural and (not ns or n == ns)
            ]
            api_version, kind = _KINDS[plural]
            return 200, {
                "apiVersion": api_version,
                "kind": f"{kind}List",
                "metadata": {},
                "items": items,
            }
        key = (plural, ns, name)
        if key not in self.objects:
            raise ApiFailure(404, "NotFound", f'{plural} "{name}" not found')
        if sub == "eviction" and method == "POST":
            return self._evict(key, body, dry)
        if sub == "scale":
            return self._scale(key, method, body, dry)
        if method == "GET":
            return 200, self.objects[key]
        if method == "PATCH":
            return self._patch(key, body, dry)
        raise ApiFailure(405, "MethodNotAllowed", method)

    def _validate(self, what: str, body: dict[str, Any]) -> None:
        try:
            validate(body, KUBERNETES_VERSION, strict=True)
        except ValidationError as exc:
            self.invalid.append(f"{what}: {exc}")
            raise ApiFailure(422, "Invalid", f"{what} does not validate: {exc}") from None

    def _check_version(self, stored: dict[str, Any], body: dict[str, Any]) -> None:
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != stored["metadata"]["resourceVersion"]:
            raise ApiFailure(
                409, "Conflict", "the object has been modified; please apply your changes to the "
                "latest version and try again",
            )  # fmt: skip

    def _store(self, key: tuple[str, str, str], obj: dict[str, Any], dry: bool) -> dict[str, Any]:
        if dry:
            return obj
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.objects[key] = obj
        return obj

    def _patch(self, key: tuple[str, str, str], body: Any, dry: bool) -> tuple[int, Any]:
        stored = self.objects[key]
        if isinstance(body, list):  # a JSON patch (RFC 6902): its operations are a list
            result = json_patch(stored, body)
        else:
            self._check_version(stored, body)
            result = merge_patch(stored, body)
        result["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        if result["kind"] in _VALIDATED:
            self._validate(f"patched {result['kind']}", result)
        if result["kind"] == "Pod":
            check_pod_update(stored, result)
        return 200, self._store(key, result, dry)

    def _scale(
        self, key: tuple[str, str, str], method: str, body: Any, dry: bool
    ) -> tuple[int, Any]:
        owner = self.objects[key]
        meta = owner["metadata"]
        scale: dict[str, Any] = {
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                         "resourceVersion": meta["resourceVersion"], "uid": meta["uid"]},
            "spec": {"replicas": owner["spec"].get("replicas", 1)},
            "status": {"replicas": owner["spec"].get("replicas", 1)},
        }  # fmt: skip
        if method == "GET":
            return 200, scale
        if method not in ("PUT", "PATCH"):
            raise ApiFailure(405, "MethodNotAllowed", method)
        if method == "PUT":
            self._validate("Scale", body)
        self._check_version(owner, body)
        changed = merge_patch(owner, {"spec": {"replicas": body["spec"]["replicas"]}})
        self._store(key, changed, dry)
        scale["spec"]["replicas"] = body["spec"]["replicas"]
        return 200, scale

    def _evict(self, key: tuple[str, str, str], body: Any, dry: bool) -> tuple[int, Any]:
        self._validate("Eviction", body)
        pod = self.objects[key]
        ok = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }
        if pod["metadata"].get("deletionTimestamp"):
            return 201, ok
        labels = pod["metadata"].get("labels") or {}
        budgets = [
            o for (p, n, _), o in self.objects.items()
            if p == "poddisruptionbudgets" and n == key[1]
            and _matches(o["spec"]["selector"], labels)
        ]  # fmt: skip
        if len(budgets) > 1:
            raise ApiFailure(
                500, "InternalError",
                "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                "does not support.",
            )  # fmt: skip
        if budgets:
            budget = budgets[0]
            if budget["status"]["disruptionsAllowed"] <= 0:
                name = budget["metadata"]["name"]
                raise ApiFailure(
                    429, "TooManyRequests", "Cannot evict pod as it would violate the pod's "
                    "disruption budget.",
                    [{"reason": "DisruptionBudget",
                      "message": f"The disruption budget {name} needs 1 healthy pods"}],
                )  # fmt: skip
            if not dry:
                budget["status"]["disruptionsAllowed"] -= 1
        if not dry:
            deleted = copy.deepcopy(pod)
            deleted["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
            self._store(key, deleted, dry)
        return 201, ok


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _serve(self) -> None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = self._chunked()  # kubectl create --raw -f - streams its body
        else:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        code, answer = self.server.fake.answer(self.command, self.path, body)
        data = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunked(self) -> bytes:
        data = b""
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return data
            data += self.rfile.read(size)
            self.rfile.readline()

    do_GET = do_POST = do_PATCH = do_PUT = _serve

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeApiServer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


@dataclass
class Running:
    """A served fake: its URL, and a way to stop it."""

    fake: FakeApiServer
    url: str
    server: _Server
    thread: threading.Thread

    def stop(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def serve(fake: FakeApiServer) -> Running:
    """Serve ``fake`` on a loopback port in a thread."""
    server = _Server(fake)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return Running(fake, f"http://127.0.0.1:{server.server_address[1]}", server, thread)


@contextmanager
def served_kubeconfig(fake: FakeApiServer, folder: Path) -> Iterator[Path]:
    """``fake`` served on loopback for the block; yields a kubeconfig written in ``folder``
    that points at it.
    """
    running = serve(fake)
    try:
        config = folder / "kubeconfig"
        config.write_text(kubeconfig(running.url), encoding="utf-8")
        yield config
    finally:
        running.stop()


def kubeconfig(url: str) -> str:
    """A kubeconfig (YAML is a superset of JSON) pointing at ``url`` with a token."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "advisor", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "advisor",
                                                   "namespace": "default"}}],
    })  # fmt: skip
