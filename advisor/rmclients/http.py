"""HTTP clients of the resource-manager API (``/api/v1``), for the ``sim`` and ``agent`` backends.

The simulator serves the API for all its nodes at one URL; the node agent serves it on each
node, at the endpoint the operator's allow-list gives for it (:mod:`.endpoints`). Requests
carry ``Authorization: Bearer TOKEN``; a token given as a
:class:`~toposcope.auth.tokens.TokenFile` is read again when its file changes (a projected
ServiceAccount token the kubelet rotates), so every request carries the current one. Bodies
are written and answers read with the core models (:mod:`toposcope.rm.validation`), in the
one shape the API has (a JSON array for a list). Refusals come back as
:class:`~toposcope.rm.errors.ResourceManagerError` with the HTTP status and the field the
server named; an unreachable server, a failed TLS handshake, or an answer that does not fit
the models, as :class:`~toposcope.advisor.errors.AdvisorConnectionError` naming the URL. TLS
and where a token may travel in clear: :mod:`.clienttls`.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from typing import Any, TypeVar

from toposcope import __version__
from toposcope.advisor.errors import AdvisorConnectionError
from toposcope.advisor.rmclients.clienttls import ClientTls
from toposcope.advisor.rmclients.endpoints import EndpointResolver, nodes_allowed
from toposcope.advisor.rmclients.gang_plan import FABRIC_KINDS, GANG_POLICIES, gang_plan
from toposcope.advisor.rmclients.joint_plan import is_joint, joint_plan
from toposcope.advisor.rmclients.plans import api_base, api_plan
from toposcope.auth.tokens import Token, token_text
from toposcope.errors import ConfigError
from toposcope.identity.names import is_node_name
from toposcope.jsonrequest import json_request
from toposcope.report.recommendation import Recommendation
from toposcope.rm import (
    ActionRequest,
    ActionState,
    InvalidAnswerError,
    NodeView,
    ResourceManagerError,
    WorkloadView,
    parse_answer,
)
from toposcope.rm.plan import AGENT_KINDS, HttpStep, Plan, PlanHints

T = TypeVar("T")


class HttpResourceManager:
    """Client of one resource-manager API at ``url`` with a bearer ``token``.

    ``tls`` says how ``https://`` URLs are checked and whether the token may go over plain
    HTTP to another host (``ConfigError`` here when it may not).
    """

    #: the fabric-placement kinds :meth:`steer_fabric` carries out (a running job's move)
    fabric_kinds = FABRIC_KINDS
    #: the policies whose moves of running multi-node jobs :meth:`steer_fabric` carries out
    gang_policies = GANG_POLICIES

    def __init__(
        self,
        url: str,
        token: Token | None,
        *,
        timeout: float = 30.0,
        tls: ClientTls | None = None,
    ) -> None:
        self.url = api_base(url)
        self.token = token
        self.timeout = timeout
        self.tls = tls or ClientTls()
        self.tls.check(self.url, token_text(token))
        self.context = self.tls.opener_context(self.url)

    def _call(self, method: str, path: str, body: object = None) -> Any:
        url = f"{self.url}{path}"
        request = json_request(
            url,
            method,
            body,
            token=token_text(self.token),
            headers={"User-Agent": f"toposcope-advisor/{__version__}"},
        )
        try:
            with urllib.request.urlopen(
                request, timeout=self.timeout, context=self.context
            ) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            message, field = _error_answer(exc.read())
            message = message or str(exc.reason)
            if exc.code in (401, 403):
                raise ResourceManagerError(
                    f"resource manager {self.url} refused the token (HTTP {exc.code}): {message}",
                    exc.code,
                ) from exc
            raise ResourceManagerError(f"{method} {url}: {message}", exc.code, field) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            # a server refusing our certificate under TLS 1.3 may just reset the connection
            refused = isinstance(reason, ConnectionResetError) and url.startswith("https:")
            if isinstance(reason, ssl.SSLError) or refused:
                raise AdvisorConnectionError(
                    f"resource manager {url}: TLS failed ({reason}); check --rm-tls-ca-file, "
                    "--rm-tls-cert-file and the names in its certificate"
                ) from exc
            raise AdvisorConnectionError(f"resource manager {url} unreachable: {reason}") from exc
        try:
            return json.loads(raw) if raw else None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise AdvisorConnectionError(
                f"resource manager {url} answered with invalid JSON: {exc}"
            ) from exc

    def _read(self, kind: type[T], method: str, path: str, body: object = None) -> T:
        """Call the API and read its answer as ``kind`` (a connection error if it does not fit)."""
        data = self._call(method, path, body)
        try:
            return parse_answer(kind, data, f"{method} {path}")
        except InvalidAnswerError as exc:
            raise AdvisorConnectionError(
                f"resource manager {self.url} answered with what the API does not define: {exc}"
            ) from exc

    def nodes(self) -> list[NodeView]:
        """``GET /nodes``."""
        return self._read(list[NodeView], "GET", "/nodes")

    def workloads(self) -> list[WorkloadView]:
        """``GET /workloads``."""
        return self._read(list[WorkloadView], "GET", "/workloads")

    def plan(self, request: ActionRequest, hints: PlanHints | None = None) -> Plan:
        """``POST /actions`` with the request (the simulator carries out every kind)."""
        return api_plan(request, self.url, "sim")

    def execute(self, plan: Plan) -> ActionState:
        """Send the plan's request (:meth:`plan`); a refused plan is the API's 400."""
        if plan.refused:
            raise ResourceManagerError(plan.refused, 400, "kind")
        (step,) = plan.steps
        if not isinstance(step, HttpStep) or not step.url.startswith(self.url + "/"):
            raise ResourceManagerError(f"the plan has a step for another API: {step}", 500)
        return self._read(ActionState, step.method, step.url.removeprefix(self.url), step.body)

    def apply(self, request: ActionRequest) -> ActionState:
        """``POST /actions`` (202 for a new action, 200 for a repeat: the same answer)."""
        return self.execute(self.plan(request))

    def action(self, action_id: str) -> ActionState:
        """``GET /actions/{id}`` (the advisor asks by request id)."""
        return self._read(ActionState, "GET", f"/actions/{urllib.parse.quote(action_id, safe='')}")

    def plan_fabric(self, recommendation: Recommendation) -> Plan:
        """The simulator's whole-gang move for a fabric-placement ``migrate-job``
        (:func:`~toposcope.advisor.rmclients.gang_plan.gang_plan`); a refusal is the plan's
        ``refused``; a joint move of several jobs is one request too
        (:func:`~toposcope.advisor.rmclients.joint_plan.joint_plan`).
        """
        if is_joint(recommendation):
            return joint_plan(recommendation, self.url)
        return gang_plan(recommendation, self.url)

    def steer_fabric(self, recommendation: Recommendation) -> ActionState:
        """Send :meth:`plan_fabric`'s one request: every part of the job moves at once."""
        return self.execute(self.plan_fabric(recommendation))


class AgentResourceManager:
    """Node agents: one :class:`HttpResourceManager` per node, at the endpoint the operator allowed.

    ``resolver`` is the allow-list (:mod:`.endpoints`): a node it does not resolve gets no
    request and never sees a token. ``nodes`` are the nodes to ask for workloads (the ones the
    run's recommendations touch), kept to those the resolver allows.
    """

    def __init__(
        self,
        resolver: EndpointResolver,
        nodes: Iterable[str],
        *,
        timeout: float = 30.0,
        tls: ClientTls | None = None,
    ) -> None:
        self.resolver = resolver
        self.timeout = timeout
        self.tls = tls or ClientTls()
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
        try:
            return HttpResourceManager(
                endpoint.url, endpoint.token, timeout=self.timeout, tls=self.tls
            )
        except ConfigError as exc:
            raise ResourceManagerError(f"node {node}: {exc}", 403) from exc

    def nodes(self) -> list[NodeView]:
        """Every known node's own view."""
        return [view for node in self.known_nodes for view in self.client(node).nodes()]

    def workloads(self) -> list[WorkloadView]:
        """Workloads of every known node."""
        return [w for node in self.known_nodes for w in self.client(node).workloads()]

    def plan(self, request: ActionRequest, hints: PlanHints | None = None) -> Plan:
        """``POST /actions`` to the agent of the request's node; a node agent serves one host,
        so a ``place``, ``migrate`` or ``release`` is refused as the agent would (400).
        """
        client = self.client(request.node)
        return api_plan(request, client.url, "agent", AGENT_KINDS)

    def apply(self, request: ActionRequest) -> ActionState:
        """Send the request to the agent of its node (exactly :meth:`plan`'s step)."""
        return self.client(request.node).execute(self.plan(request))

    def action(self, action_id: str) -> ActionState:
        """Ask every known agent; 404 when none knows the action."""
        for node in self.known_nodes:
            try:
                return self.client(node).action(action_id)
            except ResourceManagerError as exc:
                if exc.status != 404:
                    raise
        raise ResourceManagerError(f"no agent knows action {action_id}", 404)


def _error_answer(raw: bytes) -> tuple[str, str | None]:
    """The message and field of an error answer (the API's ``{"error", "field"}``).

    Anything else (a proxy's HTML page, say) gives its first 200 characters as the message.
    """
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return raw.decode("utf-8", "replace").strip()[:200], None
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        field = data.get("field")
        return data["error"], field if isinstance(field, str) else None
    return str(data)[:200], None
