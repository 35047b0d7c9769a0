"""Rows and the panel shapes that several toposcope dashboards repeat.

A dashboard module describes each of its rows as a :class:`PanelRow` made by one function
(``_fleet_row``, ``_gpus_row``, ...) and its ``build()`` adds the variables and the rows in
order, so that each row reads on its own and ``build()`` reads as the dashboard's outline.
The panel shapes here are the chains that several dashboards wrote out again and again: a
ratio between 0 and 1 over time, and a single number.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import stat, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import dashboard as dashboard_models

from toposcope.dashboards.grafana.common import (
    Target,
    query,
    row,
    stat_panel,
    timeseries_panel,
)

#: Anything a dashboard or a row takes as a panel (time series, stat, table ...).
Panel = cogbuilder.Builder[dashboard_models.Panel]
#: Anything a dashboard takes as a template variable.
Variable = cogbuilder.Builder[dashboard_models.VariableModel]


@dataclass(frozen=True)
class PanelRow:
    """One row of a dashboard: its heading and its panels, left to right."""

    title: str
    panels: tuple[Panel, ...]


def with_variables(
    builder: dashboard_builders.Dashboard, variables: Iterable[Variable]
) -> dashboard_builders.Dashboard:
    """``builder`` with ``variables`` added after the ones it has, in order."""
    for variable in variables:
        builder = builder.with_variable(variable)
    return builder


def with_rows(
    builder: dashboard_builders.Dashboard, rows: Iterable[PanelRow]
) -> dashboard_builders.Dashboard:
    """``builder`` with each row's heading and then its panels added, row after row."""
    for panel_row in rows:
        builder = builder.with_row(row(panel_row.title))
        for panel in panel_row.panels:
            builder = builder.with_panel(panel)
    return builder


def ratio_panel(
    title: str, description: str, targets: Sequence[Target], *, width: int = 12
) -> timeseries.Panel:
    """A time-series panel of shares (``percentunit``) drawn on a fixed 0 to 1 axis."""
    return timeseries_panel(
        title, description, targets, "percentunit", width=width, min_value=0, max_value=1
    )


def value_stat(
    title: str,
    description: str,
    expr: str,
    unit: str = "none",
    *,
    width: int = 4,
    height: int = 4,
) -> stat.Panel:
    """A stat panel showing the last value of the range query ``expr``."""
    return stat_panel(title, description, query(expr), unit, width=width, height=height)
