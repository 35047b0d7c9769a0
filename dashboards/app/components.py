"""The app's routes and the small components its pages are built from: banners, cards,
graphs, subject pickers (and the callback that fills a page from its picker), big numbers and
tables.

Routes: ``/`` cluster, ``/node?node=NAME``, ``/workload?workload=NODE/NAME``,
``/recommendations?id=ID``, ``/placement``, ``/queue`` (:mod:`.queue_page`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs, urlencode

import pandas as pd
from dash import Dash, Input, Output, dcc, html

from toposcope.dashboards.app.sources import REFRESH_INPUTS
from toposcope.report.recommendation import Recommendation

CLUSTER, NODE, WORKLOAD, RECOMMENDATIONS, PLACEMENT = (
    "/",
    "/node",
    "/workload",
    "/recommendations",
    "/placement",
)


def query_value(search: str | None, key: str) -> str | None:
    """The first value of ``key`` in a URL query string (``?a=b``), or ``None``."""
    values = parse_qs((search or "").lstrip("?")).get(key)
    return values[0] if values else None


def href(path: str, **params: str) -> str:
    """A link to ``path`` with query parameters."""
    return f"{path}?{urlencode(params)}" if params else path


def banner(text: str, kind: str = "error") -> html.Div:
    """A coloured message line (``error``, ``info`` or ``ok``)."""
    return html.Div(text, className=f"banner {kind}")


def graph(graph_id: str) -> dcc.Graph:
    """A graph filled by a callback; its figure sets the height, the card the width."""
    return dcc.Graph(id=graph_id, config={"displaylogo": False, "displayModeBar": "hover"})


def card(*children: Any, **style: Any) -> html.Div:
    """A white panel."""
    return html.Div(list(children), className="card", style=style or None)


def row(*children: Any) -> html.Div:
    """Panels side by side (the ``row`` class wraps them on a narrow screen)."""
    return html.Div(list(children), className="row")


def graph_row(*graph_ids: str) -> html.Div:
    """A row of cards, one graph each, filled by the page's callback."""
    return row(*(card(graph(g)) for g in graph_ids))


def titled_card(title: str, content_id: str) -> html.Div:
    """A card with a heading over an empty ``Div`` that a callback fills."""
    return card(html.H2(title), html.Div(id=content_id))


def given_options(value: str | None) -> list[dict[str, str]]:
    """Dropdown options holding just the value the URL names (the callback adds the rest);
    a dropdown drops a value that is not among its options.
    """
    return [{"label": value, "value": value}] if value else []


def picker(picker_id: str, value: str | None, placeholder: str) -> html.Div:
    """The page's subject chooser; its options are filled from Prometheus by a callback."""
    return html.Div(
        dcc.Dropdown(
            id=picker_id,
            options=given_options(value),
            value=value,
            placeholder=placeholder,
            clearable=False,
        ),
        className="picker",
    )


def fill_from_picker(
    app: Dash,
    picker_id: str,
    outputs: Sequence[Output],
    view: Callable[[str | None, str], tuple[Any, ...]],
) -> None:
    """Fill a page from its subject picker ``picker_id`` when the subject is chosen and on
    every refresh: ``view(chosen, time_range)`` answers the picker's options and value, then
    one value per ``outputs``.
    """

    @app.callback(
        Output(picker_id, "options"),
        Output(picker_id, "value"),
        *outputs,
        Input(picker_id, "value"),
        *REFRESH_INPUTS,
    )
    def fill(
        chosen: str | None, _tick: int | None, _clicks: int | None, range_: str
    ) -> tuple[Any, ...]:
        return view(chosen, range_)


def stats(items: Sequence[tuple[str, str]]) -> list[html.Div]:
    """Big-number cards: (value, label)."""
    return [
        html.Div([html.B(value), html.Span(label)], className="card stat") for value, label in items
    ]


def simple_table(
    frame: pd.DataFrame, links: Mapping[str, str] | None = None, empty: str = ""
) -> Any:
    """A plain HTML table of ``frame``; ``links`` maps a column to the page its values open."""
    if frame.empty:
        return banner(empty or "nothing to show", "info")
    links = links or {}
    head = html.Thead(html.Tr([html.Th(c) for c in frame.columns]))
    rows = []
    for record in frame.itertuples(index=False):
        cells = []
        for column, value in zip(frame.columns, record, strict=True):
            text = str(value)
            if column in links:
                target = links[column]
                key = "workload" if target == WORKLOAD else "node"
                cells.append(html.Td(dcc.Link(text, href=href(target, **{key: text}))))
            else:
                cells.append(html.Td(text))
        rows.append(html.Tr(cells))
    return html.Table([head, html.Tbody(rows)], className="simple")


def recommendation_list(recs: Sequence[Recommendation], empty: str) -> Any:
    """A short table of recommendations with their gains, linking to the table page."""
    if not recs:
        return banner(empty, "info")
    head = html.Thead(html.Tr([html.Th(h) for h in ("gain", "kind", "target", "summary")]))
    rows = [
        html.Tr(
            [
                html.Td(f"{r.estimated_gain:.0%}"),
                html.Td(str(r.kind)),
                html.Td(r.target.label()),
                html.Td(dcc.Link(r.summary, href=href(RECOMMENDATIONS, id=r.id))),
            ]
        )
        for r in recs
    ]
    return html.Table([head, html.Tbody(rows)], className="simple")
