"""What toposcope's HTTP APIs built on APIFlask share, besides the bearer check
(:mod:`toposcope.auth.bearer`): reading request bodies and writing their OpenAPI documents.

- :class:`JsonProvider` parses request bodies with
  :func:`~toposcope.serving.jsonbody.parse_json_body`
  (bounded nesting: a body of thousands of ``[`` is a 400, not Flask's 500 from
  ``RecursionError``) and keeps the order of the fields of answers;
- :class:`JsonRequest` says what is wrong with a body that is not JSON (Flask hides the
  parser's message outside debug mode; a client fixing its request wants it);
- :func:`api_app` is an APIFlask app set up as every toposcope API is (JSON errors in the
  API's own shape, bodies limited, a bearer scheme in the document, no docs UI);
- :func:`tidy_spec` gives the OpenAPI document one schema per model and one ``Error``
  schema, :func:`document_text` is the document as the text committed under ``docs/``, and
  :func:`openapi_parser` with :func:`write_document` make the ``python -m MODULE
  --write-openapi FILE`` command that regenerates it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from apiflask import APIFlask
from flask import Request
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import BadRequest

from toposcope.serving.jsonbody import JsonBodyError, parse_json_body

SCHEMAS_REF = "#/components/schemas/"


class JsonRequest(Request):
    """Flask's request, refusing a body that is not JSON with a message that says why."""

    def on_json_loading_failed(self, e: ValueError | None) -> Any:
        """Refuse the body with 400, naming the parser's complaint."""
        if isinstance(e, JsonBodyError):
            raise BadRequest(str(e))
        detail = f": {e}" if e is not None else ""
        raise BadRequest(f"the body is not valid JSON{detail}")


class JsonProvider(DefaultJSONProvider):
    """Flask's JSON, reading request bodies with :func:`parse_json_body` (bounded nesting);
    answers keep the order of their fields.
    """

    sort_keys = False

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        """Parse a request body (``kwargs`` are Flask's and unused)."""
        return parse_json_body(s)


def api_app(
    import_name: str,
    *,
    title: str,
    version: str,
    description: str,
    spec_path: str,
    max_body: int,
    error_schema: dict[str, Any],
    token_description: str,
    security_scheme: str = "BearerAuth",
    **config: Any,
) -> APIFlask:
    """An APIFlask app set up as every toposcope API is: the document at ``spec_path`` (no
    docs UI, no servers), bodies over ``max_body`` bytes refused, validation errors
    answered (in ``error_schema``, the API's one error shape) and documented, 404 and auth
    errors documented only where a route says so, the bearer scheme ``security_scheme``
    declared, and request bodies read by :class:`JsonRequest` and :class:`JsonProvider`.
    ``config`` adds or overrides APIFlask settings.
    """
    app = APIFlask(import_name, title=title, version=version, spec_path=spec_path, docs_path=None)
    app.config.update(
        AUTO_SERVERS=False,
        MAX_CONTENT_LENGTH=max_body,
        AUTO_404_RESPONSE=False,
        AUTO_VALIDATION_ERROR_RESPONSE=True,
        AUTO_AUTH_ERROR_RESPONSE=False,
        HTTP_ERROR_SCHEMA=error_schema,
        VALIDATION_ERROR_SCHEMA=error_schema,
        SECURITY_SCHEMES={
            security_scheme: {"type": "http", "scheme": "bearer", "description": token_description}
        },
        DESCRIPTION=description,
        **config,
    )
    app.request_class = JsonRequest
    app.json = JsonProvider(app)
    return app


def _alias_target(schema: Any) -> str | None:
    """The schema a schema only points to (a pydantic ``RootModel``), or ``None``."""
    if not isinstance(schema, dict) or not set(schema) <= {"$ref", "title", "description"}:
        return None
    ref = schema.get("$ref")
    return ref.removeprefix(SCHEMAS_REF) if isinstance(ref, str) else None


def tidy_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Name the shared error schema ``Error``, fold nested model copies into one each, and
    refer to what a root model wraps instead of the root model.

    APIFlask files the error schema as ``HTTPError`` and ``ValidationError``, copies each
    nested pydantic model under its parent (``ActionState.Allocation``) and files a
    ``RootModel`` as a schema that only points to another; clients are better served by one
    schema per model. Schemas come out sorted by name.
    """
    schemas: dict[str, Any] = spec.get("components", {}).get("schemas", {})
    renames: dict[str, str] = {}
    for name in list(schemas):
        short = "Error" if name in {"HTTPError", "ValidationError"} else name.rsplit(".", 1)[-1]
        if short != name:
            renames[name] = short
            schemas.setdefault(short, schemas[name])
            del schemas[name]
    for name in list(schemas):
        target = _alias_target(schemas[name])
        if target is not None:
            renames[name] = renames.get(target, target).rsplit(".", 1)[-1]
            del schemas[name]

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(SCHEMAS_REF):
                name = ref.removeprefix(SCHEMAS_REF)
                node = {**node, "$ref": f"{SCHEMAS_REF}{renames.get(name, name)}"}
            return {key: fix(value) for key, value in node.items()}
        if isinstance(node, list):
            return [fix(item) for item in node]
        return node

    tidy: dict[str, Any] = fix(spec)
    tidy["components"]["schemas"] = dict(sorted(tidy["components"]["schemas"].items()))
    return tidy


def document_text(spec: dict[str, Any]) -> str:
    """An OpenAPI document as committed under ``docs/``: indented JSON ending in a newline."""
    return json.dumps(spec, indent=2, ensure_ascii=False) + "\n"


def openapi_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """The parser of ``python -m MODULE --write-openapi FILE`` (an API may add options)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "--write-openapi",
        metavar="FILE",
        required=True,
        help="write the OpenAPI document to FILE ('-' for standard output)",
    )
    return parser


def write_document(target: str, text: str) -> None:
    """Write ``text`` to the file ``target``, or to standard output when it is ``-``."""
    if target == "-":
        sys.stdout.write(text)
    else:
        Path(target).write_text(text, encoding="utf-8")
