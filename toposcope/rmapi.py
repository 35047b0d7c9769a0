"""The resource-manager HTTP API: one WSGI app over any :class:`ResourceManager`.

The simulator serves it for its simulated cluster and the node agent (``toposcope agent``)
serves it on a real host, backed by the local actuator; the advisor's ``agent`` and ``sim``
actuators are its clients. The app knows nothing of either backend: it turns HTTP into
calls of the :class:`toposcope.resources.ResourceManager` protocol and back.

Routes (under ``prefix``, ``/api/v1`` by default)::

    GET  /healthz              liveness, no authentication
    GET  /nodes                every node with its topology
    GET  /nodes/{name}
    GET  /workloads            every workload with its allocation
    GET  /workloads/{name}
    POST /actions              an ActionRequest; 202 with the ActionState, 200 for a repeat
    GET  /actions/{id}
    GET  /openapi.json         the OpenAPI 3.1 document (also kept in ``docs/openapi.json``)

Reads are open; ``POST`` needs ``Authorization: Bearer <token>`` (401 without it, 403 with a
wrong one). A server started without a token refuses every state change with 403, so an
agent left unconfigured cannot be steered by anyone. Every error is JSON
``{"error": "...", "field": "..."}`` (``field`` is null when no single field is at fault):
400 for a body that is not JSON or nests deeper than :func:`toposcope.jsonbody.parse_json_body`
allows, 413 for one over 1 MiB, 405 (with ``Allow``) for a method the route does not take, 422
for a body that does not match the schema, and the status of :class:`ResourceManagerError`
(404 unknown workload, 409 GPUs taken, 400 CPUs not on the node...) for requests the resource
manager refuses.

Regenerate the committed document with
``python -m toposcope.rmapi --write-openapi docs/openapi.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hmac
import json
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from apiflask import APIFlask
from apiflask.exceptions import HTTPError
from flask import Request, Response, jsonify, request
from flask.json.provider import DefaultJSONProvider
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictStr
from pydantic_core import PydanticCustomError
from werkzeug.datastructures import Headers
from werkzeug.exceptions import BadRequest, HTTPException

import toposcope.resources as core
from toposcope.httpserver import DEFAULT_MAX_BODY
from toposcope.jsonbody import JsonBodyError, parse_json_body

LOG = logging.getLogger("toposcope.rmapi")

DEFAULT_PREFIX = "/api/v1"
API_TITLE = "toposcope resource-manager API"
API_VERSION = "1.0.0"
SECURITY_SCHEME = "BearerAuth"

NO_TOKEN_MESSAGE = (
    "state changes are disabled: this server was started without a token; "
    "configure one with --token-file"
)


def _json_integer(value: object) -> object:
    """Refuse what JSON Schema's ``integer`` refuses but pydantic's lax ``int`` would coerce.

    A bool or a string is not a number, while ``4.0`` is an integer in JSON Schema (and so
    in the published document) and stays accepted.
    """
    if isinstance(value, bool | str | bytes):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


PIN_EXAMPLE: dict[str, Any] = {
    "request_id": "rec-42/0",
    "kind": "pin",
    "workload": "train-a",
    "cpus": [4, 5, 6, 7],
    "mems": [1],
    "reason": "its GPU hangs off NUMA node 1",
}

Index = Annotated[int, Field(ge=0), BeforeValidator(_json_integer)]


class Allocation(BaseModel):
    """What a workload holds: its node, CPUs, NUMA nodes for memory and GPU indexes."""

    node: str = Field(description="node the workload runs on")
    cpus: list[int] = Field(default_factory=list, description="logical CPU numbers")
    mems: list[int] = Field(default_factory=list, description="NUMA nodes for its memory")
    gpus: list[int] = Field(default_factory=list, description="GPU indexes on the node")


class Node(BaseModel):
    """A node with its topology (``Topology.to_dict`` form) and labels."""

    name: str
    topology: dict[str, Any] = Field(description="the node's topology model")
    labels: dict[str, str] = Field(default_factory=dict)


class Workload(BaseModel):
    """A workload as the resource manager sees it."""

    name: str
    kind: str = Field(description="kubernetes, slurm, docker, systemd, process...")
    state: str = Field(description="pending, running or done")
    allocation: Allocation | None
    gpus_requested: int = 0
    pinned: bool = False


class ActionRequest(BaseModel):
    """A request to change one workload's allocation (the body of ``POST /actions``).

    Strict on purpose: a string where a number belongs, a bool for a CPU number or an
    unknown field (a typo such as ``cpu``) is refused rather than guessed at.
    """

    model_config = ConfigDict(extra="forbid")

    request_id: StrictStr = Field(
        min_length=1,
        max_length=256,
        description="idempotency key: a repeat does nothing and returns the first action",
    )
    kind: core.ActionKind
    workload: StrictStr = Field(min_length=1, description="the workload to change")
    node: StrictStr | None = Field(default=None, description="target node (place, migrate)")
    cpus: list[Index] = Field(default_factory=list, description="CPUs to pin to")
    mems: list[Index] = Field(default_factory=list, description="NUMA nodes for memory")
    gpus: list[Index] = Field(default_factory=list, description="GPU indexes (place, migrate)")
    reason: StrictStr = Field(default="", max_length=4096, description="why, for the logs")


class ActionState(BaseModel):
    """The outcome of an action, with the allocation before (what a revert restores) and after."""

    id: str
    request: ActionRequest
    status: core.ActionStatus
    before: Allocation | None = None
    after: Allocation | None = None
    error: str = ""
    cost_seconds: float = Field(default=0.0, description="modelled or measured cost, seconds")


class Health(BaseModel):
    """The answer of ``GET /healthz``."""

    status: Literal["ok"]


# APIFlask takes ``list[Model]`` for a JSON array of models, though its annotations omit it.
NODE_LIST: Any = list[Node]
WORKLOAD_LIST: Any = list[Workload]

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


def _validation_error(detail: dict[str, Any]) -> tuple[str, str | None]:
    """Turn APIFlask's ``{location: {field: [messages]}}`` into one message and the first field."""
    problems: list[tuple[str, str]] = []
    for fields in detail.values():
        if not isinstance(fields, dict):
            continue
        for name, messages in fields.items():
            texts = messages if isinstance(messages, list) else [messages]
            problems.extend((str(name), str(text)) for text in texts)
    if not problems:
        return "request does not match the schema", None
    message = "; ".join(text if name == "_schema" else f"{name}: {text}" for name, text in problems)
    first = problems[0][0]
    return message, None if first == "_schema" else first.split(".")[0]


class _JsonRequest(Request):
    """Flask's request, with a message that says what is wrong with a body that is not JSON.

    Flask hides the parser's message outside debug mode; a client fixing its request wants it.
    """

    def on_json_loading_failed(self, e: ValueError | None) -> Any:
        """Refuse the body with 400, naming the parser's complaint."""
        if isinstance(e, JsonBodyError):
            raise BadRequest(str(e))
        detail = f": {e}" if e is not None else ""
        raise BadRequest(f"the body is not valid JSON{detail}")


class _JsonProvider(DefaultJSONProvider):
    """Flask's JSON, reading request bodies with :func:`parse_json_body` (bounded nesting).

    Flask's own parser lets a body of thousands of nested ``[`` raise ``RecursionError``,
    which it answers with 500; this one refuses it as a ``ValueError``, answered with 400.
    Answers keep the order of their fields.
    """

    sort_keys = False

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        """Parse a request body (``kwargs`` are Flask's and unused)."""
        return parse_json_body(s)


def _to_core(body: ActionRequest) -> core.ActionRequest:
    """The validated body as the protocol's request."""
    return core.ActionRequest(
        request_id=body.request_id,
        kind=body.kind,
        workload=body.workload,
        node=body.node,
        cpus=list(body.cpus),
        mems=list(body.mems),
        gpus=list(body.gpus),
        reason=body.reason,
    )


def _bearer_token() -> str | None:
    """The token of an ``Authorization: Bearer`` header, or None when there is none."""
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _require_token(token: str | None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Guard a state-changing view: 403 when the server has no token, 401/403 for the client's.

    It wraps the view outside body validation, so an unauthenticated client learns nothing
    about what a valid body looks like.
    """
    expected = token.encode() if token is not None else None

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(view)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if expected is None:
                raise HTTPError(403, NO_TOKEN_MESSAGE)
            given = _bearer_token()
            if given is None:
                raise HTTPError(
                    401,
                    "missing Authorization: Bearer <token> header",
                    headers={"WWW-Authenticate": 'Bearer realm="toposcope"'},
                )
            if not hmac.compare_digest(given.encode(), expected):
                raise HTTPError(403, "the bearer token is not valid for this server")
            return view(*args, **kwargs)

        return guarded

    return decorator


def _error_responses(*statuses: int) -> dict[int | str, Any]:
    """OpenAPI response entries for error statuses, all in the one error shape."""
    reasons = {
        400: "Malformed JSON, or a request the resource manager refuses (e.g. CPUs not on node)",
        401: "Missing bearer token",
        403: "Wrong bearer token, or the server has no token and refuses state changes",
        404: "Not found",
        409: "Conflicts with the current allocation (e.g. GPUs taken)",
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
    raise core.ResourceManagerError(f"unknown {what} {name!r}", 404)


def make_api_app(
    rm: core.ResourceManager, token: str | None, prefix: str = DEFAULT_PREFIX
) -> APIFlask:
    """Build the API's WSGI app over ``rm``.

    ``token`` guards every state change (``None`` refuses them all); ``prefix`` is the path
    the routes live under: the whole ``PATH_INFO``, so a server that hands every request
    under ``/api/`` to this app unchanged keeps the default ``/api/v1``.
    """
    prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
    app = APIFlask(
        "toposcope.rmapi",
        title=API_TITLE,
        version=API_VERSION,
        spec_path=f"{prefix}/openapi.json",
        docs_path=None,
    )
    app.config.update(
        AUTO_SERVERS=False,
        MAX_CONTENT_LENGTH=DEFAULT_MAX_BODY,
        AUTO_404_RESPONSE=False,
        AUTO_VALIDATION_ERROR_RESPONSE=True,
        AUTO_AUTH_ERROR_RESPONSE=False,
        HTTP_ERROR_SCHEMA=ERROR_SCHEMA,
        VALIDATION_ERROR_SCHEMA=ERROR_SCHEMA,
        VALIDATION_ERROR_DESCRIPTION="Body does not match the schema (missing field, wrong type)",
        SECURITY_SCHEMES={
            SECURITY_SCHEME: {
                "type": "http",
                "scheme": "bearer",
                "description": "the token the server was started with (--token-file)",
            }
        },
        DESCRIPTION=(
            "Nodes, workloads and idempotent allocation changes (pin, migrate-memory, place, "
            "migrate, release) of one resource manager: the simulator or a node agent."
        ),
    )
    app.request_class = _JsonRequest
    app.json = _JsonProvider(app)
    # The protocol returns the first ActionState for a repeated request_id but does not say
    # it was a repeat, so the app remembers which ids it has answered (one short string per
    # action, living as long as the resource manager it serves in the simulator and the
    # agent). The lock makes "apply, then remember" atomic: of concurrent repeats exactly
    # one answers 202, and state changes on one server run one at a time.
    apply_lock = threading.Lock()
    answered: set[str] = set()

    @app.error_processor
    def on_http_error(error: HTTPError) -> Response:
        if error.status_code == app.config["VALIDATION_ERROR_STATUS_CODE"] and isinstance(
            error.detail, dict
        ):
            message, field = _validation_error(error.detail)
            return _error(message, error.status_code, field)
        return _error(str(error.message), error.status_code, headers=Headers(error.headers))

    @app.errorhandler(HTTPException)
    def on_werkzeug_error(error: HTTPException) -> Response:
        status = error.code or 500
        return _error(error.description or error.name, status, headers=Headers(error.get_headers()))

    @app.errorhandler(core.ResourceManagerError)
    def on_refused(error: core.ResourceManagerError) -> Response:
        status = error.status if 400 <= error.status <= 599 else 500
        return _error(str(error), status)

    @app.get(f"{prefix}/healthz")
    @app.output(Health)
    @app.doc(operation_id="healthz")
    def healthz() -> dict[str, str]:
        """Liveness: the server answers; it does not ask the resource manager."""
        return {"status": "ok"}

    @app.get(f"{prefix}/nodes")
    @app.output(NODE_LIST)
    @app.doc(operation_id="listNodes")
    def list_nodes() -> list[dict[str, Any]]:
        """Every node with its topology."""
        return [dataclasses.asdict(node) for node in rm.nodes()]

    @app.get(f"{prefix}/nodes/<name>")
    @app.output(Node)
    @app.doc(operation_id="getNode", responses=_error_responses(404))
    def get_node(name: str) -> dict[str, Any]:
        """One node with its topology."""
        node: core.NodeView = _find(rm.nodes(), name, "node")
        return dataclasses.asdict(node)

    @app.get(f"{prefix}/workloads")
    @app.output(WORKLOAD_LIST)
    @app.doc(operation_id="listWorkloads")
    def list_workloads() -> list[dict[str, Any]]:
        """Every workload with its allocation."""
        return [dataclasses.asdict(workload) for workload in rm.workloads()]

    @app.get(f"{prefix}/workloads/<name>")
    @app.output(Workload)
    @app.doc(operation_id="getWorkload", responses=_error_responses(404))
    def get_workload(name: str) -> dict[str, Any]:
        """One workload with its allocation."""
        workload: core.WorkloadView = _find(rm.workloads(), name, "workload")
        return dataclasses.asdict(workload)

    state_ref = {"$ref": "#/components/schemas/ActionState"}

    @app.post(f"{prefix}/actions")
    @app.output(ActionState, status_code=202, description="Accepted: the new action")
    @app.doc(
        operation_id="applyAction",
        security=SECURITY_SCHEME,
        responses={
            200: {
                "description": "A repeated request_id: the first action, nothing done again",
                "content": {"application/json": {"schema": state_ref}},
            },
            **_error_responses(400, 401, 403, 404, 409),
        },
    )
    @_require_token(token)
    @app.input(ActionRequest, arg_name="body", example=PIN_EXAMPLE)
    def apply_action(body: ActionRequest) -> tuple[dict[str, Any], int, dict[str, str]]:
        """Apply one action to a workload's allocation.

        Idempotent by request_id: a repeat does nothing and answers 200 with the first action.
        """
        submitted = _to_core(body)
        with apply_lock:
            state = rm.apply(submitted)
            repeat = submitted.request_id in answered
            answered.add(submitted.request_id)
        LOG.info(
            "action %s %s on %s: %s%s",
            submitted.request_id,
            submitted.kind.value,
            submitted.workload,
            state.status.value,
            " (repeat)" if repeat else "",
        )
        location = {"Location": f"{prefix}/actions/{state.id}"}
        return dataclasses.asdict(state), 200 if repeat else 202, location

    @app.get(f"{prefix}/actions/<action_id>")
    @app.output(ActionState)
    @app.doc(operation_id="getAction", responses=_error_responses(404))
    def get_action(action_id: str) -> dict[str, Any]:
        """The state of an earlier action."""
        return dataclasses.asdict(rm.action(action_id))

    @app.spec_processor
    def finish_spec(spec: dict[Any, Any] | str) -> dict[Any, Any] | str:
        return _tidy_spec(spec) if isinstance(spec, dict) else spec

    return app


def _tidy_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Name the shared error schema ``Error`` and fold nested model copies into one each.

    APIFlask files the error schema as ``HTTPError`` and ``ValidationError`` and copies each
    nested pydantic model under its parent (``ActionState.Allocation``); clients are better
    served by one schema per model.
    """
    schemas: dict[str, Any] = spec.get("components", {}).get("schemas", {})
    renames: dict[str, str] = {}
    for name in list(schemas):
        short = "Error" if name in {"HTTPError", "ValidationError"} else name.rsplit(".", 1)[-1]
        if short != name:
            renames[name] = short
            schemas.setdefault(short, schemas[name])
            del schemas[name]

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                name = ref.removeprefix("#/components/schemas/")
                node = {**node, "$ref": f"#/components/schemas/{renames.get(name, name)}"}
            return {key: fix(value) for key, value in node.items()}
        if isinstance(node, list):
            return [fix(item) for item in node]
        return node

    tidy: dict[str, Any] = fix(spec)
    tidy["components"]["schemas"] = dict(sorted(tidy["components"]["schemas"].items()))
    return tidy


class _NoResourceManager:
    """A resource manager that is never called: enough to build the app for its document."""

    def nodes(self) -> list[core.NodeView]:
        """Never called."""
        raise NotImplementedError

    def workloads(self) -> list[core.WorkloadView]:
        """Never called."""
        raise NotImplementedError

    def apply(self, request: core.ActionRequest) -> core.ActionState:
        """Never called."""
        raise NotImplementedError

    def action(self, action_id: str) -> core.ActionState:
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
    return json.dumps(openapi_document(prefix), indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m toposcope.rmapi --write-openapi FILE``: regenerate the OpenAPI document."""
    parser = argparse.ArgumentParser(prog="python -m toposcope.rmapi", description=main.__doc__)
    parser.add_argument(
        "--write-openapi",
        metavar="FILE",
        required=True,
        help="write the OpenAPI document to FILE ('-' for standard output)",
    )
    parser.add_argument(
        "--prefix", default=DEFAULT_PREFIX, help="route prefix (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    text = openapi_text(args.prefix)
    if args.write_openapi == "-":
        sys.stdout.write(text)
    else:
        Path(args.write_openapi).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
