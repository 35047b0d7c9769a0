"""The Dash callbacks: each page's data, read on the server from Prometheus and the advisor.

Every callback catches the clients' errors and shows them (a banner, a figure that says what
is missing) instead of failing: a Prometheus that is down never leaves a blank page or a
browser console error. Apply and revert run here, on the server, with the token the app was
started with (the browser never sees it), for the user :mod:`.access` let through, whom the
advisor records as the actor.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from dash import Dash, Input, Output, State, ctx, html, no_update

from toposcope.dashboards.app import figures, pages, queue_page
from toposcope.dashboards.app import queries as q
from toposcope.dashboards.app.access import Access, action_user, current_user
from toposcope.dashboards.app.advisorclient import (
    ActionInProgress,
    AdvisorClient,
    AdvisorError,
    AdvisorRefused,
    AuditRow,
)
from toposcope.dashboards.app.data import (
    ClusterData,
    NodeIndex,
    WorkloadRef,
    load_cluster,
    load_index,
    load_node_series,
    load_topology,
    load_workload,
    load_workloads,
)
from toposcope.dashboards.app.promclient import PromClient, PrometheusError
from toposcope.nodeidentity import AUTO
from toposcope.recommendation import Recommendation

LOG = logging.getLogger("toposcope.dashboards.app")

GIB = 1024.0**3
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


def _prom_failed(exc: PrometheusError) -> str:
    LOG.warning("prometheus: %s", exc)
    return str(exc)


def _advisor_failed(exc: AdvisorError) -> str:
    LOG.warning("advisor: %s", exc)
    if isinstance(exc, AdvisorRefused) and exc.status == 503:
        return f"the advisor has no report yet: {exc}"
    return str(exc)


def _report(clients: Clients) -> tuple[Sequence[Recommendation], str | None]:
    try:
        return clients.advisor.report().recommendations, None
    except AdvisorError as exc:
        return (), _advisor_failed(exc)


def register(app: Dash, clients: Clients, access: Access) -> frozenset[str]:
    """Attach every callback of the app to ``app``; answer the ids of those that change
    state (apply and revert), which :func:`.access.install` guards.
    """
    _register_shell(app, clients, access)
    _register_cluster(app, clients)
    _register_node(app, clients)
    _register_workload(app, clients)
    actions = _register_recommendations(app, clients, access)
    _register_placement(app, clients)
    queue_page.register(app, clients.prometheus, REFRESH_INPUTS)
    return actions


def actions_off(advisor: AdvisorClient, access: Access) -> str | None:
    """Why the current request may not apply or revert, or ``None`` when it may."""
    if not advisor.can_act:
        return (
            "apply and revert are off: start the app with --advisor-token-file or "
            "TOPOSCOPE_ADVISOR_TOKEN set"
        )
    if current_user() is None:
        return access.sign_in_hint()
    return None


# -- shell -------------------------------------------------------------------------------


def _register_shell(app: Dash, clients: Clients, access: Access) -> None:
    @app.callback(
        Output("page", "children"),
        Output("nav", "children"),
        Input("url", "pathname"),
        State("url", "search"),
    )
    def route(pathname: str | None, search: str | None) -> tuple[Any, Any]:
        path = pathname or pages.CLUSTER
        if path == pages.CLUSTER:
            page: Any = pages.cluster_page()
        elif path == pages.NODE:
            page = pages.node_page(pages.query_value(search, "node"))
        elif path == pages.WORKLOAD:
            page = pages.workload_page(pages.query_value(search, "workload"))
        elif path == pages.RECOMMENDATIONS:
            page = pages.recommendations_page(actions_off(clients.advisor, access), current_user())
        elif path == queue_page.QUEUE:
            page = queue_page.queue_page()
        elif path == pages.PLACEMENT:
            gpus = pages.query_value(search, "gpus") or "2"
            count = int(gpus) if gpus.isdigit() and int(gpus) > 0 else 2
            page = pages.placement_page(count, pages.query_value(search, "node"))
        else:
            page = pages.not_found(path)
        return page, pages.nav(path)

    @app.callback(
        Output("tick", "interval"),
        Output("tick", "disabled"),
        Input("refresh-every", "value"),
    )
    def set_refresh(choice: str | None) -> tuple[int, bool]:
        milliseconds = pages.REFRESH.get(choice or "off", 0)
        return (milliseconds or 60_000), milliseconds == 0

    @app.callback(
        Output("prom-status", "children"),
        Output("prom-status", "className"),
        Input("tick", "n_intervals"),
        Input("refresh-now", "n_clicks"),
    )
    def prometheus_status(_tick: int | None, _clicks: int | None) -> tuple[str, str]:
        try:
            index = clients.node_index()
        except PrometheusError as exc:
            _prom_failed(exc)
            return "Prometheus unreachable", "status bad"
        count = len(index.nodes)
        if not count:
            return "Prometheus: no exporters", "status bad"
        return f"Prometheus: {count} node{'s' if count != 1 else ''}", "status"


# -- cluster -----------------------------------------------------------------------------


def cluster_view(clients: Clients, range_: str) -> tuple[Any, ...]:
    """Everything the cluster page shows: message, summary, three figures, idle, top recs.

    Public so that ``bench/dash_render.py`` times exactly what the page renders.
    """
    try:
        cluster = load_cluster(clients.prometheus, range_, clients.node_label)
    except PrometheusError as exc:
        message = _prom_failed(exc)
        empty = figures.empty_figure(message)
        recs, advisor_error = _report(clients)
        top = pages.recommendation_list(
            recs[: pages.TOP_RECOMMENDATIONS], advisor_error or "no recommendations"
        )
        return pages.banner(message), [], empty, empty, empty, pages.banner(message), top
    recs, advisor_error = _report(clients)
    return render_cluster(cluster, recs, advisor_error)


def render_cluster(
    cluster: ClusterData, recs: Sequence[Recommendation], advisor_error: str | None
) -> tuple[Any, ...]:
    """The cluster page's components from loaded data (no I/O)."""
    gpus = cluster.gpus
    messages: list[Any] = []
    if not cluster.nodes:
        messages.append(
            pages.banner(
                "Prometheus has no toposcope series: is it scraping `toposcope exporter` or "
                "`toposcope sim`? (no toposcope_exporter_build_info)",
                "info",
            )
        )
    elif gpus.empty:
        messages.append(pages.banner("no GPUs: the scraped nodes report no GPU series", "info"))
    if cluster.dropped:
        messages.append(
            pages.banner(f"{cluster.dropped} series answered NaN and are not shown", "info")
        )
    idle = cluster.idle
    up = int((gpus["up"] == 1).sum()) if not gpus.empty else 0
    lost = int((gpus["up"] != 1).sum()) if not gpus.empty else 0
    mean_util = gpus.loc[gpus["up"] == 1, "utilization"].mean() if up else float("nan")
    summary = pages.stats(
        [
            (str(len(cluster.nodes)), "nodes"),
            (str(up), "GPUs up"),
            (str(lost), "GPUs lost"),
            (str(len(idle)), f"idle GPUs (<{q.IDLE_UTILIZATION:.0%})"),
            ("-" if pd.isna(mean_util) else f"{mean_util:.0%}", f"mean GPU use, {cluster.range_}"),
            (str(len(recs)), "recommendations"),
        ]
    )
    util = figures.gpu_heatmap(
        cluster, "utilization", f"GPU utilization (average over {cluster.range_})"
    )
    memory = figures.gpu_heatmap(cluster, "memory_ratio", "GPU memory in use")
    locality = figures.locality_bars(cluster)
    idle_frame = idle[["node", "gpu", "utilization", "holder"]].assign(
        utilization=idle["utilization"].map(lambda v: "-" if pd.isna(v) else f"{v:.1%}"),
        holder=idle["holder"].replace("", "(free)"),
    )
    idle_table = pages.simple_table(
        idle_frame.head(200),
        links={"node": pages.NODE},
        empty="no idle GPUs" if not gpus.empty else "no GPUs to report on",
    )
    top = pages.recommendation_list(
        recs[: pages.TOP_RECOMMENDATIONS],
        advisor_error or "no recommendations: the advisor found nothing worth changing",
    )
    if advisor_error:
        top = html.Div([pages.banner(advisor_error), top])
    return messages, summary, util, memory, locality, idle_table, top


def _register_cluster(app: Dash, clients: Clients) -> None:
    @app.callback(
        Output("cluster-message", "children"),
        Output("cluster-summary", "children"),
        Output("cluster-util", "figure"),
        Output("cluster-memory", "figure"),
        Output("cluster-locality", "figure"),
        Output("cluster-idle", "children"),
        Output("cluster-recs", "children"),
        *REFRESH_INPUTS,
    )
    def cluster(_tick: int | None, _clicks: int | None, range_: str) -> tuple[Any, ...]:
        return cluster_view(clients, range_)


# -- node --------------------------------------------------------------------------------


def _register_node(app: Dash, clients: Clients) -> None:
    graphs = (
        "node-topology",
        "node-numa-memory",
        "node-numa-cpu",
        "node-gpu-util",
        "node-gpu-memory",
        "node-gpu-power",
        "node-gpu-throttle",
    )

    @app.callback(
        Output("node-select", "options"),
        Output("node-select", "value"),
        Output("node-message", "children"),
        *(Output(g, "figure") for g in graphs),
        Input("node-select", "value"),
        *REFRESH_INPUTS,
    )
    def node(
        chosen: str | None, _tick: int | None, _clicks: int | None, range_: str
    ) -> tuple[Any, ...]:
        try:
            index = clients.node_index()
        except PrometheusError as exc:
            message = _prom_failed(exc)
            return (
                [],
                chosen,
                pages.banner(message),
                *(figures.empty_figure(message) for _ in graphs),
            )
        names = index.nodes
        options = [{"label": n, "value": n} for n in names]
        if not names:
            text = "no nodes: Prometheus has no toposcope_exporter_build_info series"
            return (
                options,
                None,
                pages.banner(text, "info"),
                *(figures.empty_figure(text) for _ in graphs),
            )
        node_name = chosen if chosen in names else names[0]
        notes: list[Any] = []
        if chosen and chosen not in names:
            notes.append(pages.banner(f"no node {chosen!r}; showing {node_name}", "info"))
        try:
            topo = load_topology(clients.prometheus, index, node_name)
            series = load_node_series(clients.prometheus, index, node_name, range_)
        except PrometheusError as exc:
            message = _prom_failed(exc)
            return (
                options,
                node_name,
                pages.banner(message),
                *(figures.empty_figure(message) for _ in graphs),
            )
        if not topo.gpus:
            notes.append(
                pages.banner(f"{node_name} reports no GPUs (a CPU node, or NVML off)", "info")
            )
        no_gpu = f"{node_name} reports no GPU series"
        return (
            options,
            node_name,
            notes,
            figures.topology_figure(topo),
            figures.lines(
                series.numa_memory,
                "numa_node",
                "Memory used per NUMA node",
                label="NUMA",
                unit="GiB",
                scale=GIB,
            ),
            figures.lines(
                series.numa_cpu, "numa_node", "CPU busy per NUMA node", label="NUMA", percent=True
            ),
            figures.lines(
                series.gpu_utilization,
                "gpu",
                "GPU utilization",
                label="GPU",
                percent=True,
                empty=no_gpu,
            ),
            figures.lines(
                series.gpu_memory,
                "gpu",
                "GPU memory used",
                label="GPU",
                unit="GiB",
                scale=GIB,
                empty=no_gpu,
            ),
            figures.lines(
                series.gpu_power, "gpu", "GPU power", label="GPU", unit="W", empty=no_gpu
            ),
            figures.lines(
                series.gpu_throttle,
                "gpu",
                "GPU throttling (active slowdown reasons)",
                label="GPU",
                unit="reasons",
                empty=no_gpu,
            ),
        )


# -- workload ----------------------------------------------------------------------------


def _register_workload(app: Dash, clients: Clients) -> None:
    graphs = ("workload-cores", "workload-memory", "workload-locality")

    @app.callback(
        Output("workload-select", "options"),
        Output("workload-select", "value"),
        Output("workload-message", "children"),
        Output("workload-summary", "children"),
        *(Output(g, "figure") for g in graphs),
        Output("workload-recs", "children"),
        Input("workload-select", "value"),
        *REFRESH_INPUTS,
    )
    def workload(
        chosen: str | None, _tick: int | None, _clicks: int | None, range_: str
    ) -> tuple[Any, ...]:
        def failed(text: str, kind: str = "error", options: Any = ()) -> tuple[Any, ...]:
            empty = figures.empty_figure(text)
            return list(options), chosen, pages.banner(text, kind), [], empty, empty, empty, []

        try:
            index = clients.node_index()
            refs = load_workloads(clients.prometheus, index)
        except PrometheusError as exc:
            return failed(_prom_failed(exc))
        options = [{"label": r.key, "value": r.key} for r in refs]
        if not refs:
            return failed(
                "no workloads: the exporters track none (workloads collector off, or no "
                "matching processes or cgroups)",
                "info",
            )
        keys = [r.key for r in refs]
        key = chosen if chosen in keys else keys[0]
        ref = WorkloadRef.parse(key)
        try:
            data = load_workload(clients.prometheus, index, ref, range_)
        except PrometheusError as exc:
            return failed(_prom_failed(exc), options=options)
        gpu_numa = {str(n) for n in data.gpu_numa}
        where = ", ".join(f"NUMA {n}" for n in data.gpu_numa) or "-"
        summary = pages.stats(
            [
                (ref.node, "node"),
                (", ".join(f"GPU {g}" for g in data.gpus) or "none", "its GPUs"),
                (where, "NUMA node(s) of its GPUs"),
                *(
                    (f"{value:.0%}", f"{resource} locality")
                    for resource, value in sorted(data.latest_locality.items())
                ),
            ]
        )
        recs, advisor_error = _report(clients)
        mine = [r for r in recs if (r.target.node, r.target.workload) == (ref.node, ref.workload)]
        listed = pages.recommendation_list(
            mine, advisor_error or "no recommendation concerns this workload"
        )
        notes = (
            []
            if chosen in (None, key)
            else [pages.banner(f"no workload {chosen!r}; showing {key}", "info")]
        )
        return (
            options,
            key,
            notes,
            summary,
            figures.lines(
                data.cores, "numa_node", "Where its threads run (cores busy per NUMA node)",
                label="NUMA", unit="cores", stacked=True, marked=gpu_numa,
            ),
            figures.lines(
                data.memory, "numa_node", "Where its memory is (per NUMA node)",
                label="NUMA", unit="GiB", scale=GIB, stacked=True, marked=gpu_numa,
            ),
            figures.lines(
                data.locality, "resource", "Locality ratio (1 = all on its GPUs' NUMA nodes)",
                label="", percent=True,
            ),
            listed,
        )  # fmt: skip


# -- recommendations ---------------------------------------------------------------------


def _action_text(action: str, rec_id: str, results: Sequence[str], details: Sequence[str]) -> str:
    said = "; ".join(f"{r} {d}".strip() for r, d in zip(results, details, strict=False))
    return f"{action} {rec_id}: {said or 'no outcome'}"


def selected_id(
    rows: Sequence[dict[str, Any]] | None, selected: Sequence[int] | None
) -> str | None:
    """The id of the table row ``selected`` points at (indexes into ``rows``), if any."""
    if not rows or not selected or not 0 <= selected[0] < len(rows):
        return None
    return str(rows[selected[0]]["id"])


def _register_recommendations(app: Dash, clients: Clients, access: Access) -> frozenset[str]:
    advisor = clients.advisor

    @app.callback(
        Output("recs-table", "data"),
        Output("recs-table", "selected_rows"),
        Output("recs-message", "children"),
        Output("recs-audit", "children"),
        *REFRESH_INPUTS,
        Input("recs-version", "data"),
        State("recs-table", "selected_rows"),
        State("recs-table", "data"),
        State("url", "search"),
    )
    def table(
        _tick: int | None,
        _clicks: int | None,
        _range: str,
        _version: int,
        selected: list[int] | None,
        shown: list[dict[str, Any]] | None,
        search: str | None,
    ) -> tuple[Any, ...]:
        messages: list[Any] = []
        try:
            report = advisor.report()
            recs: Sequence[Recommendation] = report.recommendations
            if report.last_error:
                messages.append(pages.banner(f"the latest analysis failed: {report.last_error}"))
        except AdvisorError as exc:
            recs = ()
            messages.append(pages.banner(_advisor_failed(exc)))
        try:
            audit: Sequence[AuditRow] = advisor.audit()
        except AdvisorError as exc:
            audit = ()
            messages.append(pages.banner(f"audit log: {_advisor_failed(exc)}"))
        rows = pages.table_rows(recs, audit)
        if not rows and not messages:
            messages.append(
                pages.banner("no recommendations: the advisor found nothing worth changing", "ok")
            )
        wanted = selected_id(shown, selected) or pages.query_value(search, "id")
        index = [i for i, row in enumerate(rows) if row["id"] == wanted]
        return rows, index[:1], messages, pages.audit_table(audit)

    @app.callback(
        Output("recs-detail", "children"),
        Output("recs-apply", "disabled"),
        Output("recs-revert", "disabled"),
        Input("recs-table", "selected_rows"),
        Input("recs-table", "data"),
    )
    def detail(
        selected: list[int] | None, rows: list[dict[str, Any]] | None
    ) -> tuple[Any, bool, bool]:
        rec_id = selected_id(rows, selected)
        if rec_id is None:
            return pages.banner("select a recommendation to see its evidence", "info"), True, True
        row = next((r for r in rows or () if r["id"] == rec_id), None)
        status = row["status"] if row else "open"
        can_act = actions_off(advisor, access) is None
        can_revert = can_act and status in pages.REVERTIBLE
        can_apply = (
            can_act
            and status in ("open", "failed", "reverted")
            and row is not None
            and row["gain"] is not None
        )
        try:
            rec, _audit = advisor.recommendation(rec_id)
        except AdvisorError as exc:
            if isinstance(exc, AdvisorRefused) and exc.status == 404:
                return (
                    pages.banner(f"{rec_id} is no longer in the latest report", "info"),
                    True,
                    not can_revert,
                )
            return pages.banner(_advisor_failed(exc)), not can_apply, not can_revert
        return pages.evidence(rec), not can_apply, not can_revert

    @app.callback(
        Output("recs-confirm-apply", "displayed"),
        Output("recs-confirm-apply", "message"),
        Input("recs-apply", "n_clicks"),
        State("recs-table", "selected_rows"),
        State("recs-table", "data"),
        prevent_initial_call=True,
    )
    def ask_apply(
        clicks: int, selected: list[int] | None, rows: list[dict[str, Any]] | None
    ) -> tuple[bool, str]:
        rec_id = selected_id(rows, selected)
        if not clicks or rec_id is None:
            return False, ""
        row = next((r for r in rows or () if r["id"] == rec_id), {})
        return True, (
            f"Apply {rec_id}?\n\n{row.get('summary', '')}\n\nThe advisor will change "
            f"{row.get('target', 'the target')} through its resource manager."
        )

    @app.callback(
        Output("recs-confirm-revert", "displayed"),
        Output("recs-confirm-revert", "message"),
        Input("recs-revert", "n_clicks"),
        State("recs-table", "selected_rows"),
        State("recs-table", "data"),
        prevent_initial_call=True,
    )
    def ask_revert(
        clicks: int, selected: list[int] | None, rows: list[dict[str, Any]] | None
    ) -> tuple[bool, str]:
        rec_id = selected_id(rows, selected)
        if not clicks or rec_id is None:
            return False, ""
        return True, f"Revert what was applied under {rec_id}?"

    registered = set(app.callback_map)

    @app.callback(
        Output("recs-outcome", "children"),
        Output("recs-version", "data"),
        Input("recs-confirm-apply", "submit_n_clicks"),
        Input("recs-confirm-revert", "submit_n_clicks"),
        State("recs-table", "selected_rows"),
        State("recs-table", "data"),
        State("recs-version", "data"),
        prevent_initial_call=True,
    )
    def act(
        _apply: int | None,
        _revert: int | None,
        selected: list[int] | None,
        rows: list[dict[str, Any]] | None,
        version: int,
    ) -> tuple[Any, Any]:
        rec_id = selected_id(rows, selected)
        if rec_id is None:
            return pages.banner("select a recommendation first", "info"), no_update
        action = "apply" if ctx.triggered_id == "recs-confirm-apply" else "revert"
        user = action_user()
        if user is None:
            return pages.banner(access.sign_in_hint()), no_update
        try:
            if action == "apply":
                result = advisor.apply(rec_id, user=user)
            else:
                result = advisor.revert(rec_id, user=user)
        except ActionInProgress as exc:
            LOG.info("%s %s by %s: %s", action, rec_id, user, exc)
            return pages.banner(str(exc), "info"), (version or 0) + 1
        except AdvisorError as exc:
            LOG.warning("%s %s by %s: %s", action, rec_id, user, exc)
            return pages.banner(f"{action} {rec_id} failed: {exc}"), (version or 0) + 1
        LOG.info("%s %s by %s: %s", action, rec_id, user, ", ".join(result.results))
        text = _action_text(action, rec_id, result.results, result.details)
        kind = "ok" if result.ok else "info" if result.pending else "error"
        children: list[Any] = [pages.banner(text, kind)]
        if result.dry_run_calls:
            children.append(html.Pre("\n".join(result.dry_run_calls)))
        return html.Div(children, id="recs-outcome-text"), (version or 0) + 1

    return frozenset(set(app.callback_map) - registered)


# -- placement ---------------------------------------------------------------------------


def _register_placement(app: Dash, clients: Clients) -> None:
    @app.callback(
        Output("place-node", "options"),
        Output("place-message", "children"),
        Output("place-topology", "figure"),
        Output("place-table", "children"),
        Input("place-run", "n_clicks"),
        State("place-gpus", "value"),
        State("place-node", "value"),
    )
    def placement(_clicks: int | None, gpus: int | None, node: str | None) -> tuple[Any, ...]:
        try:
            index = clients.node_index()
        except PrometheusError as exc:
            message = _prom_failed(exc)
            return [], pages.banner(message), figures.empty_figure(message), []
        options = [{"label": n, "value": n} for n in index.nodes]
        if not gpus or int(gpus) < 1:
            text = "enter how many GPUs the job needs (1 or more)"
            return options, pages.banner(text, "info"), figures.empty_figure(text), []
        try:
            ranked = clients.advisor.placement(int(gpus), node or None)
        except AdvisorError as exc:
            message = _advisor_failed(exc)
            return options, pages.banner(message), figures.empty_figure(message), []
        where = f"node {node}" if node else "any node"
        if not ranked:
            text = (
                f"no {gpus} free GPU(s) on {where}: every set is taken or the nodes are too small"
            )
            return options, pages.banner(text, "info"), figures.empty_figure(text), []
        best = ranked[0]
        try:
            topo = load_topology(clients.prometheus, index, best.node)
        except (PrometheusError, LookupError) as exc:
            message = str(exc)
            return options, pages.banner(message), figures.empty_figure(message), []
        title = (
            f"best placement for {gpus} GPU(s) on {where}: {best.node} GPUs "
            f"{', '.join(map(str, best.gpus))} (worst link {best.worst_link or 'none'})"
        )
        frame = pd.DataFrame(
            [
                {
                    "rank": i + 1,
                    "node": p.node,
                    "gpus": ", ".join(map(str, p.gpus)),
                    "worst link": p.worst_link or "-",
                    "step-time factor": f"{p.link_factor:.2f}",
                    "broken cells": p.broken_cells,
                    "stranded GPUs": p.stranded,
                    "NUMA nodes": ", ".join(map(str, p.numa_nodes)) or "-",
                }
                for i, p in enumerate(ranked)
            ]
        )
        figure = figures.topology_figure(topo, highlight=best.gpus, title=title)
        return (
            options,
            pages.banner(title, "ok"),
            figure,
            pages.simple_table(frame, links={"node": pages.NODE}),
        )
