"""What every loader returns and what every metrics backend provides.

A *backend* is where samples come from: a PromQL HTTP API (:class:`PrometheusLoader`) or the
exporters' ``/metrics`` pages read directly (:class:`ScrapeLoader`). A *query* is one need of
the advisor (GPU utilization over the window, a workload's memory per NUMA node...), declared
once as a :class:`Query` with its catalogue metric and how samples are reduced over the
window. Backends answer queries through :meth:`MetricsBackend.load`, so the model builder and
the policies never care where the numbers came from. Samples and series are the core's
PromQL result types (:mod:`toposcope.promtypes`), with ``__name__`` left out of their labels.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol

from toposcope.catalogue import MetricSpec, spec
from toposcope.errors import ConfigError
from toposcope.promtypes import Sample, Series

Reduction = Literal["value", "avg", "min", "max", "count", "rate"]
QueryType = Literal["instant", "range"]

_DURATION_RE = re.compile(r"^(?:(\d+)(ms|s|m|h|d|w|y))+$")
_DURATION_PART_RE = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
#: subquery points that date a counter's first sample in the window (see rate_over_age)
AGE_POINTS = 120
_UNIT_SECONDS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "y": 31536000.0,
}


def parse_duration(text: str) -> float:
    """Seconds in a PromQL duration such as ``"1h"``, ``"90s"`` or ``"1h30m"``.

    Raises :class:`ConfigError` for anything PromQL would reject, so that a typo in
    ``--window`` is a usage error and not a failed query.
    """
    text = text.strip()
    if not _DURATION_RE.match(text):
        raise ConfigError(f"{text!r} is not a PromQL duration (examples: 30m, 1h, 1h30m, 2d)")
    seconds = sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART_RE.findall(text))
    if seconds <= 0:
        raise ConfigError(f"duration {text!r} must be longer than zero")
    return seconds


@dataclass(frozen=True)
class Window:
    """The look-back window of one advisor run, as PromQL text and in seconds.

    ``end`` is the evaluation time (Unix seconds) or ``None`` for "now" as the backend sees it.
    """

    text: str
    seconds: float
    end: float | None = None

    @classmethod
    def parse(cls, text: str, end: float | None = None) -> Window:
        """Build a window from PromQL duration text (``ConfigError`` when malformed)."""
        return cls(text.strip(), parse_duration(text), end)

    def step_seconds(self, points: int = 60) -> float:
        """The step of a range query that returns about ``points`` points (at least 1 s)."""
        return max(1.0, self.seconds / points)


@dataclass(frozen=True)
class QueryResult:
    """What a backend answered to one query.

    ``samples`` for instant queries, ``series`` for range queries. ``warnings`` are the
    backend's own (partial responses, truncated data) plus ours; ``dropped`` counts NaN/Inf
    samples removed; ``cumulative`` is true when a ``rate`` query was answered with counter
    totals since the counter's start (the scraper has one sample, no rate).
    """

    query: str
    metric: str = ""
    samples: tuple[Sample, ...] = ()
    series: tuple[Series, ...] = ()
    warnings: tuple[str, ...] = ()
    dropped: int = 0
    cumulative: bool = False

    @property
    def empty(self) -> bool:
        """True when the backend had no series for the query (not an error: missing data)."""
        return not self.samples and not self.series


@dataclass(frozen=True)
class Query:
    """One need of the advisor: a catalogue metric reduced over the window.

    Subclasses set ``name`` (used as the key in :class:`LoadedData`), ``metric`` (a catalogue
    name: the PromQL is built from it, never typed by hand), ``reduction`` and ``query_type``.
    ``selector`` adds label matchers to every selector (``job="toposcope"``).

    ``positive_only`` asks only for series whose reduced value is above zero, for a metric
    of many series that are almost all zero and whose zeros no policy reads: the backend
    sends, and the advisor decodes, the few that matter. So that "all zero" still differs
    from "no series", one sample without labels (``group()`` of the metric) is added
    whenever the metric exists; it names no node and the model builder skips it. (A plain
    ``or``: VictoriaMetrics 1.79 answers ``A or on() group(B)`` with every series of B.)
    """

    name: ClassVar[str] = ""
    metric: ClassVar[str] = ""
    reduction: ClassVar[Reduction] = "value"
    query_type: ClassVar[QueryType] = "instant"
    description: ClassVar[str] = ""
    positive_only: ClassVar[bool] = False

    selector: str = ""

    @property
    def spec(self) -> MetricSpec:
        """The catalogue row of the metric this query reads."""
        return spec(self.metric)

    def promql(self, window: Window) -> str:
        """The PromQL expression for this query over ``window``."""
        selector = f"{self.metric}{{{self.selector}}}" if self.selector else self.metric
        if self.query_type == "range" or self.reduction == "value":
            expr = selector
        elif self.reduction == "rate":
            expr = rate_over_age(selector, window)
        else:
            expr = f"{self.reduction}_over_time({selector}[{window.text}])"
        if self.positive_only:
            return f"{expr} > 0 or group({selector})"
        return expr


def promql_duration(seconds: float) -> str:
    """``seconds`` as a PromQL duration (``"15s"``, ``"1250ms"``): whole milliseconds."""
    millis = round(seconds * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def rate_over_age(selector: str, window: Window) -> str:
    """The per-second rate of counter ``selector`` over ``window``, or over the part of it the
    series has existed when it is younger than the window.

    ``rate(x[W])`` divides by ``W`` even when the first sample is in the window (Prometheus
    extrapolates to the window's start only from within 1.1 sample intervals of it), so a
    workload started 30 s into a 5 m window would read a tenth of its rate. Here the increase
    is divided by the series' age, clamped to the window: the time since its first sample, found
    as the lowest ``timestamp()`` of a subquery that starts one step before the window (an older
    series finds a sample at or before the window's start, so its age is the window and its
    rate is ``rate()``'s). The step is ``window / AGE_POINTS``: exact when it is no longer than
    the scrape interval, otherwise the age is known to one step. A series first seen after the
    subquery's last point is aged from its last sample, and no age is less than one step.
    ``increase`` rather than ``rate``: VictoriaMetrics' ``increase`` counts a new counter from
    zero and its ``rate`` already divides by the time actually sampled.
    """
    step = window.step_seconds(AGE_POINTS)
    reach = f"{promql_duration(window.seconds + step)}:{promql_duration(step)}"
    first_seen = f"min_over_time(timestamp({selector})[{reach}]) or timestamp({selector})"
    age = f"clamp(time() - ({first_seen}), {step:g}, {window.seconds:g})"
    return f"increase({selector}[{window.text}]) / {age}"


class MetricsBackend(Protocol):
    """Where samples come from: a PromQL API or scraped exporters."""

    @property
    def source(self) -> str:
        """A short description for reports (URL or list of scrape URLs)."""
        ...

    def load(self, query: Query, window: Window) -> QueryResult:
        """Answer one query over ``window`` (empty result when no series exist)."""
        ...


@dataclass(frozen=True)
class LoadedData:
    """Every query's result of one advisor run, keyed by query name, and run-wide notes.

    ``timings`` holds the seconds each query took (request, transfer and decoding), keyed
    like ``results``: what ``--log.level debug`` prints and the scale benchmark reads, to
    tell the backend's time from the advisor's own.
    """

    source: str
    window: Window
    results: Mapping[str, QueryResult]
    notes: tuple[str, ...] = field(default=())
    timings: Mapping[str, float] = field(default_factory=dict)

    @property
    def query_seconds(self) -> float:
        """Seconds spent answering every query of the run."""
        return sum(self.timings.values())

    def samples(self, name: str) -> tuple[Sample, ...]:
        """Samples of query ``name`` (empty when it was not loaded or had no series)."""
        result = self.results.get(name)
        return result.samples if result else ()

    def series(self, name: str) -> tuple[Series, ...]:
        """Series of range query ``name`` (empty when not loaded or no series)."""
        result = self.results.get(name)
        return result.series if result else ()

    def present_metrics(self) -> frozenset[str]:
        """Catalogue names of the metrics that had at least one series."""
        return frozenset(r.metric for r in self.results.values() if r.metric and not r.empty)


def finite(value: float) -> bool:
    """True for values a policy may use (not NaN, not infinite)."""
    return not (math.isnan(value) or math.isinf(value))


def check_selector(selector: str) -> str:
    """Validate an extra label-matcher list such as ``job="toposcope",env=~"prod.*"``.

    Only the shape is checked (names, operators, quoted values) so that a mistake is a usage
    error and never reaches the backend as broken PromQL.
    """
    text = selector.strip().strip("{}").strip()
    if not text:
        return ""
    matcher = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*'
    if not re.fullmatch(rf"{matcher}(,{matcher})*,?", text):
        raise ConfigError(
            f'--prometheus-selector {selector!r} is not a list of label matchers like job="x"'
        )
    return text
