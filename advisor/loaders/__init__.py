"""Loaders: where the advisor's numbers come from (a PromQL API or scraped exporters).

:mod:`.base` defines the results and the backend protocol, :mod:`.prometheus` the PromQL HTTP
backend, :mod:`.scrape` the embedded scraper and :mod:`.queries` the table of query needs.
"""

from __future__ import annotations

from toposcope.advisor.loaders.base import (
    LoadedData,
    MetricsBackend,
    Query,
    QueryResult,
    Window,
    parse_duration,
)
from toposcope.advisor.loaders.prometheus import PrometheusLoader
from toposcope.advisor.loaders.queries import PLACEMENT_QUERIES, QUERY_TABLE, load_all, queries
from toposcope.advisor.loaders.scrape import ScrapeLoader, ScrapeTarget
from toposcope.promql.results import Sample, Series

__all__ = [
    "PLACEMENT_QUERIES",
    "QUERY_TABLE",
    "LoadedData",
    "MetricsBackend",
    "PrometheusLoader",
    "Query",
    "QueryResult",
    "Sample",
    "ScrapeLoader",
    "ScrapeTarget",
    "Series",
    "Window",
    "load_all",
    "parse_duration",
    "queries",
]
