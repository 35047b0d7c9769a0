"""The advisor's rules for recommendations: ids, severities, conflicts, the min-gain filter.

The data types and their JSON (:class:`Recommendation`, :class:`Report` and the rest) are
the core's contract (:mod:`toposcope.recommendation`, which also checks each
recommendation's actions against its kind), re-exported here for the policies; this module
holds what only the advisor decides. A recommendation's ``id`` is a hash of kind, target
and proposed state, so the same situation gets the same id on every run: ids can be
tracked, applied once and reverted. Its actions get request ids that follow it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from toposcope.recommendation import (
    Evidence,
    Note,
    Recommendation,
    RecommendationKind,
    Report,
    Risk,
    RunInfo,
    Severity,
    Target,
    jsonable,
)
from toposcope.recommendation_decoder import decode_action as action_from_dict
from toposcope.resources import ActionRequest

if TYPE_CHECKING:
    from toposcope.advisor.cpu_ledger import CpuLedger

__all__ = [
    "SEVERITY_THRESHOLDS",
    "Evidence",
    "Note",
    "Recommendation",
    "RecommendationKind",
    "Report",
    "Risk",
    "RunInfo",
    "Severity",
    "Target",
    "action_from_dict",
    "canonical_json",
    "conflict_value",
    "filter_min_gain",
    "make_recommendation",
    "recommendation_id",
    "resolve_conflicts",
    "severity_for",
]

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


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys and rounded floats: equal data, equal text."""
    return json.dumps(jsonable(value), sort_keys=True, separators=(",", ":"))


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


def conflict_value(rec: Recommendation) -> float:
    """What a recommendation is worth when it competes with another: its estimated gain
    times its confidence, so that an estimate the policy trusts less (a cross-node move, a
    pin priced without known capacity) needs a larger gain to win.
    """
    return rec.estimated_gain * rec.confidence


def _clash_note(rec: Recommendation, winner: Recommendation, shared: Iterable[str]) -> Note:
    return Note(
        rec.policy,
        rec.target.label(),
        f"{rec.id} (gain {rec.estimated_gain:.1%}, confidence {rec.confidence:.2f}) conflicts "
        f"with {winner.id} (gain {winner.estimated_gain:.1%}, confidence "
        f"{winner.confidence:.2f}) over {', '.join(shared)}; kept the higher gain x confidence",
    )


def _by_claims(
    ordered: Sequence[Recommendation], refused: Mapping[str, str]
) -> tuple[list[Recommendation], list[Note]]:
    """One pass over ``ordered``: keep each recommendation whose claims no kept one holds
    (``refused``: ids left out for capacity, skipped here).
    """
    kept: list[Recommendation] = []
    owner: dict[str, Recommendation] = {}
    notes: list[Note] = []
    for rec in ordered:
        if rec.id in refused:
            continue
        clash = next((owner[c] for c in rec.claims if c in owner), None)
        if clash is not None:
            notes.append(_clash_note(rec, clash, sorted(set(rec.claims) & set(clash.claims))))
            continue
        kept.append(rec)
        for claim in rec.claims:
            owner[claim] = rec
    return kept, notes


def resolve_conflicts(
    recommendations: Iterable[Recommendation], ledger: CpuLedger | None = None
) -> tuple[list[Recommendation], list[Note]]:
    """Keep, among recommendations sharing a claim, the one worth more, and (with a
    ``ledger``) only as many CPU-setting recommendations as the NUMA nodes' CPUs hold.

    Recommendations are taken in order of :func:`conflict_value` (ties: higher gain, then
    id); each one whose claims overlap an already kept one's is dropped with a note naming
    the winner. Then, in the same order, each kept recommendation's cores must fit the
    ledger's capacity after the round (what the others take away counted); one that does not
    fit is dropped with a note, its claims freed and its cores counted where they are, and
    the round is resolved again.
    """
    ordered = sorted(recommendations, key=lambda r: (-conflict_value(r), -r.estimated_gain, r.id))
    refused: dict[str, str] = {}
    while True:
        kept, notes = _by_claims(ordered, refused)
        if ledger is None:
            return kept, notes
        load = ledger.base_load(kept)
        newly: dict[str, str] = {}
        for rec in kept:
            problem = ledger.overflow(load, rec)
            if problem is None:
                ledger.add(load, rec)
            else:
                newly[rec.id] = problem
        if not newly:
            break
        refused.update(newly)
    by_id = {r.id: r for r in ordered}
    notes += [
        Note(by_id[i].policy, by_id[i].target.label(), f"{i}: no CPU capacity left: {why}")
        for i, why in sorted(refused.items())
    ]
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
