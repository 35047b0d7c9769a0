"""Recommendations and reports: the only input of formatters and actuators.

A :class:`Recommendation` is plain, frozen, JSON-serialisable data: what to change (kind,
target, current and proposed state), why (evidence: the series and values that triggered
it), how much it should help (estimated gain as a ratio, with the model that produced the
number), how sure and how risky, and the resource-manager calls that would apply it. Its
``id`` is a hash of kind, target and proposed state, so the same situation gets the same id
on every run: ids can be tracked, applied once and reverted.

A :class:`Report` bundles one run's recommendations with its metadata and the "cannot
decide" notes (a policy that lacked data says so; it never stays silent).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

from toposcope.resources import ActionKind, ActionRequest


class RecommendationKind(StrEnum):
    """What a recommendation changes (the architecture's vocabulary)."""

    PIN = "pin"
    MIGRATE_MEMORY = "migrate-memory"
    PLACE = "place"
    MIGRATE_JOB = "migrate-job"
    RELEASE_IDLE = "release-idle"
    CONFIG = "config"


class Severity(StrEnum):
    """How much a recommendation matters, from its estimated gain (see :func:`severity_for`)."""

    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class Risk(StrEnum):
    """How likely applying a recommendation is to disturb the workload."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


#: gain thresholds of the severities (a 10 % speed-up is "warning", as in the alert rules)
SEVERITY_THRESHOLDS: tuple[tuple[float, Severity], ...] = (
    (0.25, Severity.CRITICAL),
    (0.10, Severity.WARNING),
    (0.02, Severity.INFO),
)


def severity_for(gain: float) -> Severity:
    """The severity of an estimated gain (ratio): >= 0.25 critical, 0.10 warning, 0.02 info."""
    for threshold, severity in SEVERITY_THRESHOLDS:
        if gain >= threshold:
            return severity
    return Severity.OK


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
    ``workload:NODE/NAME``): two recommendations with a common claim conflict.
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
        data["actions"] = [_action_dict(a) for a in self.actions]
        return _jsonable(data)  # type: ignore[no-any-return]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Recommendation:
        """Rebuild a recommendation from :meth:`to_dict` output (e.g. a saved report)."""
        target = data["target"]
        return cls(
            id=str(data["id"]),
            kind=RecommendationKind(data["kind"]),
            policy=str(data["policy"]),
            target=Target(
                str(target["node"]), target.get("workload"), tuple(target.get("gpus", ()))
            ),
            summary=str(data.get("summary", "")),
            current=dict(data.get("current", {})),
            proposed=dict(data.get("proposed", {})),
            evidence=tuple(
                Evidence(str(e["series"]), dict(e.get("labels", {})), float(e["value"]))
                for e in data.get("evidence", ())
            ),
            estimated_gain=float(data["estimated_gain"]),
            gain_model=str(data.get("gain_model", "")),
            confidence=float(data.get("confidence", 0.0)),
            risk=Risk(data.get("risk", "medium")),
            severity=Severity(data.get("severity", severity_for(float(data["estimated_gain"])))),
            actions=tuple(action_from_dict(a) for a in data.get("actions", ())),
            claims=tuple(data.get("claims", ())),
        )


def _action_dict(action: ActionRequest) -> dict[str, Any]:
    data = {f.name: getattr(action, f.name) for f in fields(action)}
    data["kind"] = str(action.kind)
    return data


def action_from_dict(data: Mapping[str, Any]) -> ActionRequest:
    """An :class:`ActionRequest` from its JSON form (the resource-manager API's body)."""
    return ActionRequest(
        request_id=str(data["request_id"]),
        kind=ActionKind(data["kind"]),
        workload=str(data["workload"]),
        node=data.get("node"),
        cpus=[int(c) for c in data.get("cpus", [])],
        mems=[int(m) for m in data.get("mems", [])],
        gpus=[int(g) for g in data.get("gpus", [])],
        reason=str(data.get("reason", "")),
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        return [_jsonable(v) for v in items]
    if isinstance(value, StrEnum):
        return str(value)
    if isinstance(value, float):
        return round(value, 6)
    return value


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys and rounded floats: equal data, equal text."""
    return json.dumps(_jsonable(value), sort_keys=True, separators=(",", ":"))


def recommendation_id(kind: RecommendationKind, target: Target, proposed: Mapping[str, Any]) -> str:
    """``KIND-<12 hex>``: a hash of kind, target and proposed state (stable across runs)."""
    text = canonical_json({"kind": str(kind), "target": asdict(target), "proposed": proposed})
    return f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def make_recommendation(
    *,
    kind: RecommendationKind,
    policy: str,
    target: Target,
    summary: str,
    current: Mapping[str, Any],
    proposed: Mapping[str, Any],
    evidence: Iterable[Evidence],
    estimated_gain: float,
    gain_model: str,
    confidence: float,
    risk: Risk,
    actions: Sequence[ActionRequest] = (),
    claims: Iterable[str] = (),
) -> Recommendation:
    """Build a recommendation: compute its id and give each action ``<id>-<position>``.

    Policies pass actions with an empty ``request_id``; the id that makes the resource
    manager's handling idempotent is assigned here so that it follows the recommendation's.
    """
    rec_id = recommendation_id(kind, target, proposed)
    gain = max(0.0, float(estimated_gain))
    return Recommendation(
        id=rec_id,
        kind=kind,
        policy=policy,
        target=target,
        summary=summary,
        current=dict(current),
        proposed=dict(proposed),
        evidence=tuple(evidence),
        estimated_gain=round(gain, 6),
        gain_model=gain_model,
        confidence=round(min(1.0, max(0.0, confidence)), 3),
        risk=risk,
        severity=severity_for(gain),
        actions=tuple(
            replace(a, request_id=f"{rec_id}-{i}", reason=a.reason or summary)
            for i, a in enumerate(actions)
        ),
        claims=tuple(sorted(set(claims))),
    )


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
        """A JSON-ready dict: ``run``, ``recommendations`` (by gain), ``notes``."""
        return {
            "run": _jsonable(asdict(self.run)),
            "recommendations": [r.to_dict() for r in self.by_gain()],
            "notes": [asdict(n) for n in self.notes],
        }

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text (keys sorted, so equal reports give equal text)."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        """Rebuild a report from :meth:`to_dict` output."""
        run = data["run"]
        return cls(
            run=RunInfo(
                started_at=str(run["started_at"]),
                source=str(run["source"]),
                window=str(run["window"]),
                policies=tuple(run.get("policies", ())),
                min_gain=float(run.get("min_gain", 0.0)),
                duration_seconds=float(run.get("duration_seconds", 0.0)),
                version=str(run.get("version", "")),
                settings=dict(run.get("settings", {})),
            ),
            recommendations=tuple(
                Recommendation.from_dict(r) for r in data.get("recommendations", ())
            ),
            notes=tuple(
                Note(str(n["policy"]), str(n["target"]), str(n["reason"]))
                for n in data.get("notes", ())
            ),
        )

    @classmethod
    def from_json(cls, text: str) -> Report:
        """Rebuild a report from :meth:`to_json` text."""
        return cls.from_dict(json.loads(text))


def resolve_conflicts(
    recommendations: Iterable[Recommendation],
) -> tuple[list[Recommendation], list[Note]]:
    """Keep, among recommendations sharing a claim, the one with the higher gain.

    Recommendations are taken in order of gain (ties: higher confidence, then id); each one
    whose claims overlap an already kept one's is dropped with a note naming the winner.
    """
    ordered = sorted(recommendations, key=lambda r: (-r.estimated_gain, -r.confidence, r.id))
    kept: list[Recommendation] = []
    owner: dict[str, Recommendation] = {}
    notes: list[Note] = []
    for rec in ordered:
        clash = next((owner[c] for c in rec.claims if c in owner), None)
        if clash is not None:
            shared = sorted(set(rec.claims) & set(clash.claims))
            notes.append(
                Note(
                    rec.policy,
                    rec.target.label(),
                    f"{rec.id} (gain {rec.estimated_gain:.1%}) conflicts with {clash.id} "
                    f"(gain {clash.estimated_gain:.1%}) over {', '.join(shared)}; "
                    "kept the higher gain",
                )
            )
            continue
        kept.append(rec)
        for claim in rec.claims:
            owner[claim] = rec
    return kept, notes


def filter_min_gain(
    recommendations: Iterable[Recommendation], min_gain: float
) -> tuple[list[Recommendation], list[Note]]:
    """Drop recommendations below ``min_gain``; one note per policy says how many.

    Placements of pending jobs are always kept: their gain compares the chosen GPUs with
    what a first-fit scheduler would choose, but a job that is pending waits, at no speed at
    all, until something places it.
    """
    kept: list[Recommendation] = []
    below: dict[str, int] = {}
    for rec in recommendations:
        if rec.estimated_gain >= min_gain or rec.kind == RecommendationKind.PLACE:
            kept.append(rec)
        else:
            below[rec.policy] = below.get(rec.policy, 0) + 1
    notes = [
        Note(policy, "*", f"{count} recommendation(s) below --min-gain {min_gain:g} left out")
        for policy, count in sorted(below.items())
    ]
    return kept, notes
