"""The advisor service's own metric families (``toposcope advisor serve``)."""

from __future__ import annotations

from toposcope.catalogue.model import MetricSpec, row

ADVISOR_SPECS: tuple[MetricSpec, ...] = (
    row(
        "toposcope_advisor_recommendations",
        "gauge",
        ["kind", "severity"],
        "Open recommendations.",
        part="advisor",
    ),
    row(
        "toposcope_advisor_estimated_gain_ratio",
        "gauge",
        ["recommendation", "kind", "workload"],
        "Expected speed-up of a workload if a recommendation is applied.",
        "ratio",
        part="advisor",
    ),
    row(
        "toposcope_advisor_recommendation_age_seconds",
        "gauge",
        ["recommendation", "kind", "workload"],
        "Time since the advisor first made a recommendation that is still open.",
        "seconds",
        part="advisor",
    ),
    row(
        "toposcope_advisor_actions_total",
        "counter",
        ["kind", "result"],
        "Actions the advisor's applier carried out, by recommendation kind and result: "
        "applied, failed (could not be applied), reverted (undone), harmful (applied, then "
        "measured to slow the workload down).",
        part="advisor",
    ),
    row(
        "toposcope_advisor_verifications",
        "gauge",
        ["kind", "verdict"],
        "Recommendations the advisor service applied, by recommendation kind and the verdict "
        "of their verification: pending, paid, neutral, harmful (reverted where the kind "
        "can be undone), undetermined, reverted (earlier releases exported paid, neutral "
        "and undetermined as effective, ineffective and unverifiable).",
        part="advisor",
    ),
    row(
        "toposcope_advisor_analyses_total",
        "counter",
        ["result"],
        "Analyses the advisor service ran, by result (success, failure).",
        part="advisor",
    ),
    row(
        "toposcope_advisor_leader",
        "gauge",
        [],
        "1 when this advisor service replica is the one that applies and reverts (the leader, "
        "or the only replica), 0 on a standby (--leader-elect).",
        part="advisor",
    ),
    row(
        "toposcope_advisor_series_dropped_total",
        "counter",
        ["reason"],
        "Series the advisor service's analyses left out because a label naming a node or a "
        "workload breaks toposcope's naming rules, by reason (invalid_node_name, "
        "invalid_workload_name).",
        part="advisor",
    ),
    row(
        "toposcope_advisor_analysis_duration_seconds",
        "gauge",
        [],
        "How long the advisor service's latest analysis took (queries and policies).",
        "seconds",
        part="advisor",
    ),
    row(
        "toposcope_advisor_last_success_timestamp_seconds",
        "gauge",
        [],
        "Unix time at which the advisor service's latest successful analysis finished.",
        "seconds",
        part="advisor",
    ),
    row(
        "toposcope_advisor_auto_decisions_total",
        "counter",
        ["kind", "decision"],
        "Decisions of the advisor service's automatic loop (--auto-apply), by recommendation "
        "kind and decision: applied, dry-run (rehearsed), would-apply (dry_run_only), skipped "
        "(see toposcope_advisor_auto_skipped_total), failed. A repeated skip of one "
        "recommendation for the same reason counts once.",
        part="advisor",
    ),
    row(
        "toposcope_advisor_auto_skipped_total",
        "counter",
        ["reason"],
        "Recommendations the automatic loop left alone, by reason: kind, irreversible, "
        "no-actions, unverifiable, confidence, gain, risk, scope, excluded, cooldown, "
        "limit-hour, limit-node, limit-namespace, applier (the applier skipped it), dry-run "
        "(the rehearsal refused it).",
        part="advisor",
    ),
    row(
        "toposcope_advisor_auto_active",
        "gauge",
        [],
        "1 when the automatic loop may apply now, 0 while it is stopped (kill switch) or in a "
        "blackout window.",
        part="advisor",
    ),
    row(
        "toposcope_advisor_auto_stopped",
        "gauge",
        [],
        "1 while the automatic loop is stopped by its kill-switch file or through the API.",
        part="advisor",
    ),
    row(
        "toposcope_advisor_auto_last_tick_timestamp_seconds",
        "gauge",
        [],
        "Unix time of the automatic loop's latest tick (after an analysis, on the leader).",
        "seconds",
        part="advisor",
    ),
)
