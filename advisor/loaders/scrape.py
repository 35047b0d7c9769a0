"""The embedded scraper: read exporters' ``/metrics`` directly, without a Prometheus.

For a quick look at a few nodes (``toposcope advise --scrape http://node1:9400/metrics``) the
advisor can skip the time-series database: each target is read once with ``urllib`` and
parsed with ``prometheus_client.parser``. It answers the same :class:`Query` objects as the
PromQL backend for the instant case, with what one scrape can tell:

* ``value``, ``avg``, ``min``, ``max`` over the window: the scraped value;
* ``count``: 1 (one sample; policies needing history then say "cannot decide");
* ``rate`` of a counter: the counter's total since it started, marked ``cumulative`` (shares
  of CPU time per NUMA node stay meaningful, cores per second do not);
* range queries: one point at scrape time.

A target is ``URL`` or ``NAME=URL`` (a plain path reads a saved scrape); ``NAME`` becomes
the sample's ``node`` label (the name the resource manager knows the node by). Every sample
also gets ``instance`` (the URL's host:port) and ``job="scrape"``, as a Prometheus scrape
would add. A target without a name is known by that ``(job, instance)`` (its exporter's
hostname is joined on it), so two targets of one scrape job on one host:port cannot both go
unnamed: the loader refuses them (:func:`check_targets`) rather than silently keep only one.
A target that publishes labelled series of a whole cluster (the simulator's ``/metrics``:
its queue and fabric) gets a ``job`` of its own, as a Prometheus scrape job would.
"""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from toposcope import __version__
from toposcope.advisor.errors import AdvisorConnectionError
from toposcope.advisor.loaders.base import Query, QueryResult, Window, finite
from toposcope.errors import UsageError
from toposcope.identity.names import InvalidNameError, check_node_name
from toposcope.promql.results import Sample, Series

LOG = logging.getLogger("toposcope.advisor.scrape")


@dataclass(frozen=True)
class ScrapeTarget:
    """One exporter to read: its URL and, optionally, the node name to report it as.

    ``job`` is the ``job`` label its samples get (``scrape`` unless a caller knows better).
    """

    url: str
    node: str | None = None
    job: str = "scrape"

    @classmethod
    def parse(cls, text: str) -> ScrapeTarget:
        """``URL`` or ``NAME=URL`` (a ``=`` before ``://`` separates the name).

        A URL without a scheme is a file holding a saved scrape (``file:`` URL). ``NAME``
        must be a node (host) name (:class:`UsageError` otherwise).
        """
        head, sep, tail = text.partition("=")
        name, url = (head, tail) if sep and "://" not in head and head else (None, text)
        if name is not None:
            try:
                check_node_name(name)
            except InvalidNameError as exc:
                raise UsageError(f"--scrape {text[:120]!r}: {exc}") from None
        if "://" not in url:
            url = Path(url).absolute().as_uri()
        return cls(url, name)

    @property
    def instance(self) -> str:
        """The ``instance`` label: host:port of the URL (the path for ``file:`` URLs)."""
        parsed = urllib.parse.urlsplit(self.url)
        return parsed.netloc or parsed.path


def check_targets(targets: Sequence[ScrapeTarget]) -> None:
    """Refuse (:class:`UsageError`) an unnamed target whose job and host:port another has.

    Its series would be told apart from the other's by ``(job, instance)`` alone, which
    both share: one node would silently take the other's place.
    """
    by_instance: dict[tuple[str, str], list[ScrapeTarget]] = {}
    for target in targets:
        by_instance.setdefault((target.job, target.instance), []).append(target)
    for (_, instance), sharing in by_instance.items():
        unnamed = [t for t in sharing if t.node is None]
        if len(sharing) > 1 and unnamed:
            urls = " and ".join(repr(t.url) for t in sharing[:2])
            raise UsageError(
                f"--scrape {urls} are both on {instance}, so they cannot be told apart by "
                "their address: name each one's node, --scrape NAME=URL"
            )


@dataclass(frozen=True)
class _Scraped:
    target: ScrapeTarget
    timestamp: float
    samples: tuple[tuple[str, dict[str, str], float], ...]


class ScrapeLoader:
    """Read each target once (on the first query) and answer queries from that snapshot,
    until :meth:`refresh` (every analysis of ``advisor serve`` starts with one).

    Targets that cannot be told apart are refused (:func:`check_targets`). ``source`` names
    them in reports when they were found rather than listed (a simulator's URL); by default
    the report lists the scraped URLs.
    """

    def __init__(
        self, targets: Sequence[ScrapeTarget], *, timeout: float = 10.0, source: str = ""
    ) -> None:
        if not targets:
            raise AdvisorConnectionError("no scrape targets given")
        check_targets(targets)
        self.targets = tuple(targets)
        self.timeout = timeout
        self._source = source
        self._snapshot: list[_Scraped] | None = None
        self._failures: list[str] = []

    @property
    def source(self) -> str:
        """What was scraped, for reports: ``source`` if given, else the scraped URLs."""
        return self._source or "scrape:" + ",".join(t.url for t in self.targets)

    def refresh(self) -> None:
        """Drop the snapshot and its failures: the next query reads every target again."""
        self._snapshot = None
        self._failures = []

    def scrape(self) -> list[_Scraped]:
        """Read every target (once); unreachable targets become warnings, all failing an error."""
        if self._snapshot is not None:
            return self._snapshot
        scraped: list[_Scraped] = []
        for target in self.targets:
            try:
                text = self._fetch(target.url)
                samples = _parse(text, target.url)
            except AdvisorConnectionError as exc:
                LOG.warning("%s", exc)
                self._failures.append(str(exc))
                continue
            scraped.append(_Scraped(target, time.time(), samples))
        if not scraped:
            raise AdvisorConnectionError(
                "no scrape target could be read: " + "; ".join(self._failures)
            )
        self._snapshot = scraped
        return scraped

    def load(self, query: Query, window: Window) -> QueryResult:
        """Answer ``query`` from the snapshot (see the module docstring for the semantics)."""
        snapshot = self.scrape()
        samples: list[Sample] = []
        series: list[Series] = []
        dropped = 0
        for scraped in snapshot:
            extra = {"instance": scraped.target.instance, "job": scraped.target.job}
            if scraped.target.node:
                extra["node"] = scraped.target.node
            for name, labels, value in scraped.samples:
                if name != query.metric:
                    continue
                if not finite(value):
                    dropped += 1
                    continue
                merged = {**labels, **extra}
                if query.query_type == "range":
                    series.append(Series(merged, ((scraped.timestamp, value),)))
                else:
                    samples.append(Sample(merged, 1.0 if query.reduction == "count" else value))
        warnings = tuple(f"scrape failed: {f}" for f in self._failures)
        return QueryResult(
            f"scrape {query.metric}",
            query.metric,
            tuple(samples),
            tuple(series),
            warnings,
            dropped,
            query.reduction == "rate",
        )

    def _fetch(self, url: str) -> str:
        try:
            request = urllib.request.Request(
                url,
                headers={
                    "User-Agent": f"toposcope-advisor/{__version__}",
                    "Accept": "text/plain;version=0.0.4",
                },
            )
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body: bytes = response.read()
        except urllib.error.HTTPError as exc:
            raise AdvisorConnectionError(f"scraping {url}: HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AdvisorConnectionError(f"scraping {url}: {reason}") from exc
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise AdvisorConnectionError(f"scraping {url}: not UTF-8 text") from exc


def _parse(text: str, url: str) -> tuple[tuple[str, dict[str, str], float], ...]:
    try:
        return tuple(
            (sample.name, dict(sample.labels), float(sample.value))
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise AdvisorConnectionError(f"scraping {url}: not Prometheus text format: {exc}") from exc
