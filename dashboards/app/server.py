"""Builds the Dash app from its settings; the CLI serves it, tests run it under ``dash_duo``.

Every request goes through :mod:`.access` (Host allow-list, the user, CSRF on apply and
revert; only files of Dash's component bundles, :mod:`.bundles`, load without a user),
whichever server runs the app.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dash import Dash

from toposcope.dashboards.app import (
    cluster_page,
    fabric_page,
    node_page,
    placement_page,
    queue_page,
    recommendations_page,
    shell,
    workload_page,
)
from toposcope.dashboards.app.access import Access, install
from toposcope.dashboards.app.advisorclient import AdvisorClient
from toposcope.dashboards.app.bundles import bundle_file
from toposcope.dashboards.app.fabric_layout import FabricIndex, index_fabric
from toposcope.dashboards.app.promclient import PromClient
from toposcope.dashboards.app.sources import REFRESH_INPUTS, Clients
from toposcope.fabric.model import Fabric
from toposcope.identity.node import AUTO, check_node_label

DEFAULT_PROMETHEUS = "http://127.0.0.1:9090"
DEFAULT_ADVISOR = "http://127.0.0.1:9849"
DEFAULT_REFRESH = "30s"


@dataclass(frozen=True)
class AppSettings:
    """Where the app reads from, the operator's advisor token, the default refresh, who may
    use it (``access``: by default loopback host names and no users, so read-only) and the
    label that names nodes (``node_label``, the advisor's ``--node-label`` rule) and the
    cluster's network fabric the fabric page draws (``fabric``; ``None``: the page says how
    to give one).
    """

    prometheus: str = DEFAULT_PROMETHEUS
    advisor: str = DEFAULT_ADVISOR
    advisor_token: str | None = field(default=None, repr=False)
    timeout: float = 10.0
    refresh: str = DEFAULT_REFRESH
    access: Access = field(default_factory=Access)
    node_label: str = AUTO
    fabric: Fabric | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.refresh not in shell.REFRESH:
            raise ValueError(f"refresh {self.refresh!r} is not one of {', '.join(shell.REFRESH)}")
        check_node_label(self.node_label)


def create_app(settings: AppSettings) -> Dash:
    """The Dash app with its layout and callbacks; serve ``app.server`` (a Flask WSGI app)."""
    app = Dash(
        "toposcope.dashboards.app",
        title="toposcope",
        update_title="",
        suppress_callback_exceptions=True,
        serve_locally=True,
        assets_ignore=".*",
    )
    app.index_string = shell.INDEX
    app.layout = shell.layout(settings.refresh)
    clients = Clients(
        PromClient(settings.prometheus, timeout=settings.timeout),
        AdvisorClient(settings.advisor, settings.advisor_token, timeout=settings.timeout),
        settings.node_label,
    )
    fabric = index_fabric(settings.fabric) if settings.fabric is not None else None
    actions = register(app, clients, settings.access, fabric)
    prefix = app.config.routes_pathname_prefix
    update = f"{prefix}_dash-update-component"

    def library(path: str) -> bool:
        return bundle_file(path, prefix, app.registered_paths)

    install(app.server, settings.access, actions, update, library)
    return app


def register(
    app: Dash, clients: Clients, access: Access, fabric: FabricIndex | None = None
) -> frozenset[str]:
    """Attach every page's callbacks to ``app``; answer the ids of those that change state
    (apply and revert), which :func:`.access.install` guards.
    """
    shell.register(app, clients, access, fabric)
    cluster_page.register(app, clients)
    node_page.register(app, clients)
    workload_page.register(app, clients)
    actions = recommendations_page.register(app, clients, access)
    placement_page.register(app, clients)
    queue_page.register(app, clients.prometheus, REFRESH_INPUTS)
    fabric_page.register(app, clients, fabric)
    return actions
