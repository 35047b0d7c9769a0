"""Building blocks shared by the toposcope Grafana dashboards.

Every dashboard has a ``datasource`` variable (type prometheus) and every panel and query
variable points at it (uid ``${datasource}``), so the dashboards import into any Grafana
whatever its Prometheus data source is called. Every dashboard also has ``cluster`` and
``job`` variables (from ``toposcope_build_info``, which every toposcope daemon serves; All by
default, and All also matches series without a ``cluster`` label), and every query a panel or
a variable runs is scoped to them by :func:`toposcope.dashboards.grafana.scope.scoped`, so a
dashboard module writes its queries as if there were one cluster and one job. Hosts are
chosen through two variables:

* ``hostname``: the host names the exporters report, read from
  ``toposcope_exporter_build_info``. That series always has a ``hostname`` label: the
  exporter's own (``--hostname``, default the host name) or, where the scrape configuration
  sets a ``hostname`` target label (as docs/deploy.md recommends), that one.
* ``instance`` (hidden): the scrape targets of the chosen host names. Panels select
  toposcope series with ``instance=~"$instance"``, which works whether or not the scrape
  configuration adds ``hostname`` to every series.

Panels that also read dcgm-exporter's series match them on dcgm-exporter's own ``Hostname``
label (``Hostname=~"$hostname"``), since those come from another scrape target.

Layout: panels are placed left to right in rows 24 units wide; ids are assigned in order
by :func:`to_json`, so a dashboard's JSON only changes when its code does.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Sequence
from typing import Any

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as dashboard_models
from grafana_foundation_sdk.models import prometheus as prometheus_models

from toposcope.dashboards.grafana.scope import scoped

#: The data source of every panel and query variable: the ``datasource`` variable.
DATASOURCE = dashboard_models.DataSourceRef(type_val="prometheus", uid="${datasource}")
#: Grafana's own data source, which serves the built-in annotations (alerts, manual notes).
GRAFANA_DATASOURCE = dashboard_models.DataSourceRef(type_val="grafana", uid="-- Grafana --")
#: Tag on every toposcope dashboard (the dashboard links list the others by it).
TAG = "toposcope"
#: Range of ``rate()`` in panels: Grafana's ``$__rate_interval`` (at least 4 scrape intervals).
RATE = "$__rate_interval"
#: Selects the toposcope series of the chosen hosts.
INSTANCE = 'instance=~"$instance"'
#: Selects dcgm-exporter series of the chosen hosts (dcgm-exporter's own ``Hostname`` label).
DCGM_HOST = 'Hostname=~"$hostname"'
#: The series that carries each exporter's host name, value 1.
BUILD_INFO = "toposcope_exporter_build_info"
#: The series every toposcope daemon serves (exporter, advisor, Slurm exporter, simulator):
#: the ``cluster`` and ``job`` variables list its label values.
DAEMON_INFO = "toposcope_build_info"
#: The label that names a cluster where several send to one Prometheus.
CLUSTER_LABEL = "cluster"
_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$", re.DOTALL)

Target = prometheus.Dataquery


def by_host(expr: str) -> str:
    """``expr`` (one series per target or finer) with the exporter's ``hostname`` joined in.

    Lets legends and tables name hosts even where the scrape configuration adds no
    ``hostname`` label.
    """
    return f"({expr}) * on ({CLUSTER_LABEL}, job, instance) group_left (hostname) {BUILD_INFO}"


def query(expr: str, legend: str = "") -> Target:
    """A range query for a time-series panel (``refId`` is set by the panel helpers)."""
    target = prometheus.Dataquery().expr(scoped(expr)).range().datasource(DATASOURCE)
    if legend:
        target = target.legend_format(legend)
    return target


def instant_table(expr: str) -> Target:
    """An instant query whose result a table panel shows, one row per series."""
    return (
        prometheus.Dataquery()
        .expr(scoped(expr))
        .instant()
        .format(prometheus_models.PromQueryFormat.TABLE)
        .datasource(DATASOURCE)
    )


def _with_refs(targets: Sequence[Target]) -> list[Target]:
    if not targets:
        raise ValueError("a panel needs at least one query")
    if len(targets) > len(string.ascii_uppercase):
        raise ValueError("too many queries for one panel")
    return [t.ref_id(ref) for t, ref in zip(targets, string.ascii_uppercase, strict=False)]


def timeseries_panel(
    title: str,
    description: str,
    targets: Sequence[Target],
    unit: str,
    *,
    width: int = 12,
    height: int = 8,
    stacked: bool = False,
    min_value: float | None = None,
    max_value: float | None = None,
) -> timeseries.Panel:
    """A time-series panel with its legend as a table on the right when series are many."""
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(list(_with_refs(targets)))
        .unit(unit)
        .span(width)
        .height(height)
        .fill_opacity(10)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common_models.LegendDisplayMode.LIST)
            .placement(common_models.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
    )
    if stacked:
        panel = panel.stacking(
            common_builders.StackingConfig().mode(common_models.StackingMode.NORMAL)
        ).fill_opacity(40)
    if min_value is not None:
        panel = panel.min(min_value)
    if max_value is not None:
        panel = panel.max(max_value)
    return panel


def stat_panel(
    title: str,
    description: str,
    target: Target,
    unit: str,
    *,
    width: int = 4,
    height: int = 4,
) -> stat.Panel:
    """A single-number panel showing the last value of one query."""
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(list(_with_refs([target])))
        .unit(unit)
        .span(width)
        .height(height)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]))
    )


def table_panel(
    title: str,
    description: str,
    targets: Sequence[Target],
    *,
    transformations: Sequence[dashboard_models.DataTransformerConfig] = (),
    unit: str = "",
    width: int = 12,
    height: int = 8,
) -> table.Panel:
    """A table panel over instant queries, with the given transformations in order."""
    panel = (
        table.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(list(_with_refs(targets)))
        .span(width)
        .height(height)
    )
    if unit:
        panel = panel.unit(unit)
    for transformation in transformations:
        panel = panel.with_transformation(transformation)
    return panel


def organize(
    hide: Sequence[str] = ("Time", "__name__", "job"),
    order: Sequence[str] = (),
    rename: dict[str, str] | None = None,
) -> dashboard_models.DataTransformerConfig:
    """Grafana's "organize fields" transformation: hide, order and rename columns."""
    return dashboard_models.DataTransformerConfig(
        id_val="organize",
        options={
            "excludeByName": dict.fromkeys(hide, True),
            "indexByName": {name: index for index, name in enumerate(order)},
            "renameByName": dict(rename or {}),
        },
    )


def merge() -> dashboard_models.DataTransformerConfig:
    """Grafana's "merge" transformation: rows of several queries with equal labels joined.

    Queries that select a metric directly keep ``__name__`` in table format, which differs
    between queries and prevents the join; merge the results of expressions instead.
    """
    return dashboard_models.DataTransformerConfig(id_val="merge", options={})


def matrix(row: str, column: str, value: str) -> dashboard_models.DataTransformerConfig:
    """Grafana's "grouping to matrix" transformation: a row per ``row``, a column per ``column``."""
    return dashboard_models.DataTransformerConfig(
        id_val="groupingToMatrix",
        options={"rowField": row, "columnField": column, "valueField": value},
    )


def datasource_variable() -> dashboard_builders.DatasourceVariable:
    """The ``datasource`` variable: any Prometheus data source of the Grafana instance."""
    return (
        dashboard_builders.DatasourceVariable("datasource").label("Data source").type("prometheus")
    )


def query_variable(
    name: str,
    label: str,
    definition: str,
    *,
    multi: bool,
    include_all: bool,
    all_value: str = "",
    hidden: bool = False,
    description: str = "",
    scope: bool = True,
) -> dashboard_builders.QueryVariable:
    """A variable filled by a ``label_values(...)`` query on the ``datasource`` variable.

    With ``scope`` (all but the ``cluster`` and ``job`` variables themselves), the series of
    ``label_values(SERIES, label)`` are scoped to the chosen cluster and job.
    Multi-value variables default to All. ``all_value`` (such as ``.*``) replaces the list
    of every value in queries when All is chosen; leave it empty where All must mean "every
    value listed" (``instance``: the targets of the chosen hosts, not every target).
    """
    found = _LABEL_VALUES.fullmatch(definition)
    if scope and found is not None:
        definition = f"label_values({scoped(found['selector'])}, {found['label']})"
    variable = (
        dashboard_builders.QueryVariable(name)
        .label(label)
        .query(definition)
        .datasource(DATASOURCE)
        .refresh(dashboard_models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dashboard_models.VariableSort.NATURAL_ASC)
        .multi(multi)
        .include_all(include_all)
    )
    if description:
        variable = variable.description(description)
    if all_value:
        variable = variable.all_value(all_value)
    if include_all:
        variable = variable.current(dashboard_models.VariableOption(text="All", value="$__all"))
    if hidden:
        variable = variable.hide(dashboard_models.VariableHide.HIDE_VARIABLE)
    return variable


def scope_variables() -> list[dashboard_builders.QueryVariable]:
    """The ``cluster`` and ``job`` variables (All by default) every dashboard starts with."""
    cluster = query_variable(
        CLUSTER_LABEL,
        "Cluster",
        f"label_values({DAEMON_INFO}, {CLUSTER_LABEL})",
        multi=True,
        include_all=True,
        all_value=".*",
        description="Clusters (the cluster label your scrape or remote-write adds); "
        "All also shows series without one.",
        scope=False,
    )
    job = query_variable(
        "job",
        "Job",
        f'label_values({DAEMON_INFO}{{{CLUSTER_LABEL}=~"${CLUSTER_LABEL}"}}, job)',
        multi=True,
        include_all=True,
        all_value=".*",
        description="Scrape jobs of the toposcope daemons (exporters, advisor, Slurm exporter).",
        scope=False,
    )
    return [cluster, job]


def host_variables(*, multi: bool) -> list[dashboard_builders.QueryVariable]:
    """The ``hostname`` variable and the hidden ``instance`` variable chained to it."""
    hostname = query_variable(
        "hostname",
        "Host",
        f"label_values({BUILD_INFO}, hostname)",
        multi=multi,
        include_all=multi,
        all_value=".*" if multi else "",
        description="Host names reported by the toposcope exporters "
        "(the scrape's hostname label where it sets one).",
    )
    instance = query_variable(
        "instance",
        "Instance",
        f'label_values({BUILD_INFO}{{hostname=~"$hostname"}}, instance)',
        multi=True,
        include_all=True,
        hidden=True,
        description="Scrape targets (exporters) of the chosen hosts.",
    )
    return [hostname, instance]


def any_of_variable(
    name: str, label: str, definition: str, description: str
) -> dashboard_builders.QueryVariable:
    """A multi-value filter variable, All by default, whose All matches any value (``.*``).

    The dashboards filter their panels with ``label=~"$name"``; ``.*`` keeps series whose
    value the variable's query did not list.
    """
    return query_variable(
        name,
        label,
        definition,
        multi=True,
        include_all=True,
        all_value=".*",
        description=description,
    )


def gpu_variable() -> dashboard_builders.QueryVariable:
    """The ``gpu`` variable: NVML indices of the chosen host's GPUs (All = ``.*``)."""
    return any_of_variable(
        "gpu",
        "GPU",
        f"label_values(toposcope_gpu_info{{{INSTANCE}}}, gpu)",
        "GPU index (NVML, the same as dcgm-exporter's gpu label).",
    )


def dashboard(
    uid: str, title: str, description: str, time_from: str = "now-1h"
) -> dashboard_builders.Dashboard:
    """A toposcope dashboard with the common settings and links to the other dashboards.

    Its first variables are ``datasource``, ``cluster`` and ``job``.
    """
    builder = (
        dashboard_builders.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags([TAG])
        .editable()
        .timezone("browser")
        .time(time_from, "now")
        .refresh("30s")
        .tooltip(dashboard_models.DashboardCursorSync.CROSSHAIR)
        .link(
            dashboard_builders.DashboardLink("toposcope dashboards")
            .type(dashboard_models.DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
        .annotation(
            dashboard_builders.AnnotationQuery()
            .name("Annotations & Alerts")
            .built_in(1)
            .datasource(GRAFANA_DATASOURCE)
            .enable(True)
            .hide(True)
            .icon_color("rgba(0, 211, 255, 1)")
            .type("dashboard")
        )
        .with_variable(datasource_variable())
    )
    for variable in scope_variables():
        builder = builder.with_variable(variable)
    return builder


def row(title: str) -> dashboard_builders.Row:
    """A (not collapsed) row heading the panels added after it."""
    return dashboard_builders.Row(title)


def to_json(builder: dashboard_builders.Dashboard) -> dict[str, Any]:
    """Build the dashboard, number its panels 1, 2, ... in order and return the JSON model."""
    model = builder.build()
    next_id = 1
    for panel in model.panels or []:
        panel.id_val = next_id
        next_id += 1
        if isinstance(panel, dashboard_models.RowPanel):
            for inner in panel.panels:
                inner.id_val = next_id
                next_id += 1
    data: dict[str, Any] = json.loads(json.dumps(model, cls=JSONEncoder))
    return data
