"""Grafana dashboards for toposcope, generated from Python with grafana-foundation-sdk.

One module per dashboard, each with ``UID``, ``TITLE`` and ``build() -> dict`` (the
dashboard's JSON model), listed in the table of :mod:`.boards`. ``python -m
toposcope.dashboards.grafana --output DIR`` writes one ``<uid>.json`` per dashboard; the
committed files live in ``dashboards/grafana/json/`` and ``deploy/grafana/provisioning/`` loads
them into Grafana (docs/dashboards.md).

The SDK is an optional dependency (the ``grafana`` extra): the exporter never imports this
package, and the modules are imported only when dashboards are built.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Where the committed JSON files live (the generator's default output).
JSON_DIR = Path(__file__).resolve().parent / "json"


def build_all() -> dict[str, dict[str, Any]]:
    """Every dashboard's JSON model, keyed by its file name (``<uid>.json``)."""
    from toposcope.dashboards.grafana.boards import BUILDERS  # noqa: PLC0415 (needs the SDK)

    built: dict[str, dict[str, Any]] = {}
    for build in BUILDERS:
        data = build()
        built[f"{data['uid']}.json"] = data
    return built


def render(data: dict[str, Any]) -> str:
    """The committed form of a dashboard: sorted keys, two-space indent, final newline."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
