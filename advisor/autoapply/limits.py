"""Whether the automatic loop may apply one recommendation now, and if not, why.

:func:`refusal` checks a recommendation against the policy in a fixed order, the way the
Kubernetes descheduler checks an eviction: what it is (kind, actions, confidence,
calibrated gain, risk, whether the resource manager can undo its actions), whom it
concerns (:class:`WorkloadScope`: the namespace, the Slurm partition and account, the
labels, each included and excluded), then how much the loop has done lately (the cool-down
of the workload, the hourly limits per node, per namespace or account, and in all). The
first reason found is the answer, as a code and a text; :data:`NONE` means "apply".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from toposcope.advisor.autoapply.config import NEVER_AUTOMATIC, AutoApplyPolicy, Scope
from toposcope.advisor.autoapply.decisions import Decision
from toposcope.report.recommendation import Recommendation, Risk
from toposcope.rm import ActionKind

#: a refusal: its code (a bounded label for the metrics) and its text; :data:`NONE` is none
Reason = tuple[str, str]
NONE: Reason = ("", "")
#: every refusal code, exported even at zero: what it is, whom it concerns, the limits
CODES = (
    "kind",
    "irreversible",
    "no-actions",
    "unverifiable",
    "confidence",
    "gain",
    "risk",
    "scope",
    "excluded",
    "cooldown",
    "limit-hour",
    "limit-node",
    "limit-namespace",
)
#: the hour the per-hour limits count over, in seconds
HOUR = 3600.0
_RISK_ORDER = {str(r): i for i, r in enumerate(Risk)}


@dataclass(frozen=True)
class WorkloadScope:
    """Who a recommendation's workload belongs to: its Kubernetes namespace, its Slurm
    partition and account (empty where not known) and its labels (``workload``, ``node``,
    ``namespace``, ``pod``... as the report filter offers them).
    """

    namespace: str = ""
    partition: str = ""
    account: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def group(self) -> str:
        """What the per-namespace limit counts against: the namespace, else the account."""
        return self.namespace or self.account


def _named(scope: Scope, workload: WorkloadScope) -> list[str]:
    """The parts of ``scope`` that ``workload`` matches (only parts ``scope`` restricts)."""
    found = []
    if workload.namespace and workload.namespace in scope.namespaces:
        found.append(f"namespace {workload.namespace}")
    if workload.partition and workload.partition in scope.partitions:
        found.append(f"partition {workload.partition}")
    if workload.account and workload.account in scope.accounts:
        found.append(f"account {workload.account}")
    if scope.labels is not None and scope.labels.matches(workload.labels):
        found.append("its labels")
    return found


def _outside(scope: Scope, workload: WorkloadScope) -> Reason:
    """Why ``workload`` is outside the included ``scope`` (:data:`NONE`: it is inside)."""
    checks = (
        ("namespace", scope.namespaces, workload.namespace),
        ("partition", scope.partitions, workload.partition),
        ("account", scope.accounts, workload.account),
    )
    for name, wanted, value in checks:
        if wanted and value not in wanted:
            return "scope", f"{name} {value or '(none)'} is not included"
    if scope.labels is not None and not scope.labels.matches(workload.labels):
        return "scope", "its labels do not match include.labels"
    return NONE


def _what(
    rec: Recommendation, policy: AutoApplyPolicy, irreversible: frozenset[ActionKind]
) -> Reason:
    kind = str(rec.kind)
    if kind in NEVER_AUTOMATIC:
        return "irreversible", f"{kind} is never applied automatically: {NEVER_AUTOMATIC[kind]}"
    if kind not in policy.kinds:
        return "kind", f"kind {kind} is not allowed (kinds: {', '.join(sorted(policy.kinds))})"
    if not rec.actions:
        return "no-actions", "no actions (a change for a person to make)"
    lasting = sorted({str(a.kind) for a in rec.actions if a.kind in irreversible})
    if lasting:
        return (
            "irreversible",
            f"irreversible: this resource manager cannot undo {', '.join(lasting)}",
        )
    if not rec.target.workload:
        return "unverifiable", "no workload to verify the change on"
    if rec.confidence < policy.min_confidence:
        return "confidence", f"confidence {rec.confidence:.2f} is below {policy.min_confidence:.2f}"
    if rec.estimated_gain < policy.min_gain:
        return "gain", f"calibrated gain {rec.estimated_gain:.3f} is below {policy.min_gain:.3f}"
    if _RISK_ORDER[str(rec.risk)] > _RISK_ORDER[policy.max_risk]:
        return "risk", f"risk {rec.risk} is above {policy.max_risk}"
    return NONE


def _rate(
    rec: Recommendation,
    workload: WorkloadScope,
    policy: AutoApplyPolicy,
    acted: Sequence[Decision],
    now: float,
) -> Reason:
    node = rec.target.node
    name = rec.target.workload or ""
    on_workload = [d.at for d in acted if d.node == node and d.workload == name]
    if on_workload and now - max(on_workload) < policy.cooldown:
        since = now - max(on_workload)
        left = policy.cooldown - since
        return "cooldown", f"cool-down: {node}/{name} changed {since:.0f}s ago ({left:.0f}s left)"
    hour = [d for d in acted if now - d.at < HOUR]
    if len(hour) >= policy.per_hour:
        return "limit-hour", f"limit: {policy.per_hour} action(s) per hour reached"
    per_node = Counter(d.node for d in hour)
    if per_node[node] >= policy.per_node:
        return "limit-node", f"limit: {policy.per_node} action(s) per hour on node {node} reached"
    group = workload.group
    if group and Counter(d.group for d in hour)[group] >= policy.per_namespace:
        return (
            "limit-namespace",
            f"limit: {policy.per_namespace} action(s) per hour in {group} reached",
        )
    return NONE


def refusal(
    rec: Recommendation,
    workload: WorkloadScope,
    policy: AutoApplyPolicy,
    acted: Sequence[Decision],
    now: float,
    irreversible: frozenset[ActionKind] = frozenset(),
) -> Reason:
    """Why the loop leaves ``rec`` alone at ``now`` (:data:`NONE`: it may apply it).

    ``acted`` holds the loop's decisions that reached the resource manager, at least over
    the last hour and the cool-down; ``irreversible`` the action kinds the resource manager
    cannot undo.
    """
    reason = _what(rec, policy, irreversible)
    if reason != NONE:
        return reason
    reason = _outside(policy.include, workload)
    if reason != NONE:
        return reason
    excluded = _named(policy.exclude, workload)
    if excluded:
        return "excluded", f"excluded: {', '.join(excluded)}"
    return _rate(rec, workload, policy, acted, now)
