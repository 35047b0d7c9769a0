"""Advisor outcomes: the advisor's open recommendations, their expected gain and age, and
the results of the actions it applied.

These series come from the advisor's own ``/metrics`` (the scrape job ``toposcope-advisor``
in docs/deploy.md), so ``instance`` is the advisor, not a node; the dashboard has no host
variable, and the node a recommendation concerns is part of its ``workload``.
"""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import stat, timeseries
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as dashboard_models

from toposcope.dashboards.grafana.common import (
    any_of_variable,
    dashboard,
    instant_table,
    organize,
    query,
    table_panel,
    timeseries_panel,
    to_json,
)
from toposcope.dashboards.grafana.panels import PanelRow, value_stat, with_rows
from toposcope.report.advisor_api import LEGACY_VERDICTS, Verdict

UID = "toposcope-advisor"
TITLE = "toposcope / Advisor outcomes"

#: The advisor's scrape jobs (the job selector of ToposcopeAdvisorDown).
ADVISOR_JOB = 'job=~"toposcope-advisor.*"'
#: Selects the chosen workloads' recommendations.
WORKLOADS = 'workload=~"$workload"'
#: Advisor actions per kind and result in the last hour (a recording rule).
ACTIONS_1H = "kind_result:toposcope_advisor_actions:increase1h"
#: Applied recommendations by kind and the verdict of their verification (a gauge).
VERIFICATIONS = "toposcope_advisor_verifications"
#: The colour of harmful verdicts, in every panel of the "What the advice did" row.
HARMFUL_COLOR = "red"


def _actions_in_hour(result: str) -> str:
    """How many actions ended in ``result`` in the last hour, 0 when none did."""
    return f'sum({ACTIONS_1H}{{result="{result}"}}) or vector(0)'


def _now_row() -> PanelRow:
    """Single numbers: advisors up, open recommendations, actions of the last hour by result."""
    return PanelRow(
        "Now",
        (
            value_stat(
                "Advisors up",
                "Advisor processes Prometheus scrapes successfully "
                f"(up{{{ADVISOR_JOB}}}); ToposcopeAdvisorDown fires for one down 10 minutes.",
                f"sum(up{{{ADVISOR_JOB}}})",
            ),
            value_stat(
                "Open recommendations",
                "Recommendations the advisor has made and that are not applied or dismissed.",
                "sum(toposcope_advisor_recommendations)",
            ),
            value_stat(
                "Actions applied (1 hour)",
                "Actions the advisor applied in the last hour.",
                _actions_in_hour("applied"),
            ),
            value_stat(
                "Actions failed (1 hour)",
                "Actions that could not be applied in the last hour "
                "(ToposcopeAdvisorActionFailed).",
                _actions_in_hour("failed"),
            ),
            value_stat(
                "Actions reverted (1 hour)",
                "Applied actions that were undone in the last hour.",
                _actions_in_hour("reverted"),
            ),
            value_stat(
                "Actions harmful (1 hour)",
                "Applied actions measured to slow their workload down in the last hour "
                "(ToposcopeAdvisorActionHarmful).",
                _actions_in_hour("harmful"),
            ),
        ),
    )


def _recommendations_row() -> PanelRow:
    """Open recommendations over time, their age, and each one's expected gain."""
    return PanelRow(
        "Recommendations",
        (
            timeseries_panel(
                "Open recommendations by kind and severity",
                "Open recommendations over time per kind (numa-pinning, memory-migration, "
                "gpu-placement, job-migration, idle-release, config) and severity.",
                [
                    query(
                        "sum by (kind, severity) (toposcope_advisor_recommendations)",
                        "{{kind}} {{severity}}",
                    )
                ],
                "none",
                stacked=True,
            ),
            timeseries_panel(
                "Age of open recommendations",
                "How long each open recommendation has been waiting; ones promising 10 % or "
                "more for over 4 hours raise ToposcopeAdvisorHighGainPending.",
                [
                    query(
                        f"toposcope_advisor_recommendation_age_seconds{{{WORKLOADS}}}",
                        "{{kind}} {{workload}}",
                    )
                ],
                "s",
                min_value=0,
            ),
            table_panel(
                "Expected gain of open recommendations",
                "Each open recommendation's expected speed-up of its workload if applied.",
                [instant_table(f"toposcope_advisor_estimated_gain_ratio{{{WORKLOADS}}}")],
                transformations=[
                    organize(
                        hide=("Time", "__name__", "job"),
                        order=("recommendation", "kind", "workload", "Value", "instance"),
                        rename={"Value": "expected gain", "instance": "advisor"},
                    )
                ],
                unit="percentunit",
                width=24,
            ),
        ),
    )


def _actions_row() -> PanelRow:
    """The advisor's actions of the sliding last hour by kind and result."""
    return PanelRow(
        "Actions",
        (
            timeseries_panel(
                "Actions in the last hour by kind and result",
                "Advisor actions per kind and result in the sliding last hour "
                f"({ACTIONS_1H}): applied, failed, reverted, harmful.",
                [query(f"sum by (kind, result) ({ACTIONS_1H})", "{{kind}} {{result}}")],
                "none",
                width=24,
                min_value=0,
            ),
        ),
    )


def _verdicts(verdict: Verdict) -> str:
    """How many applied recommendations have ``verdict`` now, 0 when none has; an advisor
    of an earlier release, which exports some verdicts under their earlier names
    (:data:`~toposcope.report.advisor_api.LEGACY_VERDICTS`), is counted too.
    """
    names = [str(verdict), *sorted(old for old, new in LEGACY_VERDICTS.items() if new == verdict)]
    matcher = f'"{verdict}"' if len(names) == 1 else f'~"{"|".join(names)}"'
    return f"sum({VERIFICATIONS}{{verdict={matcher}}}) or vector(0)"


def _harmful_stat() -> stat.Panel:
    """The number of harmful verdicts, on a red background as soon as there is one."""
    return (
        value_stat(
            "Harmful",
            "Applied recommendations measured to make things worse (their job slowed, its "
            "traffic fell, memory went remote); reverted where the kind can be undone, the "
            "audit log says which.",
            _verdicts(Verdict.HARMFUL),
        )
        .color_mode(common_models.BigValueColorMode.BACKGROUND)
        .thresholds(
            dashboard_builders.ThresholdsConfig()
            .mode(dashboard_models.ThresholdsMode.ABSOLUTE)
            .steps(
                [
                    dashboard_models.Threshold(value=None, color="green"),
                    dashboard_models.Threshold(value=1, color=HARMFUL_COLOR),
                ]
            )
        )
    )


def _harmful_in_red(panel: timeseries.Panel) -> timeseries.Panel:
    """``panel`` with every series whose name ends in ``harmful`` drawn in red."""
    return panel.override_by_regexp(
        ".*harmful$",
        [
            dashboard_models.DynamicConfigValue(
                id_val="color", value={"mode": "fixed", "fixedColor": HARMFUL_COLOR}
            )
        ],
    )


def _advice_row() -> PanelRow:
    """What the applied recommendations did: their verdicts now and over time, by kind."""
    return PanelRow(
        "What the advice did",
        (
            value_stat(
                "Paid",
                "Applied recommendations whose measured gain paid off (at least the share of "
                "the estimate the advisor's verification asks for).",
                _verdicts(Verdict.PAID),
            ),
            value_stat(
                "Neutral",
                "Applied recommendations that neither paid off nor hurt.",
                _verdicts(Verdict.NEUTRAL),
            ),
            _harmful_stat(),
            value_stat(
                "Pending",
                "Applied recommendations the advisor has not judged yet (it waits "
                "--verify-after for the change to settle).",
                _verdicts(Verdict.PENDING),
            ),
            value_stat(
                "Undetermined",
                "Applied recommendations the advisor gave up measuring (the workload ended or "
                "lost its series).",
                _verdicts(Verdict.UNDETERMINED),
            ),
            value_stat(
                "Reverted before judged",
                "Applied recommendations reverted by a person before their verdict.",
                _verdicts(Verdict.REVERTED),
            ),
            _harmful_in_red(
                timeseries_panel(
                    "Verdicts by kind",
                    "Applied recommendations per kind (pin, migrate-memory, migrate-job, "
                    f"place, release-idle) and verdict ({VERIFICATIONS}); harmful in red.",
                    [query(f"sum by (kind, verdict) ({VERIFICATIONS})", "{{kind}} {{verdict}}")],
                    "none",
                    min_value=0,
                )
            ),
            _harmful_in_red(
                timeseries_panel(
                    "Verdicts over time",
                    "Applied recommendations per verdict, all kinds together: a rising "
                    "harmful line means the advisor's advice is hurting (in red).",
                    [query(f"sum by (verdict) ({VERIFICATIONS})", "{{verdict}}")],
                    "none",
                    stacked=True,
                )
            ),
        ),
    )


def build() -> dict[str, Any]:
    """The advisor outcomes dashboard's JSON model."""
    builder = dashboard(
        UID,
        TITLE,
        "What the toposcope advisor recommends and what its applied actions did: open "
        "recommendations by kind and severity, their expected gain and age, actions "
        "applied, failed, reverted or measured harmful, and the verdicts of what was applied.",
        time_from="now-24h",
    )
    builder = builder.with_variable(
        any_of_variable(
            "workload",
            "Workload",
            "label_values(toposcope_advisor_estimated_gain_ratio, workload)",
            "Workloads with open recommendations.",
        )
    )
    rows = [_now_row(), _recommendations_row(), _actions_row(), _advice_row()]
    return to_json(with_rows(builder, rows))
