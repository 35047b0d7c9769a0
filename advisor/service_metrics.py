"""The advisor service's own metrics (``toposcope_advisor_*``, defined in the catalogue).

:class:`ServiceFigures` is what the service knows at one instant (its latest report, the
ages of its recommendations, what it applied and how the verifications stand, how its
analyses went); :func:`families` turns it into Prometheus families and :func:`exposition`
into the text ``/metrics`` serves. Every recommendation kind and severity, every verdict,
and the ``failed`` and ``harmful`` results of each kind are exported even at zero, so the
alert rules see a series before anything goes wrong.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import Metric

from toposcope.advisor.loaders.screen import DROP_REASONS
from toposcope.advisor.outcomes import VERIFIED_KINDS
from toposcope.catalogue import families_text, spec
from toposcope.report.advisor_api import Verdict
from toposcope.report.recommendation import RecommendationKind, Report, Severity

#: action results exported at zero for every kind (what the alerts watch)
ALWAYS_EXPORTED_RESULTS = ("failed", "harmful")


@dataclass(frozen=True)
class ServiceFigures:
    """The service's figures at ``now`` (Unix seconds).

    ``actions`` counts results per (recommendation kind, result); ``analyses`` counts
    ``success`` and ``failure``; ``verdicts`` holds one (kind, verdict) per verification;
    ``series_dropped`` counts the series left out for a bad name since the start, by reason;
    ``leader`` says whether this replica acts (the leader, or the only replica).
    """

    now: float
    report: Report | None
    first_seen: Mapping[str, float]
    last_success: float | None
    last_duration: float | None
    analyses: Mapping[str, int]
    actions: Mapping[tuple[str, str], int]
    verdicts: Sequence[tuple[str, Verdict]]
    series_dropped: Mapping[str, int] = field(default_factory=dict)
    leader: bool = True


def _recommendation_families(figures: ServiceFigures) -> list[Metric]:
    recs = figures.report.recommendations if figures.report is not None else ()
    open_recs = spec("toposcope_advisor_recommendations").family()
    by_kind = Counter((str(r.kind), str(r.severity)) for r in recs)
    for kind in RecommendationKind:
        for severity in Severity:
            open_recs.add_metric([str(kind), str(severity)], by_kind[(kind, severity)])
    gain = spec("toposcope_advisor_estimated_gain_ratio").family()
    age = spec("toposcope_advisor_recommendation_age_seconds").family()
    for rec in recs:
        labels = [rec.id, str(rec.kind), rec.target.label()]
        gain.add_metric(labels, rec.estimated_gain)
        first = figures.first_seen.get(rec.id, figures.now)
        age.add_metric(labels, max(0.0, figures.now - first))
    return [open_recs, gain, age]


def families(figures: ServiceFigures) -> list[Metric]:
    """The ``toposcope_advisor_*`` families of ``figures``."""
    actions = spec("toposcope_advisor_actions_total").family()
    counts: Counter[tuple[str, str]] = Counter(
        {(str(k), r): 0 for k in RecommendationKind for r in ALWAYS_EXPORTED_RESULTS}
    )
    counts.update(figures.actions)
    for (kind_text, result), value in sorted(counts.items()):
        actions.add_metric([kind_text, result], value)
    verdicts = spec("toposcope_advisor_verifications").family()
    by_verdict = Counter((str(kind), verdict) for kind, verdict in figures.verdicts)
    for kind in sorted(VERIFIED_KINDS):
        for verdict in Verdict:
            verdicts.add_metric([str(kind), str(verdict)], by_verdict[(str(kind), verdict)])
    runs = spec("toposcope_advisor_analyses_total").family()
    for result in ("success", "failure"):
        runs.add_metric([result], figures.analyses.get(result, 0))
    dropped = spec("toposcope_advisor_series_dropped_total").family()
    for reason in DROP_REASONS:
        dropped.add_metric([reason], figures.series_dropped.get(reason, 0))
    leader = spec("toposcope_advisor_leader").family()
    leader.add_metric([], 1 if figures.leader else 0)
    found = [*_recommendation_families(figures), actions, verdicts, runs, dropped, leader]
    if figures.last_duration is not None:
        duration = spec("toposcope_advisor_analysis_duration_seconds").family()
        duration.add_metric([], figures.last_duration)
        found.append(duration)
    if figures.last_success is not None:
        success = spec("toposcope_advisor_last_success_timestamp_seconds").family()
        success.add_metric([], figures.last_success)
        found.append(success)
    return found


def exposition(figures: ServiceFigures) -> bytes:
    """The families of ``figures`` in the Prometheus text format."""
    return families_text(families(figures))
