"""Checking what crosses a boundary against the models, and writing the models as JSON.

Everything that arrives from outside (an API body, a server's answer, an in-process caller's
request) is checked here and nowhere else, so that the same bad request is refused with the
same words by the HTTP API, the simulator, the node agent and the test fakes:

- :func:`parse_request` reads a request body: a field that breaks its type or rule is a
  :class:`~toposcope.rm.errors.ResourceManagerError` 422 naming the field, with every
  problem in the message (``cpus.0: Input should be a valid integer; workload: Field
  required``);
- :func:`check_request` is what every backend runs before it acts: the same checks on a
  request built in Python, then :func:`require_kind_fields` (``pin needs cpus``: 400);
- :func:`parse_answer` reads a server's answer into the models
  (:class:`InvalidAnswerError` when it does not fit);
- :func:`to_json` writes any model (or list of them) as JSON-ready data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from types import MappingProxyType
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from toposcope.rm.errors import ResourceManagerError
from toposcope.rm.models import ActionKind, ActionRequest, ActionState, NodeView, WorkloadView

T = TypeVar("T")

#: the status of a request whose fields break the model
INVALID = 422

#: the fields each kind of action needs besides its workload (empty is missing)
REQUIRED_BY_KIND: Mapping[ActionKind, tuple[str, ...]] = MappingProxyType(
    {
        ActionKind.PIN: ("cpus",),
        ActionKind.MIGRATE_MEMORY: ("mems",),
        ActionKind.PLACE: ("node",),
        ActionKind.MIGRATE: ("node",),
        ActionKind.RELEASE: (),
        ActionKind.UNPLACE: ("node",),
    }
)

#: clearer words than pydantic's for a few errors (by error type)
_MESSAGES = {
    "unexpected_keyword_argument": "unknown field",
    "missing_argument": "Field required",
    "dataclass_type": "should be a JSON object",
    "model_type": "should be a JSON object",
}


class InvalidAnswerError(ValueError):
    """A server's answer that does not fit the model; the message says where and why."""


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def adapter(kind: Any) -> TypeAdapter[Any]:
    """The pydantic adapter of ``kind`` (a model, or ``list[model]``), built once."""
    found = _ADAPTERS.get(kind)
    if found is None:
        found = _ADAPTERS[kind] = TypeAdapter(kind)
    return found


# Built now rather than on first use: a first request then costs no schema building, and a
# backend that drops its privileges after start-up imports nothing more when it validates.
for _model in (ActionRequest, ActionState, list[NodeView], list[WorkloadView]):
    adapter(_model)


def _message(error: ErrorDetails) -> str:
    if error["type"] == "value_error":
        return str(error.get("ctx", {}).get("error", error["msg"]))
    return _MESSAGES.get(error["type"], error["msg"])


def describe(error: ValidationError) -> tuple[str, str | None]:
    """One message listing every problem (``path: what``), and the first top-level field.

    The field is ``None`` when the whole input is at fault (not a JSON object).
    """
    problems = [
        (".".join(str(part) for part in item["loc"]), _message(item))
        for item in error.errors(include_url=False)
    ]
    message = "; ".join(f"{path}: {text}" if path else text for path, text in problems)
    first = problems[0][0].split(".")[0] if problems else ""
    return message or "does not match the schema", first or None


def parse_request(data: object) -> ActionRequest:
    """The request in ``data`` (a parsed JSON body), or :class:`ResourceManagerError` 422."""
    try:
        request: ActionRequest = adapter(ActionRequest).validate_python(data)
    except ValidationError as exc:
        message, field = describe(exc)
        raise ResourceManagerError(message, INVALID, field) from None
    return request


def require_kind_fields(request: ActionRequest) -> None:
    """Refuse (400, naming the field) a request without what its kind needs."""
    for name in REQUIRED_BY_KIND[ActionKind(request.kind)]:
        if not getattr(request, name):
            what = "a node" if name == "node" else name
            raise ResourceManagerError(f"{request.kind} needs {what}", 400, name)


def check_request(request: ActionRequest) -> ActionRequest:
    """``request`` checked as if it had arrived as a body (422), then for its kind (400).

    Returns the checked copy (its lists are the backend's own, not the caller's).
    """
    checked = parse_request({f.name: getattr(request, f.name) for f in fields(request)})
    require_kind_fields(checked)
    return checked


def parse_answer(kind: type[T], data: object, what: str) -> T:
    """``data``, the parsed answer to ``what``, as ``kind``; else :class:`InvalidAnswerError`."""
    try:
        value: T = adapter(kind).validate_python(data)
    except ValidationError as exc:
        message, _ = describe(exc)
        raise InvalidAnswerError(f"{what}: {message}") from None
    return value


def to_json(value: object, kind: Any = None) -> Any:
    """``value`` (a model, or a list of ``kind``) as JSON-ready data: dicts, lists, strings."""
    return adapter(kind if kind is not None else type(value)).dump_python(value, mode="json")
