"""What every loader returns and what every metrics backend provides.

A *backend* is where samples come from: a PromQL HTTP API (:class:`PrometheusLoader`) or the
exporters' ``/metrics`` pages read directly (:class:`ScrapeLoader`). A *query* is one need of
the advisor (GPU utilization over the window, a workload's memory per NUMA node...), declared
once as a :class:`QueryRow` of the table in :mod:`.queries` (its catalogue metric and how
samples are reduced over the window) and bound to a run's label matchers as a :class:`Query`.
Backends answer queries through :meth:`MetricsBackend.load`, so the model builder and the
policies never care where the numbers came from. Samples and series are the core's
PromQL result types (:mod:`toposcope.promql.results`), with ``__name__`` left out of their labels.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from toposcope.catalogue import MetricSpec, spec
from toposcope.errors import ConfigError
from toposcope.promql.results import Sample, Series

Reduction = Literal["value", "avg", "min", "max", "count", "rate"]
QueryType = Literal["instant", "range"]

_DURATION_RE = re.compile(r"^(?:(\d+)(ms|s|m|h|d|w|y))+$")
_DURATION_PART_RE = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
#: subquery points that date a counter's first sample in the window (see rate_over_age)
AGE_POINTS = 120
#: subquery points of the coarser first-sample time that tells a counter that ended from one
#: that runs (see rate_over_age)
ENDED_POINTS = 12
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
class QueryRow:
    """One need of the advisor, one row of the query table: a catalogue metric reduced over
    the window.

    ``name`` is the key of the answer in :class:`LoadedData`; ``metric`` a catalogue name (the
    PromQL is built from it, never typed by hand); ``reduction`` how samples are reduced over
    the window (``value``: the latest sample, ``rate``: :func:`rate_over_age`, else
    ``<reduction>_over_time``) and ``query_type`` whether the backend answers an instant
    vector or a range (a range query reads the raw samples and ignores ``reduction``). Series
    keep all their labels: nothing is aggregated away in PromQL, so the model builder can
    tell nodes apart.

    ``positive_only`` asks only for series whose reduced value is above zero, for a metric
    of many series that are almost all zero and whose zeros no policy reads: the backend
    sends, and the advisor decodes, the few that matter. So that "all zero" still differs
    from "no series", one sample without labels (``group()`` of the metric) is added
    whenever the metric exists; it names no node and the model builder skips it. (A plain
    ``or``: VictoriaMetrics 1.79 answers ``A or on() group(B)`` with every series of B.)
    """

    name: str
    metric: str
    reduction: Reduction = "value"
    query_type: QueryType = "instant"
    positive_only: bool = False

    @property
    def spec(self) -> MetricSpec:
        """The catalogue row of the metric this query reads."""
        return spec(self.metric)

    def bind(self, selector: str = "") -> Query:
        """This row as the query of one run, with ``selector``'s label matchers."""
        return Query(**(vars(self) | {"selector": selector}))


@dataclass(frozen=True)
class Query(QueryRow):
    """A row of the query table bound to one run: what backends answer.

    ``selector`` adds label matchers to every selector of the PromQL (``job="toposcope"``).
    """

    selector: str = ""

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
    """The per-second rate of counter ``selector`` over the part of ``window`` the series was
    sampled in: the whole window for a running series older than it, less for one that
    started or ended inside it.

    ``rate(x[W])`` divides by ``W`` whatever part of the window the samples cover (Prometheus
    extrapolates to an edge of the window only from within 1.1 average sample intervals of
    it), so a workload started 30 s into a 5 m window reads a tenth of its rate, and one that
    ran at 1 core for the first half of the window and exited reads 0.5. Here ``increase`` is
    divided by the series' age in the window instead, at least one step:

    * it starts at its first sample (:func:`_first_seen`, to one step of ``window /
      AGE_POINTS``: exact when the step is no longer than the scrape interval), or at the
      window's start for an older series, which so reads exactly what ``rate()`` reads while
      it runs;
    * it ends now while the series runs, else at its last sample: ``timestamp()`` now, or the
      highest ``timestamp()`` of a subquery like the first sample's once the series is stale
      or older than the lookback. A series has ended when the gap since its last sample is
      more than 1.1 average sample intervals, Prometheus's own rule for not extrapolating to
      the window's end. The interval is the age so far over ``count_over_time - 1``, so the
      test is ``gap * (count + 0.1) > 1.1 * age so far``; that age comes from a subquery of
      ``ENDED_POINTS`` points rounded up by its step (a tenth of the cost; a series can only
      read as running a little longer, never as ended while it runs).

    ``increase`` rather than ``rate``: VictoriaMetrics' ``increase`` counts a new counter from
    zero and stops at the last sample, and its ``rate`` already divides by the time actually
    sampled. Prometheus' ``increase`` extrapolates half an average interval past the last
    sample of a series that ended, so there such a series reads high by half a sample interval
    over its age.
    """
    step = window.step_seconds(AGE_POINTS)
    coarse = round(window.step_seconds(ENDED_POINTS), 3)
    seconds = f"{window.seconds:g}"
    age_so_far = f"clamp_max(time() - ({_first_seen(selector, window, step)}), {seconds})"
    age_so_far_upper = (
        f"clamp_max(time() + {coarse:g} - ({_first_seen(selector, window, coarse)}), {seconds})"
    )
    last_seen = (
        f"timestamp({selector}) or "
        f"max_over_time(timestamp({selector})[{_subquery_range(window, step)}])"
    )
    samples = f"count_over_time({selector}[{window.text}])"
    ended_gap = f"time() - ({last_seen}) > 1.1 * {age_so_far_upper} / ({samples} + 0.1)"
    age = f"{age_so_far} - ({ended_gap} or 0 * {samples})"
    return f"increase({selector}[{window.text}]) / clamp({age}, {step:g}, {seconds})"


def _subquery_range(window: Window, step: float) -> str:
    """``RANGE:STEP`` of a subquery that covers ``window`` and the step before it."""
    return f"{promql_duration(window.seconds + step)}:{promql_duration(step)}"


def _first_seen(selector: str, window: Window, step: float) -> str:
    """When ``selector`` was first sampled in ``window``, to one ``step``: the lowest
    ``timestamp()`` of a subquery from one step before the window (a series older than the
    window finds a sample before it), or the latest sample's for a series first seen after
    the subquery's last point.
    """
    subquery = _subquery_range(window, step)
    return f"min_over_time(timestamp({selector})[{subquery}]) or timestamp({selector})"


class MetricsBackend(Protocol):
    """Where samples come from: a PromQL API or scraped exporters."""

    @property
    def source(self) -> str:
        """A short description for reports (URL or list of scrape URLs)."""
        ...

    def load(self, query: Query, window: Window) -> QueryResult:
        """Answer one query over ``window`` (empty result when no series exist)."""
        ...

    def refresh(self) -> None:
        """Forget what was read for the previous analysis: the next query reads anew (a
        scraper reads its targets again; a PromQL API keeps nothing, so it does nothing).
        """
        ...


@dataclass(frozen=True)
class LoadedData:
    """Every query's result of one advisor run, keyed by query name, and run-wide notes.

    ``timings`` holds the seconds each query took (request, transfer and decoding), keyed
    like ``results``: what ``--log.level debug`` prints and the scale benchmark reads, to
    tell the backend's time from the advisor's own. ``dropped_series`` counts the series
    left out because a name in their labels breaks the naming rules, by reason
    (:mod:`.screen`).
    """

    source: str
    window: Window
    results: Mapping[str, QueryResult]
    notes: tuple[str, ...] = field(default=())
    timings: Mapping[str, float] = field(default_factory=dict)
    dropped_series: Mapping[str, int] = field(default_factory=dict)

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
