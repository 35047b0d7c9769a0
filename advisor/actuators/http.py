"""HTTP clients of the resource-manager API (``/api/v1``), for the ``sim`` and ``agent`` backends.

The simulator serves the API for all its nodes at one URL; the node agent serves it on each
node, at the endpoint the operator's allow-list gives for it (:mod:`.endpoints`). Requests
carry ``Authorization: Bearer TOKEN``. Refusals come back as
:class:`~toposcope.resources.ResourceManagerError` with the HTTP status; an unreachable server
as :class:`~toposcope.advisor.errors.AdvisorConnectionError` naming the URL.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

from toposcope import __version__
from toposcope.advisor.actuators.endpoints import EndpointResolver, nodes_allowed
from toposcope.advisor.errors import AdvisorConnectionError
from toposcope.advisor.recommendations import action_from_dict
from toposcope.names import is_node_name
from toposcope.resources import (
    ActionRequest,
    ActionState,
    ActionStatus,
    Allocation,
    NodeView,
    ResourceManagerError,
    WorkloadView,
)


def api_base(url: str) -> str:
    """``url`` ending in ``/api/v1`` (appended when missing)."""
    base = url.rstrip("/")
    return base if base.endswith("/api/v1") else f"{base}/api/v1"


def allocation_from(data: Mapping[str, Any] | None) -> Allocation | None:
    """An :class:`Allocation` from its JSON form (``None`` stays ``None``)."""
    if not data:
        return None
    return Allocation(
        node=str(data.get("node", "")),
        cpus=[int(c) for c in data.get("cpus", [])],
        mems=[int(m) for m in data.get("mems", [])],
        gpus=[int(g) for g in data.get("gpus", [])],
    )


def state_from(data: Mapping[str, Any], sent: ActionRequest | None = None) -> ActionState:
    """An :class:`ActionState` from the API's JSON (the request we sent fills gaps)."""
    request = action_from_dict(data["request"]) if data.get("request") else sent
    if request is None:
        raise ValueError("action without its request")
    return ActionState(
        id=str(data.get("id", request.request_id)),
        request=request,
        status=ActionStatus(data.get("status", "pending")),
        before=allocation_from(data.get("before")),
        after=allocation_from(data.get("after")),
        error=str(data.get("error", "")),
        cost_seconds=float(data.get("cost_seconds", 0.0)),
    )


def request_body(request: ActionRequest) -> dict[str, Any]:
    """The POST /actions body: ``{request_id, kind, workload, node, cpus, mems, gpus, reason}``."""
    body = asdict(request)
    body["kind"] = str(request.kind)
    return body


class HttpResourceManager:
    """Client of one resource-manager API at ``url`` with a bearer ``token``."""

    def __init__(self, url: str, token: str | None, *, timeout: float = 30.0) -> None:
        self.url = api_base(url)
        self.token = token
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        url = f"{self.url}{path}"
        headers = {"User-Agent": f"toposcope-advisor/{__version__}", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            message = _error_message(exc.read()) or exc.reason
            if exc.code in (401, 403):
                raise ResourceManagerError(
                    f"resource manager {self.url} refused the token (HTTP {exc.code}): {message}",
                    exc.code,
                ) from exc
            raise ResourceManagerError(f"{method} {url}: {message}", exc.code) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AdvisorConnectionError(f"resource manager {url} unreachable: {reason}") from exc
        try:
            return json.loads(raw) if raw else None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise AdvisorConnectionError(
                f"resource manager {url} answered with invalid JSON: {exc}"
            ) from exc

    def nodes(self) -> list[NodeView]:
        """``GET /nodes``."""
        data = self._call("GET", "/nodes")
        items = data.get("nodes", []) if isinstance(data, dict) else data or []
        return [
            NodeView(str(n["name"]), dict(n.get("topology", {})), dict(n.get("labels", {})))
            for n in items
        ]

    def workloads(self) -> list[WorkloadView]:
        """``GET /workloads``."""
        data = self._call("GET", "/workloads")
        items = data.get("workloads", []) if isinstance(data, dict) else data or []
        return [
            WorkloadView(
                name=str(w["name"]),
                kind=str(w.get("kind", "")),
                state=str(w.get("state", "")),
                allocation=allocation_from(w.get("allocation")),
                gpus_requested=int(w.get("gpus_requested", 0)),
                pinned=bool(w.get("pinned", False)),
            )
            for w in items
        ]

    def apply(self, request: ActionRequest) -> ActionState:
        """``POST /actions``."""
        data = self._call("POST", "/actions", request_body(request))
        try:
            return state_from(data, request)
        except (KeyError, TypeError, ValueError) as exc:
            raise AdvisorConnectionError(
                f"resource manager {self.url} answered POST /actions with {data!r}"
            ) from exc

    def action(self, action_id: str) -> ActionState:
        """``GET /actions/{id}`` (the advisor asks by request id)."""
        data = self._call("GET", f"/actions/{action_id}")
        try:
            return state_from(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise AdvisorConnectionError(
                f"resource manager {self.url} answered GET /actions/{action_id} with {data!r}"
            ) from exc


class AgentResourceManager:
    """Node agents: one :class:`HttpResourceManager` per node, at the endpoint the operator allowed.

    ``resolver`` is the allow-list (:mod:`.endpoints`): a node it does not resolve gets no
    request and never sees a token. ``nodes`` are the nodes to ask for workloads (the ones the
    run's recommendations touch), kept to those the resolver allows.
    """

    def __init__(
        self, resolver: EndpointResolver, nodes: Iterable[str], *, timeout: float = 30.0
    ) -> None:
        self.resolver = resolver
        self.timeout = timeout
        self.known_nodes = nodes_allowed(resolver, nodes)

    def client(self, node: str | None) -> HttpResourceManager:
        """The client of ``node``'s agent (403 when the node has no allowed endpoint)."""
        if not node:
            raise ResourceManagerError("an agent action needs a node", 400)
        if not is_node_name(node):
            raise ResourceManagerError(f"node name {node[:80]!r} is not a valid host name", 400)
        endpoint = self.resolver.resolve(node)
        if endpoint is None:
            raise ResourceManagerError(
                f"node {node} has no allowed agent endpoint (--rm-url-map or --rm-endpoints)",
                403,
            )
        return HttpResourceManager(endpoint.url, endpoint.token, timeout=self.timeout)

    def nodes(self) -> list[NodeView]:
        """Every known node's own view."""
        return [view for node in self.known_nodes for view in self.client(node).nodes()]

    def workloads(self) -> list[WorkloadView]:
        """Workloads of every known node."""
        return [w for node in self.known_nodes for w in self.client(node).workloads()]

    def apply(self, request: ActionRequest) -> ActionState:
        """Send the request to the agent of its node."""
        return self.client(request.node).apply(request)

    def action(self, action_id: str) -> ActionState:
        """Ask every known agent; 404 when none knows the action."""
        for node in self.known_nodes:
            try:
                return self.client(node).action(action_id)
            except ResourceManagerError as exc:
                if exc.status != 404:
                    raise
        raise ResourceManagerError(f"no agent knows action {action_id}", 404)


def _error_message(raw: bytes) -> str:
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return raw.decode("utf-8", "replace").strip()[:200]
    if isinstance(data, dict):
        for key in ("error", "message", "detail"):
            if data.get(key):
                return str(data[key])
    return str(data)[:200]
