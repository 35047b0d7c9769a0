"""The recommendation contract: what the advisor proposes, as every part reads it.

A :class:`Recommendation` is plain, frozen, JSON-serialisable data: what to change (kind,
target, current and proposed state), why (evidence: the series and values that triggered
it), how much it should help (estimated gain as a ratio, with the model that produced the
number), how sure and how risky, and the resource-manager actions that would apply it. A
:class:`Report` bundles one run's recommendations with its metadata and the "cannot
decide" notes.

``toposcope advise --format json`` prints :meth:`Report.to_json`, the advisor service serves
:meth:`Report.to_dict`, and every reader (the Dash app, saved reports, tests) decodes them
with :mod:`toposcope.report.decoder`. The JSON carries :data:`SCHEMA_VERSION`; a
change that old readers would misread gets a new version.

:data:`ACTIONS_BY_KIND` is the one table of which resource-manager actions
(:class:`~toposcope.rm.ActionKind`) may apply each kind of recommendation: a
recommendation whose actions do not fit its kind cannot be built, nor decoded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from toposcope.errors import ToposcopeError
from toposcope.rm import ActionKind, ActionRequest

#: the version of the report JSON (``schema_version``); readers refuse any other
SCHEMA_VERSION = "1"


class RecommendationKind(StrEnum):
    """What a recommendation changes (the architecture's vocabulary)."""

    PIN = "pin"
    MIGRATE_MEMORY = "migrate-memory"
    PLACE = "place"
    MIGRATE_JOB = "migrate-job"
    RELEASE_IDLE = "release-idle"
    CONFIG = "config"


class Severity(StrEnum):
    """How much a recommendation matters (the advisor derives it from the estimated gain)."""

    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class Risk(StrEnum):
    """How likely applying a recommendation is to disturb the workload."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


#: which resource-manager actions may apply each kind of recommendation. A pin also moves
#: the workload's remote pages; placing a pending job (and moving a running one) may first
#: move smaller jobs out of the way (defragmentation), and pin CPU work elsewhere to make
#: room for the job's pin next to its new GPUs; a config change is advice for a person, with
#: no action.
ACTIONS_BY_KIND: Mapping[RecommendationKind, frozenset[ActionKind]] = MappingProxyType(
    {
        RecommendationKind.PIN: frozenset({ActionKind.PIN, ActionKind.MIGRATE_MEMORY}),
        RecommendationKind.MIGRATE_MEMORY: frozenset({ActionKind.MIGRATE_MEMORY}),
        RecommendationKind.PLACE: frozenset(
            {ActionKind.PLACE, ActionKind.MIGRATE, ActionKind.PIN, ActionKind.MIGRATE_MEMORY}
        ),
        RecommendationKind.MIGRATE_JOB: frozenset(
            {ActionKind.MIGRATE, ActionKind.PIN, ActionKind.MIGRATE_MEMORY}
        ),
        RecommendationKind.RELEASE_IDLE: frozenset({ActionKind.RELEASE}),
        RecommendationKind.CONFIG: frozenset(),
    }
)


class RecommendationError(ToposcopeError, ValueError):
    """A recommendation or report that breaks the contract; the message says where and how."""


def check_actions(kind: RecommendationKind, actions: Sequence[ActionRequest]) -> None:
    """Refuse actions that :data:`ACTIONS_BY_KIND` does not allow for ``kind``."""
    allowed = ACTIONS_BY_KIND[kind]
    wrong = sorted({str(a.kind) for a in actions if a.kind not in allowed})
    if wrong:
        may = ", ".join(sorted(allowed)) or "no action"
        raise RecommendationError(
            f"a {kind} recommendation cannot be applied by {', '.join(wrong)} (it takes {may})"
        )


@dataclass(frozen=True)
class Target:
    """What a recommendation is about: a node, and a workload or GPUs on it."""

    node: str
    workload: str | None = None
    gpus: tuple[int, ...] = ()

    def label(self) -> str:
        """``node/workload`` or ``node/gpu0,1`` or ``node``, for tables."""
        if self.workload:
            return f"{self.node}/{self.workload}"
        if self.gpus:
            return f"{self.node}/gpu" + ",".join(str(g) for g in self.gpus)
        return self.node


@dataclass(frozen=True)
class Evidence:
    """One series value that supports a recommendation (``series`` is a catalogue name)."""

    series: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class Recommendation:
    """One proposed change, with its evidence, gain model, confidence, risk and actions.

    ``estimated_gain`` is a ratio (0.25 = 25 % faster, or for ``release-idle`` the share of
    the node's GPUs returned); ``gain_model`` says how it was computed. ``claims`` names the
    exclusive resources the change takes (``gpu:NODE/3``, ``cpu:NODE/5``,
    ``workload:NODE/NAME``): two recommendations with a common claim conflict. ``actions``
    must fit ``kind`` (:data:`ACTIONS_BY_KIND`), or :class:`RecommendationError` is raised.
    """

    id: str
    kind: RecommendationKind
    policy: str
    target: Target
    summary: str
    current: Mapping[str, Any]
    proposed: Mapping[str, Any]
    evidence: tuple[Evidence, ...]
    estimated_gain: float
    gain_model: str
    confidence: float
    risk: Risk
    severity: Severity
    actions: tuple[ActionRequest, ...] = ()
    claims: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_actions(self.kind, self.actions)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (enums as their values, tuples as lists)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}  # asdict's deep copy
        data["target"] = {  # is a third of a large report's rendering time
            "node": self.target.node,
            "workload": self.target.workload,
            "gpus": self.target.gpus,
        }
        data["evidence"] = [
            {"series": e.series, "labels": e.labels, "value": e.value} for e in self.evidence
        ]
        data["kind"] = str(self.kind)
        data["risk"] = str(self.risk)
        data["severity"] = str(self.severity)
        data["actions"] = [action_to_dict(a) for a in self.actions]
        encoded: dict[str, Any] = jsonable(data)
        return encoded


def action_to_dict(action: ActionRequest) -> dict[str, Any]:
    """An action's JSON form (the resource-manager API's request body)."""
    data = {f.name: getattr(action, f.name) for f in fields(action)}
    data["kind"] = str(action.kind)
    return data


def jsonable(value: Any) -> Any:
    """``value`` as JSON types: mappings with string keys, lists (sets sorted), enum values,
    floats rounded to 6 digits (equal data, equal text).
    """
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        return [jsonable(v) for v in items]
    if isinstance(value, StrEnum):
        return str(value)
    if isinstance(value, float):
        return round(value, 6)
    return value


@dataclass(frozen=True)
class Note:
    """A "cannot decide" (or "decided not to") note: which policy, about what, and why."""

    policy: str
    target: str
    reason: str


@dataclass(frozen=True)
class RunInfo:
    """Metadata of one advisor run (what was read, when, with which settings)."""

    started_at: str
    source: str
    window: str
    policies: tuple[str, ...]
    min_gain: float
    duration_seconds: float = 0.0
    version: str = ""
    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        data: dict[str, Any] = jsonable({f.name: getattr(self, f.name) for f in fields(self)})
        return data


@dataclass(frozen=True)
class Report:
    """One run: metadata, recommendations (best gain first) and notes."""

    run: RunInfo
    recommendations: tuple[Recommendation, ...] = ()
    notes: tuple[Note, ...] = ()

    def by_gain(self) -> list[Recommendation]:
        """Recommendations sorted by estimated gain, highest first (ties by id)."""
        return sorted(self.recommendations, key=lambda r: (-r.estimated_gain, r.id))

    def find(self, rec_id: str) -> Recommendation | None:
        """The recommendation with id ``rec_id`` or ``None``."""
        return next((r for r in self.recommendations if r.id == rec_id), None)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``schema_version``, ``run``, ``recommendations`` (by gain),
        ``notes``.
        """
        return {
            "schema_version": SCHEMA_VERSION,
            "run": self.run.to_dict(),
            "recommendations": [r.to_dict() for r in self.by_gain()],
            "notes": [
                {"policy": n.policy, "target": n.target, "reason": n.reason} for n in self.notes
            ],
        }

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text (keys sorted, so equal reports give equal text)."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)
