"""The request and answer schemas of the advisor service's HTTP API (:mod:`toposcope.advisor.api`).

They are the API's contract: APIFlask validates every request against its input model and
builds every successful answer through its output model, and the OpenAPI document
(``docs/advisor-openapi.json``) is generated from them. The answers are made of the types
the data already has, so that each shape is defined once: the recommendation contract of
the core (:mod:`toposcope.report.recommendation`, the report JSON), the resource-manager types
(:mod:`toposcope.rm`), and the advisor's audit rows, verifications, outcomes and
placements, each extended here by what the API adds (a recommendation's ``first_seen``, an
audit row's ``state``...). Answers forbid fields they do not declare, so a field added to an
answer without its schema fails the tests instead of going out undocumented.

The inputs keep the messages the service has always given: a ``POST`` body is nothing or
``{"user": NAME}`` (:class:`UserBody`), and a placement query names a GPU count
(:class:`PlacementQuery`); anything else is refused with 400 and a message that says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from toposcope.advisor.applying import Outcome
from toposcope.advisor.audit import AuditEntry
from toposcope.advisor.gpu_sets import Placement
from toposcope.advisor.outcomes import Verification
from toposcope.identity.names import USER_NAME_RULE, InvalidNameError, check_user_name
from toposcope.report.recommendation import SCHEMA_VERSION, Note, Recommendation, RunInfo

#: answers, and every type in them, refuse fields they do not declare
STRICT = ConfigDict(extra="forbid")
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


# -- what answers are made of ------------------------------------------------------------------


@dataclass(frozen=True)
class OpenRecommendation(Recommendation):
    """A recommendation of the latest report, with since when it has been open."""

    __pydantic_config__ = STRICT

    first_seen: Annotated[float | None, Field(description="Unix seconds")] = None


@dataclass(frozen=True)
class AuditRow(AuditEntry):
    """One row of the audit log (one action, or the revert of one), with its state."""

    __pydantic_config__ = STRICT

    state: Annotated[
        str,
        Field(description="pending, running, unknown, succeeded, failed, not-applied, reverted"),
    ] = ""


@dataclass(frozen=True)
class OneRecommendation(OpenRecommendation):
    """One recommendation of the latest report, its state, audit rows and verification."""

    state: Annotated[
        str, Field(description="in_progress, applied, partial, failed, reverted or none")
    ] = ""
    audit: tuple[AuditRow, ...] = ()
    verification: Verification | None = None


@dataclass(frozen=True)
class AppliedOutcome(Outcome):
    """The outcome of an apply, with the calls a dry run would have made."""

    __pydantic_config__ = STRICT

    dry_run_calls: tuple[str, ...] = ()


@dataclass(frozen=True)
class RankedPlacement(Placement):
    """A free GPU set, with the step-time factor of its worst link."""

    __pydantic_config__ = STRICT

    link_factor: float = 1.0


class ServiceStatus(BaseModel):
    """How the service's analyses go and which resource manager it applies through."""

    model_config = STRICT

    resource_manager: str
    last_success: float | None = Field(description="Unix seconds of the last analysis")
    last_duration_seconds: float | None
    last_error: str | None = Field(description="why the last analysis failed, if it did")
    analyses: dict[str, int] = Field(description="analyses by result: success, failure")


# -- answers -------------------------------------------------------------------------------------


class RecommendationsAnswer(BaseModel):
    """The latest report (the JSON of ``toposcope advise --format json``), each
    recommendation with its ``first_seen``, and the service's status.
    """

    model_config = STRICT

    schema_version: str = Field(
        description="the version of the report JSON", json_schema_extra={"const": SCHEMA_VERSION}
    )
    run: RunInfo
    recommendations: list[OpenRecommendation] = Field(description="best gain first")
    notes: list[Note]
    service: ServiceStatus


class OneRecommendationAnswer(RootModel[OneRecommendation]):
    """One recommendation of the latest report, its state, audit rows and verification."""


class AuditAnswer(BaseModel):
    """The audit log's rows and the verifications (of one recommendation, when asked)."""

    model_config = STRICT

    actions: list[AuditRow]
    verifications: list[Verification]


class ApplyAnswer(RootModel[AppliedOutcome]):
    """The outcome of an apply, with the calls a dry run would have made."""


class RevertAnswer(BaseModel):
    """The outcome of a revert: one outcome per action, newest first."""

    model_config = STRICT

    state: Literal["reverted", "partial"] = Field(
        description="reverted: everything is undone; partial: something is not (yet)"
    )
    outcomes: list[Outcome]


class InProgress(BaseModel):
    """An apply refused because an earlier call of it is still running."""

    model_config = STRICT

    error: str
    state: Literal["in_progress"]
    entries: list[AuditRow] = Field(description="its unsettled audit rows")


class PlacementAnswer(BaseModel):
    """The best GPU sets for a job over the latest model (what ``toposcope place`` ranks)."""

    model_config = STRICT

    gpus: int
    node: str | None
    placements: list[RankedPlacement]
    service: ServiceStatus
