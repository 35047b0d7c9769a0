"""Where the pages' data comes from: the app's Prometheus and advisor clients, the inputs that
refresh every page, and how a client's failure is logged and shown.

Every callback catches the clients' errors and shows them (a banner, a figure that says what
is missing) instead of failing: a Prometheus that is down never leaves a blank page or a
browser console error.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from dash import Input

from toposcope.dashboards.app.advisorclient import AdvisorClient, AdvisorError, AdvisorRefused
from toposcope.dashboards.app.prom_frames import NodeIndex, load_index
from toposcope.dashboards.app.promclient import PromClient, PrometheusError
from toposcope.identity.node import AUTO
from toposcope.report.recommendation import Recommendation

LOG = logging.getLogger("toposcope.dashboards.app")

REFRESH_INPUTS = (
    Input("tick", "n_intervals"),
    Input("refresh-now", "n_clicks"),
    Input("time-range", "value"),
)


@dataclass(frozen=True)
class Clients:
    """The app's two HTTP clients, and the label that names nodes (``--node-label``)."""

    prometheus: PromClient
    advisor: AdvisorClient
    node_label: str = AUTO

    def node_index(self) -> NodeIndex:
        """The node index of the exporters Prometheus scrapes now, named as configured."""
        return load_index(self.prometheus, self.node_label)


def prom_failed(exc: PrometheusError) -> str:
    """Log a Prometheus failure; answer the text a page shows for it."""
    LOG.warning("prometheus: %s", exc)
    return str(exc)


def advisor_failed(exc: AdvisorError) -> str:
    """Log an advisor failure; answer the text a page shows for it."""
    LOG.warning("advisor: %s", exc)
    if isinstance(exc, AdvisorRefused) and exc.status == 503:
        return f"the advisor has no report yet: {exc}"
    return str(exc)


def report(clients: Clients) -> tuple[Sequence[Recommendation], str | None]:
    """The advisor's latest recommendations, or none and the text of why not."""
    try:
        return clients.advisor.report().recommendations, None
    except AdvisorError as exc:
        return (), advisor_failed(exc)
