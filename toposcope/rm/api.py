"""The resource-manager HTTP API: one WSGI app over any resource-manager backend.

The simulator serves it for its simulated cluster and the node agent (``toposcope agent``)
serves it on a real host, backed by the agent's local resource manager; the advisor's
``agent`` and ``sim`` backends are its clients. The app knows nothing of either backend: it
turns HTTP into calls of a backend built on :class:`toposcope.rm.base.BaseResourceManager`
and back, reading and writing the core models (:mod:`toposcope.rm.models`) from which its
document is made.

Routes (under ``prefix``, ``/api/v1`` by default)::

    GET  /healthz              liveness, no authentication
    GET  /nodes                every node with its topology
    GET  /nodes/{name}
    GET  /workloads            every workload with its allocation
    GET  /workloads/{name}
    POST /actions              an ActionRequest; 202 with the ActionState, 200 for a repeat
    GET  /actions/{id}         by action id or request id
    GET  /openapi.json         the OpenAPI 3.1 document (also kept in ``docs/openapi.json``)

Reads are open; ``POST`` needs ``Authorization: Bearer <token>`` (401 without it, 403 with a
wrong one). A server started without a token refuses every state change with 403, so an
agent left unconfigured cannot be steered by anyone. Every error is JSON
``{"error": "...", "field": "..."}`` (``field`` is null when no single field is at fault):
400 for a body that is not JSON or nests deeper than
:func:`toposcope.serving.jsonbody.parse_json_body`
allows, 413 for one over 1 MiB, 405 (with ``Allow``) for a method the route does not take, 422
for a body that does not match the schema (worded by :func:`toposcope.rm.validation.describe`,
as every backend words it), and the status of :class:`ResourceManagerError` (404 unknown
workload, 409 GPUs taken or a request_id reused for another request, 400 CPUs not on the
node, 429 with ``Retry-After`` when it may succeed later: a
:class:`~toposcope.rm.errors.RetryLaterError`) for requests the resource manager refuses.

Regenerate the committed document with
``python -m toposcope.rm.api --write-openapi docs/openapi.json``.
"""

from __future__ import annotations

import logging
import sys
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any, Literal

from apiflask import APIFlask
from apiflask.exceptions import HTTPError
from flask import Response, jsonify
from pydantic import BaseModel, RootModel, ValidationError
from werkzeug.datastructures import Headers
from werkzeug.exceptions import HTTPException

from toposcope.auth.bearer import BearerAuth, TokenVerifier
from toposcope.rm import (
    ActionRequest,
    ActionServer,
    ActionState,
    BaseResourceManager,
    NodeView,
    ResourceManagerError,
    RetryLaterError,
    WorkloadView,
)
from toposcope.rm.validation import describe
from toposcope.serving.httpapi import (
    api_app,
    document_text,
    openapi_parser,
    tidy_spec,
    write_document,
)
from toposcope.serving.httpserver import DEFAULT_MAX_BODY

LOG = logging.getLogger("toposcope.rm.api")

DEFAULT_PREFIX = "/api/v1"
API_TITLE = "toposcope resource-manager API"
API_VERSION = "1.0.0"
SECURITY_SCHEME = "BearerAuth"

NO_TOKEN_MESSAGE = (
    "state changes are disabled: this server was started without a token; "
    "configure one with --token-file"
)

PIN_EXAMPLE: dict[str, Any] = {
    "request_id": "rec-42-0",
    "kind": "pin",
    "workload": "train-a",
    "cpus": [4, 5, 6, 7],
    "mems": [1],
    "reason": "its GPU hangs off NUMA node 1",
}


# The API's bodies are the core models (:mod:`toposcope.rm.models`); APIFlask takes pydantic
# models, so each is wrapped as a root model, which the document then folds away.
class NodeBody(RootModel[NodeView]):
    """A node, as the API writes it."""


class WorkloadBody(RootModel[WorkloadView]):
    """A workload, as the API writes it."""


class ActionRequestBody(RootModel[ActionRequest]):
    """An action request, as the API reads it."""


class ActionStateBody(RootModel[ActionState]):
    """An action, as the API writes it."""


class Health(BaseModel):
    """The answer of ``GET /healthz``."""

    status: Literal["ok"]


# APIFlask takes ``list[Model]`` for a JSON array of models, though its annotations omit it.
NODE_LIST: Any = list[NodeBody]
WORKLOAD_LIST: Any = list[WorkloadBody]

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "every error answer; field is null when no single field is at fault",
    "properties": {
        "error": {"type": "string"},
        "field": {"type": ["string", "null"]},
    },
    "required": ["error", "field"],
    "additionalProperties": False,
}


def _error(
    message: str, status: int, field: str | None = None, headers: Headers | None = None
) -> Response:
    """A JSON error answer in the API's one error shape (with the error's own headers)."""
    response = jsonify({"error": message, "field": field})
    response.status_code = status
    for name, value in (headers or Headers()).items():
        if name.lower() != "content-type":
            response.headers[name] = value
    return response


def _validation_error(error: HTTPError) -> tuple[str, str | None]:
    """The message and first field of a body APIFlask refused, in the core's words.

    APIFlask raises its error from pydantic's, which :func:`toposcope.rm.validation.describe`
    words exactly as every backend words the same problem in a request built in Python.
    """
    cause = error.__cause__
    if isinstance(cause, ValidationError):
        return describe(cause)
    return "the body does not match the schema", None


def _require_token(
    token: str | None, verifier: TokenVerifier | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Guard a state-changing view with the shared bearer check (:mod:`toposcope.auth.bearer`):
    403 when the server has no token, 401/403 for the client's (503 when ``verifier``, which
    decides instead of ``token``, cannot decide).

    It wraps the view outside body validation, so an unauthenticated client learns nothing
    about what a valid body looks like.
    """
    return BearerAuth(
        token, realm="toposcope", no_token_message=NO_TOKEN_MESSAGE, verifier=verifier
    ).required


def _error_responses(*statuses: int) -> dict[int | str, Any]:
    """OpenAPI response entries for error statuses, all in the one error shape."""
    reasons = {
        400: "Malformed JSON, or a request the resource manager refuses (e.g. CPUs not on node)",
        401: "Missing bearer token",
        403: "Wrong bearer token, or the server has no token and refuses state changes",
        404: "Not found",
        409: "Conflicts with the current allocation (e.g. GPUs taken), or a request_id "
        "already used for a different request",
        429: "Refused for now, nothing done: the same request may succeed later (e.g. a "
        "disruption budget allows no eviction now); Retry-After says when, if known",
        503: "The token could not be checked (the Kubernetes API server did not answer the "
        "TokenReview): nothing done, retry later",
    }
    ref = {"$ref": "#/components/schemas/Error"}
    return {
        status: {"description": reasons[status], "content": {"application/json": {"schema": ref}}}
        for status in statuses
    }


def _find(items: Sequence[Any], name: str, what: str) -> Any:
    """The item called ``name``, or a 404 naming what was looked for."""
    for item in items:
        if item.name == name:
            return item
    raise ResourceManagerError(f"unknown {what} {name!r}", 404)


def make_api_app(
    rm: ActionServer,
    token: str | None,
    prefix: str = DEFAULT_PREFIX,
    *,
    verifier: TokenVerifier | None = None,
) -> APIFlask:
    """Build the API's WSGI app over ``rm``.

    ``token`` guards every state change (``None`` refuses them all), unless ``verifier``
    decides on the callers' tokens instead (:mod:`toposcope.kubeapi.tokenreview`); ``prefix`` is
    the path
    the routes live under: the whole ``PATH_INFO``, so a server that hands every request
    under ``/api/`` to this app unchanged keeps the default ``/api/v1``.
    """
    prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
    app = api_app(
        "toposcope.rm.api",
        title=API_TITLE,
        version=API_VERSION,
        description=(
            "Nodes, workloads and idempotent allocation changes (pin, migrate-memory, place, "
            "migrate, release, unplace) of one resource manager: the simulator or a node agent."
        ),
        spec_path=f"{prefix}/openapi.json",
        max_body=DEFAULT_MAX_BODY,
        error_schema=ERROR_SCHEMA,
        token_description="the token the server was started with (--token-file)",
        security_scheme=SECURITY_SCHEME,
        VALIDATION_ERROR_DESCRIPTION="Body does not match the schema (missing field, wrong type)",
    )

    @app.error_processor
    def on_http_error(error: HTTPError) -> Response:
        if error.status_code == app.config["VALIDATION_ERROR_STATUS_CODE"]:
            message, field = _validation_error(error)
            return _error(message, error.status_code, field)
        return _error(str(error.message), error.status_code, headers=Headers(error.headers))

    @app.errorhandler(HTTPException)
    def on_werkzeug_error(error: HTTPException) -> Response:
        status = error.code or 500
        return _error(error.description or error.name, status, headers=Headers(error.get_headers()))

    @app.errorhandler(ResourceManagerError)
    def on_refused(error: ResourceManagerError) -> Response:
        status = error.status if 400 <= error.status <= 599 else 500
        headers = Headers()
        if isinstance(error, RetryLaterError) and error.retry_after_s is not None:
            headers["Retry-After"] = str(max(0, round(error.retry_after_s)))
        return _error(str(error), status, error.field, headers)

    @app.get(f"{prefix}/healthz")
    @app.output(Health)
    @app.doc(operation_id="healthz")
    def healthz() -> dict[str, str]:
        """Liveness: the server answers; it does not ask the resource manager."""
        return {"status": "ok"}

    @app.get(f"{prefix}/nodes")
    @app.output(NODE_LIST)
    @app.doc(operation_id="listNodes")
    def list_nodes() -> list[NodeView]:
        """Every node with its topology."""
        return rm.nodes()

    @app.get(f"{prefix}/nodes/<name>")
    @app.output(NodeBody)
    @app.doc(operation_id="getNode", responses=_error_responses(404))
    def get_node(name: str) -> NodeView:
        """One node with its topology."""
        node: NodeView = _find(rm.nodes(), name, "node")
        return node

    @app.get(f"{prefix}/workloads")
    @app.output(WORKLOAD_LIST)
    @app.doc(operation_id="listWorkloads")
    def list_workloads() -> list[WorkloadView]:
        """Every workload with its allocation."""
        return rm.workloads()

    @app.get(f"{prefix}/workloads/<name>")
    @app.output(WorkloadBody)
    @app.doc(operation_id="getWorkload", responses=_error_responses(404))
    def get_workload(name: str) -> WorkloadView:
        """One workload with its allocation."""
        workload: WorkloadView = _find(rm.workloads(), name, "workload")
        return workload

    state_ref = {"$ref": "#/components/schemas/ActionStateBody"}

    @app.post(f"{prefix}/actions")
    @app.output(ActionStateBody, status_code=202, description="Accepted: the new action")
    @app.doc(
        operation_id="applyAction",
        security=SECURITY_SCHEME,
        responses={
            200: {
                "description": "A repeated request (same request_id, same request): the first "
                "action as it stands now, nothing done again",
                "content": {"application/json": {"schema": state_ref}},
            },
            **_error_responses(400, 401, 403, 404, 409, 429, 503),
        },
    )
    @_require_token(token, verifier)
    @app.input(ActionRequestBody, arg_name="body", example=PIN_EXAMPLE)
    def apply_action(body: ActionRequestBody) -> tuple[ActionState, int, dict[str, str]]:
        """Apply one action to a workload's allocation.

        Idempotent by request_id: the same request again does nothing and answers 200 with
        the first action; the same request_id for a different request is a 409.
        """
        applied = rm.apply_once(body.root)
        state = applied.state
        LOG.info(
            "action %s %s on %s: %s%s",
            state.request.request_id,
            state.request.kind.value,
            state.request.workload,
            state.status.value,
            " (repeat)" if applied.repeat else "",
        )
        location = {"Location": f"{prefix}/actions/{urllib.parse.quote(state.id, safe='')}"}
        return state, 200 if applied.repeat else 202, location

    # ``path``: an id may hold a ``/`` (sent percent-encoded, decoded before routing)
    @app.get(f"{prefix}/actions/<path:action_id>")
    @app.output(ActionStateBody)
    @app.doc(operation_id="getAction", responses=_error_responses(404))
    def get_action(action_id: str) -> ActionState:
        """The state of an earlier action, by its id or by its request id."""
        return rm.action(action_id)

    @app.spec_processor
    def finish_spec(spec: dict[Any, Any] | str) -> dict[Any, Any] | str:
        return tidy_spec(spec) if isinstance(spec, dict) else spec

    return app


class _NoResourceManager(BaseResourceManager):
    """A resource manager that is never called: enough to build the app for its document."""

    def nodes(self) -> list[NodeView]:
        """Never called."""
        raise NotImplementedError

    def workloads(self) -> list[WorkloadView]:
        """Never called."""
        raise NotImplementedError

    def _carry_out(self, request: ActionRequest) -> ActionState:
        """Never called."""
        raise NotImplementedError


def openapi_document(prefix: str = DEFAULT_PREFIX) -> dict[str, Any]:
    """The API's OpenAPI document, as the app serves it at ``{prefix}/openapi.json``."""
    app = make_api_app(_NoResourceManager(), token=None, prefix=prefix)
    spec = app.spec
    if not isinstance(spec, dict):
        raise TypeError(f"APIFlask produced a {type(spec).__name__} document, not a dict")
    return spec


def openapi_text(prefix: str = DEFAULT_PREFIX) -> str:
    """The OpenAPI document as the text committed in ``docs/openapi.json``."""
    return document_text(openapi_document(prefix))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m toposcope.rm.api --write-openapi FILE``: regenerate the OpenAPI document."""
    parser = openapi_parser("python -m toposcope.rm.api", main.__doc__)
    parser.add_argument(
        "--prefix", default=DEFAULT_PREFIX, help="route prefix (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    write_document(args.write_openapi, openapi_text(args.prefix))
    return 0


if __name__ == "__main__":
    sys.exit(main())
