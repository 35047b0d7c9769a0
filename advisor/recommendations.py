"""The advisor's rules for recommendations: ids, severities, conflicts, the min-gain filter.

The data types and their JSON (:class:`~toposcope.report.recommendation.Recommendation`,
:class:`~toposcope.report.recommendation.Report` and the rest) are the core's contract
(:mod:`toposcope.report.recommendation`, which also checks each recommendation's actions against
its kind); this module holds what only the advisor decides. A recommendation's ``id`` is
a hash of kind, target and proposed state, so the same situation gets the same id on every
run: ids can be tracked, applied once and reverted. Its actions get request ids that follow
it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

from toposcope.advisor.capacity_ledger import CapacityLedger, Load, jobs_that_fit
from toposcope.report.recommendation import (
    Evidence,
    Note,
    Recommendation,
    RecommendationKind,
    Risk,
    Severity,
    Target,
    jsonable,
)
from toposcope.rm import ActionKind, ActionRequest

__all__ = [
    "HORIZON_S",
    "SEVERITY_THRESHOLDS",
    "START_VALUE",
    "canonical_json",
    "conflict_order",
    "conflict_value",
    "cost_seconds",
    "filter_min_gain",
    "make_recommendation",
    "recommendation_id",
    "resolve_conflicts",
    "severity_for",
    "value",
]

#: value thresholds of the severities (:func:`value`: calibrated gain x confidence net of the
#: action's cost over :data:`HORIZON_S`); documented in ``docs/policies.md``
SEVERITY_THRESHOLDS: tuple[tuple[float, Severity], ...] = (
    (0.15, Severity.CRITICAL),
    (0.05, Severity.WARNING),
    (0.01, Severity.INFO),
)
#: the remaining run time a job is assumed to have (the metrics do not say): job-migration's
#: ``remaining_seconds`` default, the horizon a one-off cost is spread over
HORIZON_S = 6 * 3600.0
#: what one checkpoint, move and restore costs a moved job (job-migration's default)
CHECKPOINT_RESTORE_S = 600.0
#: what starting a pending job is worth in a conflict, before its placement's confidence: the
#: job goes from no throughput to running (see :func:`resolve_conflicts`)
START_VALUE = 1.0
#: page migration throughput assumed for a pin's attached page move (memory-migration's)
PAGE_MIGRATION_BYTES_PER_S = 2.0 * 2**30


def severity_for(score: float) -> Severity:
    """The severity of a value (:func:`value`): >= 0.15 critical, 0.05 warning, 0.01 info."""
    for threshold, severity in SEVERITY_THRESHOLDS:
        if score >= threshold:
            return severity
    return Severity.OK


def cost_seconds(
    kind: RecommendationKind, proposed: Mapping[str, Any], actions: Sequence[ActionRequest]
) -> float:
    """Seconds the recommendation's actions cost its jobs: a checkpoint-restore per moved job,
    the page-migration time of the memory it moves (pins and placements otherwise run on).
    """
    moves = sum(1 for a in actions if a.kind == ActionKind.MIGRATE)
    pages = float(proposed.get("estimated_seconds", 0.0) or 0.0)
    if not pages and kind == RecommendationKind.PIN:
        pages = float(proposed.get("migrate_memory_bytes", 0) or 0) / PAGE_MIGRATION_BYTES_PER_S
    return moves * CHECKPOINT_RESTORE_S + pages


def value(
    kind: RecommendationKind,
    gain: float,
    confidence: float,
    cost_s: float,
    calibration: float = 1.0,
) -> float:
    """What a recommendation is worth over :data:`HORIZON_S`, as a share of it: the gross
    gain, scaled by the kind's ``calibration`` (measured / estimated, from verified outcomes)
    and by the confidence, minus the cost share ``cost_s / HORIZON_S``. job-migration's
    gain is already net of its checkpoint-restores, so their cost is added back first.
    """
    cost = cost_s / HORIZON_S
    gross = gain + cost if kind == RecommendationKind.MIGRATE_JOB else gain
    return gross * calibration * confidence - cost


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
    trust = min(1.0, max(0.0, confidence))
    worth = value(kind, gain, trust, cost_seconds(kind, proposed, actions))
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
        confidence=round(trust, 3),
        risk=risk,
        severity=severity_for(worth),
        actions=tuple(
            replace(a, request_id=f"{rec_id}-{i}", reason=a.reason or summary)
            for i, a in enumerate(actions)
        ),
        claims=tuple(sorted(set(claims))),
    )


def conflict_value(rec: Recommendation, calibration: Mapping[str, float] | None = None) -> float:
    """What a recommendation is worth when it competes with another: its :func:`value`
    (calibrated gain x confidence net of its cost), so that an estimate the policy trusts
    less, or a kind whose past estimates came out high, needs a larger gain to win.
    """
    factor = (calibration or {}).get(str(rec.kind), 1.0)
    cost = cost_seconds(rec.kind, rec.proposed, rec.actions)
    return value(rec.kind, rec.estimated_gain, rec.confidence, cost, factor)


def conflict_order(
    rec: Recommendation, calibration: Mapping[str, float] | None = None
) -> tuple[bool, float, float, str]:
    """Where ``rec`` stands when recommendations compete for a claim (lowest first): every
    ``release-idle`` first, then by :func:`conflict_value`, higher gain, id.

    Releasing an idle workload's GPUs wins over moving or pinning it whatever their values:
    a move's or pin's gain is a speed-up of work that an idle workload does not do, and
    releasing costs no checkpoint.
    """
    return (
        rec.kind != RecommendationKind.RELEASE_IDLE,
        -conflict_value(rec, calibration),
        -rec.estimated_gain,
        rec.id,
    )


def _clash_note(rec: Recommendation, winner: Recommendation, shared: Iterable[str]) -> Note:
    why = (
        "kept the release (an idle workload is released, not moved or pinned)"
        if winner.kind == RecommendationKind.RELEASE_IDLE
        else "kept the higher value (gain x confidence net of cost)"
    )
    return Note(
        rec.policy,
        rec.target.label(),
        f"{rec.id} (gain {rec.estimated_gain:.1%}, confidence {rec.confidence:.2f}) conflicts "
        f"with {winner.id} (gain {winner.estimated_gain:.1%}, confidence "
        f"{winner.confidence:.2f}) over {', '.join(shared)}; {why}",
    )


def _start_note(rec: Recommendation, waiting: Sequence[str]) -> Note:
    return Note(
        rec.policy,
        rec.target.label(),
        f"{rec.id} (gain {rec.estimated_gain:.1%}, confidence {rec.confidence:.2f}) would "
        f"leave pending {', '.join(waiting)} no free GPU set to start on; kept the free set "
        "(a pending job's start is worth more)",
    )


class _Waiting:
    """The pending jobs a round's placements would start, and the free GPUs they need.

    A pending job's start is worth :data:`START_VALUE` x its placement's confidence on top
    of the placement's own :func:`conflict_value` (whose gain only compares two GPU sets). It
    counts against a recommendation only when that recommendation leaves the job no fitting
    set (it takes free GPUs without freeing as many): a move that frees as many GPUs as it
    takes leaves the job a set to start on a round later, and wins on its own value.
    """

    def __init__(
        self,
        ordered: Sequence[Recommendation],
        ledger: CapacityLedger,
        calibration: Mapping[str, float] | None,
    ) -> None:
        self.ledger = ledger
        self.calibration = calibration
        #: pending job -> (GPUs it asks for, the most its start is worth)
        self.jobs: dict[str, tuple[int, float]] = {}
        for rec in ordered:
            worth = self.worth(rec)
            for name in self.started(rec):
                size = ledger.pending_gpus(name) or 0
                self.jobs[name] = (size, max(worth, self.jobs.get(name, (0, worth))[1]))
        self.load = ledger.gpu_load()
        self.free = ledger.free_gpus(self.load)

    def started(self, rec: Recommendation) -> list[str]:
        """The pending jobs ``rec``'s placements start."""
        return [
            a.workload
            for a in rec.actions
            if a.kind == ActionKind.PLACE and self.ledger.pending_gpus(a.workload) is not None
        ]

    def worth(self, rec: Recommendation) -> float:
        """``rec``'s conflict value, with the start of each pending job it places."""
        starts = len(self.started(rec))
        return conflict_value(rec, self.calibration) + starts * START_VALUE * rec.confidence

    def _after(self, rec: Recommendation) -> tuple[Load, dict[str, int]]:
        """GPU holders and free GPUs per node once ``rec`` is kept too."""
        load = dict(self.load)
        for key, amount in self.ledger.gpus_moved(rec).items():
            load[key] = load.get(key, 0.0) + amount
        touched = {node for _, node, _ in self.ledger.gpus_moved(rec)}
        return load, {**self.free, **self.ledger.free_gpus(load, touched)}

    def left_without_set(self, rec: Recommendation) -> list[str]:
        """The pending jobs worth more than ``rec`` that fewer of fit in the free GPUs after it
        than now, named by those that lose their only set (all of them when only together
        they lose one); empty: ``rec`` may be kept (then counted with :meth:`keep`).
        """
        worth, starts = self.worth(rec), set(self.started(rec))
        outrank = {n: s for n, (s, w) in self.jobs.items() if n not in starts and w > worth}
        if not outrank:
            return []
        free = self._after(rec)[1]
        if all(free[node] >= count for node, count in self.free.items() if node in free):
            return []
        if jobs_that_fit(free, outrank.values()) >= jobs_that_fit(self.free, outrank.values()):
            return []
        alone = [
            n
            for n, s in outrank.items()
            if jobs_that_fit(free, [s]) < jobs_that_fit(self.free, [s])
        ]
        return sorted(alone or outrank)

    def keep(self, rec: Recommendation) -> None:
        """Count ``rec``'s GPUs as taken and the jobs it starts as started."""
        self.load, self.free = self._after(rec)
        for name in self.started(rec):
            self.jobs.pop(name, None)


def _by_claims(
    ordered: Sequence[Recommendation],
    refused: Mapping[str, str],
    ledger: CapacityLedger | None = None,
    calibration: Mapping[str, float] | None = None,
) -> tuple[list[Recommendation], list[Note]]:
    """One pass over ``ordered``: keep each recommendation whose claims no kept one holds
    (``refused``: ids left out for capacity, skipped here) and, with a ``ledger``, that
    leaves every pending job whose start is worth more a free set (see :class:`_Waiting`).
    """
    kept: list[Recommendation] = []
    owner: dict[str, Recommendation] = {}
    notes: list[Note] = []
    live = [r for r in ordered if r.id not in refused]
    waiting = _Waiting(live, ledger, calibration) if ledger is not None else None
    for rec in live:
        clash = next((owner[c] for c in rec.claims if c in owner), None)
        if clash is not None:
            notes.append(_clash_note(rec, clash, sorted(set(rec.claims) & set(clash.claims))))
            continue
        if waiting is not None and waiting.jobs:
            left_out = waiting.left_without_set(rec)
            if left_out:
                notes.append(_start_note(rec, left_out))
                continue
            waiting.keep(rec)
        kept.append(rec)
        for claim in rec.claims:
            owner[claim] = rec
    return kept, notes


def resolve_conflicts(
    recommendations: Iterable[Recommendation],
    ledger: CapacityLedger | None = None,
    calibration: Mapping[str, float] | None = None,
) -> tuple[list[Recommendation], list[Note]]:
    """Keep, among recommendations sharing a claim, the one worth more, and (with a
    ``ledger``) only as many as the round's CPUs, GPUs and memory hold.

    A loser is only left out of this round: policies evaluate again every round, so a fix
    that lost is issued again (same id) once what beat it is done.
    Recommendations are taken in :func:`conflict_order`: every ``release-idle`` first (an
    idle workload is released, never moved or pinned), then by :func:`conflict_value` (ties:
    higher gain, then id); each one whose claims overlap an already kept one's is dropped
    with a note naming the winner, and (with a ``ledger``) each one that would leave a
    pending job whose start is worth more no free GPU set is dropped with a note naming the
    job (:class:`_Waiting`). Then, in the same order, each kept recommendation's claims must
    fit the ledger's capacity after the round (what the others take away counted); one that does not
    fit is dropped with a note, its claims freed and its cores counted where they are, and
    the round is resolved again.
    """
    ordered = sorted(recommendations, key=lambda r: conflict_order(r, calibration))
    refused: dict[str, str] = {}
    while True:
        kept, notes = _by_claims(ordered, refused, ledger, calibration)
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
        Note(by_id[i].policy, by_id[i].target.label(), f"{i}: no capacity left: {why}")
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
