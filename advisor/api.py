"""The advisor service's HTTP API, on APIFlask like the resource-manager API.

Routes of :func:`advisor_app` (the JSON ones in the OpenAPI document, served at
``/api/v1/openapi.json`` and committed as ``docs/advisor-openapi.json``)::

    GET  /api/v1/recommendations                the latest report (run, recommendations, notes)
    GET  /api/v1/recommendations/{id}           one recommendation, its audit rows, verdict
    POST /api/v1/recommendations/{id}/apply     apply it (bearer token)
    POST /api/v1/recommendations/{id}/revert    revert it (bearer token)
    GET  /api/v1/audit[?recommendation=ID]      the audit log and the verifications
    GET  /api/v1/placement?gpus=N[&node=NAME][&top=K]
                                                the best GPU sets for a job of N GPUs over the
                                                latest model (what ``toposcope place`` ranks)
    GET  /api/v1/auto-apply                     the automatic loop: state, policy, decisions
    POST /api/v1/auto-apply/stop|resume         its kill switch (bearer token)
    GET  /api/v1/openapi.json                   the OpenAPI document
    GET  /metrics                               toposcope_advisor_* (Prometheus text)
    GET  /-/healthy, /-/ready                   liveness; ready once an analysis finished
    GET  /                                      a landing page

Reads are open; ``POST`` needs ``Authorization: Bearer <token>``, checked by the shared
:class:`~toposcope.auth.bearer.BearerAuth` before the body is read (401 without it, 403 with a
wrong one, 403 for everyone when the service was started without a token). A ``POST`` may
carry ``{"user": "NAME"}`` (:class:`~toposcope.advisor.api_models.UserBody`): the audit log
then records the actor as ``NAME via <service actor>``; any other body answers 400, one over
:data:`MAX_BODY_BYTES` 413. Every error is JSON ``{"error": "..."}`` (a method a route does
not take: 405 with ``Allow``), an unexpected one a 500 without internals (the traceback goes
to the service's log).

An apply answers 200 for ``applied``, ``dry-run`` and ``skipped``, 409 for ``failed``, 502
when the resource manager could not be reached, and 409
``{"error": ..., "state": "in_progress", "entries": [...]}`` while an earlier call of it is
still running (``entries``: its unsettled audit rows). A revert answers
``{"state": "reverted" | "partial", "outcomes": [...]}``: 200 when everything was undone,
202 when something is still running after the bounded wait (revert again later), 409 when a
revert failed, 502 when an outcome is unknown.

Regenerate the committed document with
``python -m toposcope.advisor.api --write-openapi docs/advisor-openapi.json``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from apiflask import APIFlask

from toposcope.advisor import api_models as models
from toposcope.advisor.api_errors import ERROR_SCHEMA, register_error_handlers
from toposcope.advisor.api_routes import (
    API_PREFIX,
    SECURITY_SCHEME,
    SERVICE_KEY,
    register_changes,
    register_operations,
    register_reads,
)
from toposcope.advisor.autoapply.api import register_auto_apply
from toposcope.advisor.service import AdvisorService
from toposcope.auth.bearer import BearerAuth
from toposcope.report.advisor_api import InProgress
from toposcope.serving.httpapi import (
    JsonProvider,
    JsonRequest,
    api_app,
    document_text,
    openapi_parser,
    tidy_spec,
    write_document,
)
from toposcope.serving.httpserver import HttpServer, WsgiApp
from toposcope.serving.jsonbody import JsonBodyError

API_TITLE = "toposcope advisor API"
API_VERSION = "1.0.0"
DEFAULT_PORT = 9849
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
#: the largest POST body accepted (``{"user": ...}`` needs far less); a larger one answers 413
MAX_BODY_BYTES = 4096
REALM = "toposcope-advisor"
NO_TOKEN_MESSAGE = (
    "applying and reverting are disabled: this service was started without a token; "
    "configure one with --api-token-file"
)
#: answer schemas only named in responses of other statuses, added to the document
_EXTRA_SCHEMAS = (InProgress,)


class _OptionalBodyRequest(JsonRequest):
    """The request of the advisor API: a ``POST`` without a body (or with white space only)
    is a ``POST`` of ``{}``, any other body is parsed as JSON.
    """

    def on_json_loading_failed(self, e: ValueError | None) -> Any:
        """``None`` for an empty body (no fields), else refuse it as not JSON."""
        if not self.get_data().strip():
            return None
        return super().on_json_loading_failed(e)


class _BodyProvider(JsonProvider):
    """The shared JSON provider, refusing a body of JSON ``null`` (which APIFlask would
    otherwise take for no body at all).
    """

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        """Parse a request body; ``null`` is not an object and is refused."""
        value = super().loads(s, **kwargs)
        if value is None:
            raise JsonBodyError(models.NOT_AN_OBJECT)
        return value


def _finish_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Add the schemas only named in other statuses' answers, then tidy the document."""
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    for model in _EXTRA_SCHEMAS:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, nested in schema.pop("$defs", {}).items():
            schemas.setdefault(name, nested)
        schemas.setdefault(model.__name__, schema)
    return tidy_spec(spec)


def _api_app(token: str | None) -> APIFlask:
    """The app with every route; :func:`advisor_app` gives it its service."""
    app = api_app(
        "toposcope.advisor.api",
        title=API_TITLE,
        version=API_VERSION,
        description=(
            "The advisor service's recommendations (from its latest periodic analysis), "
            "applying and reverting them through its resource manager, the audit log of "
            "what was applied with the verdicts on it, and what-if GPU placements."
        ),
        spec_path=f"{API_PREFIX}/openapi.json",
        max_body=MAX_BODY_BYTES,
        error_schema=ERROR_SCHEMA,
        token_description="the token the service was started with (--api-token-file)",
        security_scheme=SECURITY_SCHEME,
        VALIDATION_ERROR_STATUS_CODE=400,
        VALIDATION_ERROR_DESCRIPTION="A body or query the API does not take (the error says why)",
    )
    app.request_class = _OptionalBodyRequest
    app.json = _BodyProvider(app)
    register_error_handlers(app, MAX_BODY_BYTES)
    register_operations(app)
    register_reads(app)
    auth = BearerAuth(token, realm=REALM, no_token_message=NO_TOKEN_MESSAGE)
    register_changes(app, auth)
    register_auto_apply(app, auth)

    @app.spec_processor
    def finish_spec(spec: dict[Any, Any] | str) -> dict[Any, Any] | str:
        return _finish_spec(spec) if isinstance(spec, dict) else spec

    return app


def advisor_app(service: AdvisorService, token: str | None) -> APIFlask:
    """The service's WSGI application; ``token`` guards apply and revert (``None``: refuse)."""
    app = _api_app(token)
    app.extensions[SERVICE_KEY] = service
    return app


def service_server(app: WsgiApp, listen: str) -> HttpServer:
    """The service's HTTP server on ``listen`` (not yet serving)."""
    return HttpServer(app, listen, thread_name="advisor-http", max_body=MAX_BODY_BYTES)


def openapi_document() -> dict[str, Any]:
    """The API's OpenAPI document, as the service serves it at ``/api/v1/openapi.json``."""
    spec = _api_app(token=None).spec
    if not isinstance(spec, dict):
        raise TypeError(f"APIFlask produced a {type(spec).__name__} document, not a dict")
    return spec


def openapi_text() -> str:
    """The OpenAPI document as the text committed in ``docs/advisor-openapi.json``."""
    return document_text(openapi_document())


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m toposcope.advisor.api --write-openapi FILE``: regenerate the document."""
    args = openapi_parser("python -m toposcope.advisor.api", main.__doc__).parse_args(argv)
    write_document(args.write_openapi, openapi_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
