"""The answers of the advisor service's HTTP API: the one definition of their shapes.

The service (:mod:`toposcope.advisor.api`) builds every successful answer through these
types, APIFlask validates it against them and generates the OpenAPI document
(``docs/advisor-openapi.json``) from them; the Dash app's client
(:mod:`toposcope.dashboards.app.advisorclient`) reads answers into them. They live in the
core because the two parts never import each other. Each is made of the report contract
(:mod:`toposcope.report.recommendation`), the resource-manager types (:mod:`toposcope.rm`)
and the records defined here (an audit row's columns, an outcome, a verification, a GPU
set), extended by what the API adds (a recommendation's ``first_seen``, an audit row's
``state``...). Answers forbid fields they do not declare, so a field added to an answer
without its schema fails the service's tests instead of going out undocumented; the client
reads audit rows and placements leniently (:meth:`AuditRow.from_json`,
:meth:`RankedPlacement.from_json`), so an older app keeps working beside a newer service.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from toposcope.report.recommendation import SCHEMA_VERSION, Note, Recommendation, Report, RunInfo
from toposcope.rm import ActionState, Allocation, parse_answer
from toposcope.topology.model import LinkType

#: answers, and every type in them, refuse fields they do not declare
STRICT = ConfigDict(extra="forbid")


# -- records the advisor keeps -------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What happened to one recommendation (or to one action in a revert).

    Applying: ``applied``, ``dry-run``, ``skipped``, ``failed``, ``unknown`` (the outcome
    of a call could not be learnt; the next run settles it) or ``in_progress`` (an earlier
    call of it is still running; nothing was sent). Reverting, per action: ``reverted``,
    ``skipped`` (nothing to undo: it failed or never reached the resource manager),
    ``running`` (it, or its revert, was still running when the wait was over), ``unknown``,
    ``failed`` or ``not-reverted`` (left as it is because a newer action could not be undone
    first).
    """

    recommendation_id: str
    node: str
    result: str
    detail: str = ""
    states: tuple[ActionState, ...] = ()


@dataclass(frozen=True)
class AuditRecord:
    """The columns of one row of the advisor's audit log (one action, or the revert of one).

    The advisor's :class:`~toposcope.advisor.audit.AuditEntry` adds the row's state machine;
    the API's :class:`AuditRow` adds the state it is in.
    """

    seq: int
    request_id: str
    recommendation_id: str
    kind: str
    workload: str
    node: str | None
    request: dict[str, Any]
    actor: str
    backend: str
    intent_at: str
    before: Allocation | None
    result: str | None
    result_at: str | None
    action_id: str | None
    after: Allocation | None
    error: str
    reverts: str | None
    reverted_by: str | None
    irreversible: bool | None = None


class Verdict(StrEnum):
    """Where the verification of an applied recommendation stands: ``pending`` (not judged
    yet), ``paid`` (the change gained what it was meant to), ``neutral`` (it gained too
    little, and did no harm), ``harmful`` (it made things worse), ``undetermined`` (it could
    not be measured), ``reverted`` (a person undid it first).

    The names earlier releases gave three of them (``effective``, ``ineffective``,
    ``unverifiable``) still read as ``paid``, ``neutral`` and ``undetermined``, so an audit
    log or an API answer written before the rename keeps its meaning.
    """

    PENDING = "pending"
    PAID = "paid"
    NEUTRAL = "neutral"
    HARMFUL = "harmful"
    UNDETERMINED = "undetermined"
    REVERTED = "reverted"

    @classmethod
    def _missing_(cls, value: object) -> Verdict | None:
        """The verdict an earlier release's name stands for (``None``: no verdict)."""
        renamed = LEGACY_VERDICTS.get(value) if isinstance(value, str) else None
        return None if renamed is None else cls(renamed)


#: verdict names of earlier releases -> the names they read as
LEGACY_VERDICTS: Mapping[str, Verdict] = {
    "effective": Verdict.PAID,
    "ineffective": Verdict.NEUTRAL,
    "unverifiable": Verdict.UNDETERMINED,
}


@dataclass(frozen=True)
class Measurement:
    """The figures a verdict compares (``None``: no series).

    ``remote_share`` is a ratio (0 = all local), ``cores`` the CPU cores kept busy over the
    window, ``gpu_utilization`` the mean utilization (ratio) of the workload's GPUs,
    ``sm_active`` the mean share of their SMs busy, ``link_bytes_per_second`` their PCIe and
    NVLink traffic, ``progress`` the value of the job's own progress metric (a rate, from
    ``--progress-metric``). For a release, ``gpus_free`` counts the released GPUs no longer
    held by the workload and ``gpus_reused`` those now held by another one.
    """

    remote_share: float | None = None
    cores: float | None = None
    gpu_utilization: float | None = None
    sm_active: float | None = None
    link_bytes_per_second: float | None = None
    progress: float | None = None
    gpus_free: float | None = None
    gpus_reused: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        """A JSON-ready dict (rounded)."""
        return {k: None if v is None else round(v, 6) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Measurement | None:
        """The inverse of :meth:`to_dict` (``None`` stays ``None``)."""
        if data is None:
            return None
        return cls(**{f.name: _float(data.get(f.name)) for f in fields(cls)})


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class JobOutcome:
    """One job of a recommendation that changes several (an exchange of GPU sets, a joint
    move of several jobs, a move with the jobs moved out of its way), measured on its own.

    ``from_node`` is where the job ran when the change was made and ``node`` where it went
    (the node of its first part); ``target`` says it is the job the recommendation targets;
    ``weight`` is its share in the combined measured gain, as the recommendation's gain model
    weighs it (0: checked for harm only); ``measured_gain`` is the change of its progress
    signal (0.2: 20% faster) and ``detail`` which signal, once measured. ``from_gpus`` are
    the GPUs a job moved aside by a clearing held on ``from_node`` before (the GPUs the
    clearing freed; empty: not known, the whole node counts).
    """

    job: str
    from_node: str
    node: str
    weight: float
    target: bool
    baseline: Measurement
    measured: Measurement | None = None
    measured_gain: float | None = None
    detail: str = ""
    from_gpus: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        data = asdict(self)
        data["baseline"] = self.baseline.to_dict()
        data["measured"] = self.measured.to_dict() if self.measured else None
        data["from_gpus"] = list(self.from_gpus)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobOutcome:
        """The inverse of :meth:`to_dict`, read leniently (``job`` required).

        Raises ``KeyError``, ``TypeError`` or ``ValueError`` for one it cannot read.
        """
        return cls(
            job=str(data["job"]),
            from_node=str(data.get("from_node") or ""),
            node=str(data.get("node") or ""),
            weight=float(data.get("weight") or 0.0),
            target=bool(data.get("target")),
            baseline=Measurement.from_dict(data.get("baseline") or {}) or Measurement(),
            measured=Measurement.from_dict(data.get("measured")),
            measured_gain=_float(data.get("measured_gain")),
            detail=str(data.get("detail") or ""),
            from_gpus=tuple(int(g) for g in data.get("from_gpus") or ()),
        )


@dataclass(frozen=True)
class Verification:
    """One row of the ``verifications`` table (times are Unix seconds).

    ``node`` is where the workload was when the change was made, ``target_node`` and
    ``gpus`` where it went (a move or placement) or what was released; ``target_numa`` is the
    NUMA node a pin or memory migration moved it to (``None`` for other kinds).
    ``measured_gain`` is the change of the job's progress signal a move was judged by
    (0.2: 20% faster), when one was measured. ``jobs`` lists, for a recommendation that
    changes several jobs, each of them measured on its own (empty for one job); its
    ``measured_gain`` is then their gains combined as its estimate combines them.
    ``made_for`` names the job a clearing moved other jobs out of the way of (its
    ``proposed.for``; empty for any other recommendation): ``jobs`` then lists that job
    first and the jobs moved aside after it, and ``measured`` and ``measured_gain`` are that
    job's, only where its gain was measured.
    """

    recommendation_id: str
    kind: str
    node: str
    workload: str
    target_numa: int | None
    applied_at: float
    baseline: Measurement
    verdict: Verdict
    measured: Measurement | None
    verified_at: float | None
    detail: str
    estimated_gain: float | None = None
    target_node: str = ""
    gpus: tuple[int, ...] = ()
    measured_gain: float | None = None
    jobs: tuple[JobOutcome, ...] = ()
    made_for: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        data = asdict(self)
        data["verdict"] = str(self.verdict)
        data["baseline"] = self.baseline.to_dict()
        data["measured"] = self.measured.to_dict() if self.measured else None
        data["gpus"] = list(self.gpus)
        data["jobs"] = [j.to_dict() for j in self.jobs]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verification:
        """One verification of an answer, read leniently like :meth:`AuditRow.from_json`:
        the id, kind and verdict are required, fields it does not know are ignored.

        Raises ``KeyError``, ``TypeError`` or ``ValueError`` for one it cannot read (an
        unknown verdict included).
        """
        numa = data.get("target_numa")
        return cls(
            recommendation_id=str(data["recommendation_id"]),
            kind=str(data["kind"]),
            node=str(data.get("node") or ""),
            workload=str(data.get("workload") or ""),
            target_numa=None if numa is None else int(numa),
            applied_at=float(data.get("applied_at") or 0.0),
            baseline=Measurement.from_dict(data.get("baseline") or {}) or Measurement(),
            verdict=Verdict(data["verdict"]),
            measured=Measurement.from_dict(data.get("measured")),
            verified_at=_float(data.get("verified_at")),
            detail=str(data.get("detail") or ""),
            estimated_gain=_float(data.get("estimated_gain")),
            target_node=str(data.get("target_node") or ""),
            gpus=tuple(int(g) for g in data.get("gpus") or ()),
            measured_gain=_float(data.get("measured_gain")),
            jobs=tuple(JobOutcome.from_json(j) for j in data.get("jobs") or ()),
            made_for=str(data.get("made_for") or ""),
        )


@dataclass(frozen=True)
class GpuSet:
    """A candidate set of GPUs on one node with its ranking terms (lower is better): the
    worst link between two of them, the sum of their links' ranks, the free cells it breaks,
    the free GPUs it strands and the NUMA nodes it touches.
    """

    node: str
    gpus: tuple[int, ...]
    worst_link: LinkType | None
    link_sum: int
    broken_cells: int
    stranded: int
    numa_nodes: tuple[int, ...]


# -- what answers are made of ------------------------------------------------------------------


@dataclass(frozen=True)
class OpenRecommendation(Recommendation):
    """A recommendation of the latest report, with since when it has been open."""

    __pydantic_config__ = STRICT

    first_seen: Annotated[float | None, Field(description="Unix seconds")] = None


@dataclass(frozen=True)
class AuditRow(AuditRecord):
    """One row of the audit log (one action, or the revert of one), with its state."""

    __pydantic_config__ = STRICT

    state: Annotated[
        str,
        Field(description="pending, running, unknown, succeeded, failed, not-applied, reverted"),
    ] = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AuditRow:
        """One item of an answer's audit rows, read leniently: only the ids are required,
        fields it does not know are ignored and empty optional text is ``None``.

        Raises ``KeyError``, ``TypeError`` or ``ValueError`` for a row it cannot read.
        """
        return cls(
            seq=int(data["seq"]),
            request_id=str(data["request_id"]),
            recommendation_id=str(data["recommendation_id"]),
            kind=str(data.get("kind", "")),
            workload=str(data.get("workload", "")),
            node=_text(data, "node"),
            request=dict(data.get("request") or {}),
            actor=str(data.get("actor", "")),
            backend=str(data.get("backend", "")),
            intent_at=str(data.get("intent_at", "")),
            before=_allocation(data, "before"),
            result=_text(data, "result"),
            result_at=_text(data, "result_at"),
            action_id=_text(data, "action_id"),
            after=_allocation(data, "after"),
            error=str(data.get("error") or ""),
            reverts=_text(data, "reverts"),
            reverted_by=_text(data, "reverted_by"),
            irreversible=None if data.get("irreversible") is None else bool(data["irreversible"]),
            state=str(data.get("state") or ""),
        )


def _text(data: Mapping[str, Any], name: str) -> str | None:
    return str(data[name]) if data.get(name) else None


def _allocation(data: Mapping[str, Any], name: str) -> Allocation | None:
    value = data.get(name)
    return None if value is None else parse_answer(Allocation, value, f"audit row {name}")


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
class RankedPlacement(GpuSet):
    """A free GPU set, with the step-time factor of its dearest GPU pair and what that price
    rests on (``price_source``: topology, measured or tier; ``link_gbps``: the bandwidth each
    way, ``None`` for a tier price; ``price_detail``: in words).
    """

    __pydantic_config__ = STRICT

    link_factor: float = 1.0
    price_source: str = "tier"
    link_gbps: float | None = None
    price_detail: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RankedPlacement:
        """One item of a placement answer, read leniently: ``node`` and ``gpus`` are
        required, the ranking terms default to a perfect set.

        Raises ``KeyError``, ``TypeError`` or ``ValueError`` for an item it cannot read.
        """
        return cls(
            node=str(data["node"]),
            gpus=tuple(int(g) for g in data["gpus"]),
            worst_link=LinkType(data["worst_link"]) if data.get("worst_link") else None,
            link_sum=int(data.get("link_sum", 0)),
            broken_cells=int(data.get("broken_cells", 0)),
            stranded=int(data.get("stranded", 0)),
            numa_nodes=tuple(int(n) for n in data.get("numa_nodes") or ()),
            link_factor=float(data.get("link_factor", 1.0)),
            price_source=str(data.get("price_source") or "tier"),
            link_gbps=float(data["link_gbps"]) if data.get("link_gbps") is not None else None,
            price_detail=str(data.get("price_detail") or ""),
        )


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


def _names(cls: Any) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


#: what the report answer adds around the report contract (the service's status), and what
#: each of its recommendations adds (``first_seen``): the fields a reader of the report lets
#: through besides the report's own
SERVICE_FIELDS = frozenset(RecommendationsAnswer.model_fields) - _names(Report) - {"schema_version"}
SERVED_RECOMMENDATION_FIELDS = _names(OpenRecommendation) - _names(Recommendation)
#: what ``GET /recommendations/{id}`` adds to the recommendation: its first sighting,
#: state, audit rows and verification
ONE_RECOMMENDATION_FIELDS = _names(OneRecommendation) - _names(Recommendation)
