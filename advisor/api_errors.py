"""How the advisor service's HTTP API answers what goes wrong: always JSON, never internals.

Every error answer is ``{"error": "..."}`` (an apply refused while an earlier call of it
runs adds ``state`` and ``entries``):

- a refusal of the service (:class:`~toposcope.advisor.service.ServiceError`) has its own
  status: 404 unknown recommendation, 409 nothing to revert, 503 no analysis yet or a
  standby replica (with ``leader`` and ``Retry-After``)...;
- a body or query the API does not take is 400, a body over the limit 413, a route that
  does not exist 404, a method a route does not take 405 with ``Allow``, a refused bearer
  token 401 (with a challenge) or 403;
- an unreachable or refusing resource manager is 502, an illegal audit-log move 409;
- anything else is 500, logged with its traceback, answered without a detail.
"""

from __future__ import annotations

import logging
from typing import Any

from apiflask import APIFlask
from apiflask.exceptions import HTTPError
from flask import Response, jsonify, request
from pydantic import BaseModel
from werkzeug.datastructures import Headers
from werkzeug.exceptions import HTTPException

from toposcope.advisor.acting import ServiceError
from toposcope.advisor.audit import AuditStateError
from toposcope.advisor.errors import AdvisorConnectionError
from toposcope.rm import ResourceManagerError

LOG = logging.getLogger("toposcope.advisor.api")

INTERNAL_ERROR = "internal error; the advisor service's log has the details"

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "every error answer (an apply still in progress adds state and entries)",
    "properties": {"error": {"type": "string"}},
    "required": ["error"],
}

#: reason phrases where RFC 9110's differ from the ones the framework knows
_PHRASES = {413: "Content Too Large"}

_REASONS = {
    400: "The body or the query is not one the API takes (the error says why)",
    401: "Missing bearer token",
    403: "Wrong bearer token, or the service has no token and refuses every change",
    404: "Not found: no such recommendation in the latest report, node or route",
    409: "Nothing to revert, or the service applies through no resource manager",
    413: "The body is larger than 4 KiB",
    502: "The resource manager could not be reached or refused",
    503: "No analysis has completed yet, or this replica is a standby (--leader-elect): the "
    "answer names the leader in `leader`, and Retry-After says when to try again",
}


def error_responses(*statuses: int) -> dict[int | str, Any]:
    """OpenAPI response entries for error statuses, all in the one error shape."""
    ref = {"$ref": "#/components/schemas/Error"}
    return {
        status: {"description": _REASONS[status], "content": {"application/json": {"schema": ref}}}
        for status in statuses
    }


def answer_of(description: str, *names: str) -> dict[str, Any]:
    """An OpenAPI response whose JSON body is any one of the schemas ``names`` (a status
    that answers an outcome or an error).
    """
    refs = [{"$ref": f"#/components/schemas/{name}"} for name in names]
    schema = {"anyOf": refs} if len(refs) > 1 else refs[0]
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _answer(body: dict[str, Any], status: int, headers: Headers | None = None) -> Response:
    response = jsonify(body)
    phrase = _PHRASES.get(status)
    if phrase is not None:
        response.status = f"{status} {phrase}"
    else:
        response.status_code = status
    for name, value in (headers or Headers()).items():
        if name.lower() not in ("content-type", "content-length"):
            response.headers[name] = value
    return response


def error_answer(message: str, status: int, headers: Headers | None = None) -> Response:
    """The JSON error answer ``{"error": message}`` (with the error's own headers)."""
    return _answer({"error": message}, status, headers)


def json_answer(model: type[BaseModel], data: dict[str, Any], status: int) -> Response:
    """``data`` answered with ``status`` once ``model`` has validated it (an answer whose
    status has a schema of its own, outside the route's output model).
    """
    return _answer(model.model_validate(data).model_dump(mode="json"), status)


def _validation_message(detail: dict[str, Any]) -> str:
    """One message from APIFlask's ``{location: {field: [messages]}}``."""
    problems: list[str] = []
    for fields in detail.values():
        if not isinstance(fields, dict):
            continue
        for name, messages in fields.items():
            texts = messages if isinstance(messages, list) else [messages]
            problems.extend(str(t) if name == "_schema" else f"{name}: {t}" for t in texts)
    return "; ".join(problems) or "the request does not match the schema"


def register_error_handlers(app: APIFlask, max_body: int) -> None:
    """Answer every error of ``app`` as the module docstring says (bodies over ``max_body``
    bytes are named with their size).
    """

    @app.error_processor
    def on_http_error(error: HTTPError) -> Response:
        message = str(error.message)
        if isinstance(error.detail, dict) and error.detail:
            message = _validation_message(error.detail)
        return error_answer(message, error.status_code, Headers(error.headers))

    @app.errorhandler(HTTPException)
    def on_werkzeug_error(error: HTTPException) -> Response:
        status = error.code or 500
        headers = Headers(error.get_headers())
        if status == 404:
            message = f"no route {request.method} {request.path}"
        elif status == 405:
            message = f"method {request.method} is not allowed on {request.path}"
        elif status == 413:
            size = request.content_length
            message = f"the request body has {size} bytes; at most {max_body} are accepted"
        else:
            message = error.description or error.name
        return error_answer(message, status, headers)

    @app.errorhandler(ServiceError)
    def on_refused(error: ServiceError) -> Response:
        return _answer({**error.extra, "error": str(error)}, error.status, Headers(error.headers))

    @app.errorhandler(ResourceManagerError)
    def on_resource_manager(error: ResourceManagerError) -> Response:
        return error_answer(f"resource manager: {error}", 502)

    @app.errorhandler(AdvisorConnectionError)
    def on_unreachable(error: AdvisorConnectionError) -> Response:
        return error_answer(str(error), 502)

    @app.errorhandler(AuditStateError)
    def on_audit_state(error: AuditStateError) -> Response:
        return error_answer(str(error), 409)

    @app.errorhandler(Exception)
    def on_unexpected(error: Exception) -> Response:
        LOG.error("%s %s failed", request.method, request.path, exc_info=error)
        return error_answer(INTERNAL_ERROR, 500)
