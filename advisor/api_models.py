"""The request schemas of the advisor service's HTTP API (:mod:`toposcope.advisor.api`).

APIFlask validates every request against its input model, and the OpenAPI document
(``docs/advisor-openapi.json``) documents them beside the answers, whose shapes the core
defines once for the service and its clients (:mod:`toposcope.report.advisor_api`).

The inputs keep the messages the service has always given: a ``POST`` body is nothing or
``{"user": NAME}`` (:class:`UserBody`), and a placement query names a GPU count
(:class:`PlacementQuery`); anything else is refused with 400 and a message that says why.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, model_validator
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from toposcope.identity.names import USER_NAME_RULE, InvalidNameError, check_user_name
from toposcope.report.advisor_api import STRICT

#: what the service answers for a body that is neither nothing nor a JSON object
NOT_AN_OBJECT = 'the request body must be a JSON object like {"user": "NAME"}'
#: the most GPUs a placement query may ask for, and the most options it may want back
MAX_QUERY_NUMBER = 1024


def _optional(schema: dict[str, Any]) -> None:
    """Drop the ``null`` default of an optional field from its JSON schema: the field is
    left out, never sent as ``null`` (which the API refuses).
    """
    schema.pop("default", None)


def _refuse(message: str) -> PydanticCustomError:
    """A validation error whose message is ``message`` as it is (no braces are expanded)."""
    return PydanticCustomError("invalid_request", "{message}", {"message": message})


# -- inputs --------------------------------------------------------------------------------


class UserBody(BaseModel):
    """The optional body of an apply or revert: who asked (recorded in the audit log as
    ``NAME via <service actor>``). No body, or a body without ``user``, records the service.
    """

    model_config = STRICT

    user: (
        Annotated[
            str,
            Field(
                pattern=r"^[A-Za-z0-9._@+-]{1,128}$",
                description=f"who asked: {USER_NAME_RULE}",
                examples=["alice@example.org"],
            ),
        ]
        | SkipJsonSchema[None]
    ) = Field(default=None, json_schema_extra=_optional)

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        """Refuse anything but ``{}`` or ``{"user": NAME}``, with the service's messages."""
        if not isinstance(data, dict):
            raise _refuse(NOT_AN_OBJECT)
        unknown = sorted(str(k) for k in data if k != "user")
        if unknown:
            listed = ", ".join(repr(k[:40]) for k in unknown[:5])
            raise _refuse(
                f"unknown field(s) in the request body: {listed}; only 'user' is accepted"
            )
        if "user" in data:
            try:
                check_user_name(data["user"])
            except InvalidNameError as exc:
                raise _refuse(str(exc)) from None
        return data


def _whole_number(data: dict[str, Any], name: str, default: int | None) -> int:
    """The query parameter ``name`` as a number from 1 to :data:`MAX_QUERY_NUMBER`."""
    given = str(data.get(name) or "")
    if not given and default is not None:
        return default
    try:
        value = int(given)
    except ValueError:
        raise _refuse(f"{name} must be a whole number, not {given!r}") from None
    if not 1 <= value <= MAX_QUERY_NUMBER:
        raise _refuse(f"{name} must be between 1 and {MAX_QUERY_NUMBER}")
    return value


class PlacementQuery(BaseModel):
    """The query of ``GET /api/v1/placement``: a job of ``gpus`` GPUs, on ``node`` or any."""

    gpus: int = Field(ge=1, le=MAX_QUERY_NUMBER, description="GPUs the job needs")
    node: (
        Annotated[
            str,
            Field(description="only this node (default: every node)"),
        ]
        | SkipJsonSchema[None]
    ) = Field(default=None, json_schema_extra=_optional)
    top: int = Field(default=5, ge=1, le=MAX_QUERY_NUMBER, description="options to return")

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        """Numbers from 1 to 1024, with the service's messages; an empty ``node`` is none."""
        if not isinstance(data, dict):
            raise _refuse("the query must be parameters like gpus=2")
        return {
            "gpus": _whole_number(data, "gpus", None),
            "top": _whole_number(data, "top", 5),
            "node": str(data.get("node") or "") or None,
        }


class AuditQuery(BaseModel):
    """The query of ``GET /api/v1/audit``: the rows of one recommendation, or all of them."""

    recommendation: (
        Annotated[
            str,
            Field(
                description="a recommendation id (default: every row)", json_schema_extra=_optional
            ),
        ]
        | SkipJsonSchema[None]
    ) = Field(default=None, json_schema_extra=_optional)
