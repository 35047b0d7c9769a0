"""Runs the enabled collectors on every scrape and reports how each one did.

:class:`ScrapeRunner` is itself a client_python collector. For every collector it times the
call, catches any exception (logged with the collector's name, once per distinct message),
and always emits ``toposcope_scrape_collector_success`` and
``toposcope_scrape_collector_duration_seconds``. A collector that fails yields nothing for
that scrape (never a partial or stale set); the others are unaffected.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import Metric

from toposcope.catalogue import spec
from toposcope.errors import NoDataError
from toposcope.exporters.registry import Collector

LOG = logging.getLogger("toposcope.exporter")


@dataclass(frozen=True)
class NamedCollector:
    """A built collector with the name it was registered under."""

    name: str
    collector: Collector


class BrokenCollector:
    """Stands in for a collector whose construction failed, so the failure shows on /metrics."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def collect(self) -> Iterable[Metric]:
        """Raise the construction error again, every scrape."""
        raise self.error


class ScrapeRunner:
    """A client_python collector wrapping the enabled toposcope collectors."""

    def __init__(self, collectors: Sequence[NamedCollector]) -> None:
        self.collectors = list(collectors)
        self._last_error: dict[str, str] = {}

    def names(self) -> list[str]:
        """Names of the wrapped collectors, in run order."""
        return [c.name for c in self.collectors]

    def subset(self, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> ScrapeRunner:
        """A runner over part of the collectors (the ``collect[]`` / ``exclude[]`` parameters)."""
        wanted = set(include)
        unwanted = set(exclude)
        chosen = [
            c
            for c in self.collectors
            if (not wanted or c.name in wanted) and c.name not in unwanted
        ]
        runner = ScrapeRunner(chosen)
        runner._last_error = self._last_error
        return runner

    def _run_one(self, named: NamedCollector) -> tuple[list[Metric], bool]:
        try:
            families = list(named.collector.collect())
        except NoDataError as exc:
            LOG.debug("collector=%s no data: %s", named.name, exc)
            return [], False
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            if self._last_error.get(named.name) != message:
                LOG.error("collector=%s failed: %s", named.name, message)
                self._last_error[named.name] = message
            return [], False
        if self._last_error.pop(named.name, None) is not None:
            LOG.info("collector=%s recovered", named.name)
        return families, True

    def collect(self) -> Iterator[Metric]:
        """Run every collector once and yield their families plus the scrape self-metrics."""
        success = spec("toposcope_scrape_collector_success").family()
        duration = spec("toposcope_scrape_collector_duration_seconds").family()
        for named in self.collectors:
            started = time.perf_counter()
            families, ok = self._run_one(named)
            elapsed = time.perf_counter() - started
            yield from families
            success.add_metric([named.name], 1.0 if ok else 0.0)
            duration.add_metric([named.name], elapsed)
        yield success
        yield duration
