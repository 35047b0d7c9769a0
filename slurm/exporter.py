"""``toposcope slurm exporter``: Slurm's queue and fairness as Prometheus metrics.

:class:`QueueCollector` is a prometheus_client custom collector: each scrape reads the cluster
once (slurmrestd or the commands, as ``toposcope slurm show`` does) and yields the
``toposcope_queue_*`` families of the catalogue, with ``toposcope_scrape_collector_success``
and ``..._duration_seconds`` for each of its two collectors, as node_exporter does:

- ``slurm_queue``: pending jobs, wait times, GPUs per partition, fragmentation, accounts,
  and each running job's time left (one series per running job with a time limit);
- ``slurm_fairshare``: ``sshare``'s figures, only where accounting is configured (see
  :mod:`toposcope.slurm.accounting`); otherwise it is left out and the reason logged once;
- ``slurm_priority``: ``sprio``'s weighted priority factors per partition and account
  (:mod:`toposcope.slurm.queue_priority`), only where the multifactor priority plugin is
  configured; otherwise left out with one logged reason, as fair-share;
- ``slurm_fabric``: only when a fabric is given (``--fabric-...``): how far each running
  multi-node job is spread over it (:mod:`toposcope.fabric.spread`,
  :mod:`toposcope.slurm.fabric_jobs`). The fabric's own series (its switches and nodes:
  100,000 series and 9 MB at 10,000 nodes with 8 ports each) never change, so they are
  rendered once (:func:`fabric_exposition`) and appended to every answer rather than
  serialised again on each scrape.

Account labels are bounded (:mod:`toposcope.queue.accounts`): names that break the label rule
are ``(invalid)``, and beyond ``max_accounts`` accounts per partition (``--slurm-max-accounts``)
the rest are summed under ``(other)``; ``toposcope_queue_accounts_folded`` counts them.

A failed read gives success 0 and no other series of that collector; the server keeps
serving. :func:`make_app` serves ``/metrics`` (with prometheus_client's ``process_*`` and
``toposcope_build_info``), ``/-/healthy`` and a landing page, on the core's HTTP server.
"""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from toposcope import __version__
from toposcope.catalogue import spec
from toposcope.errors import SourceError
from toposcope.fabric.job_families import fabric_families, job_families
from toposcope.fabric.spread import FabricIndex
from toposcope.queue.accounts import DEFAULT_MAX_ACCOUNTS
from toposcope.serving.selfmetrics import daemon_registry
from toposcope.slurm.accounting import (
    PRIORITY_REQUIRED,
    REQUIRED,
    accounting_gap,
    read_config,
    read_fairshare,
)
from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.fabric_jobs import placements
from toposcope.slurm.queue import queue_snapshot
from toposcope.slurm.queue_families import (
    accounting_families,
    priority_families,
    queue_families,
)
from toposcope.slurm.queue_priority import aggregate, read_priorities
from toposcope.slurm.reader import SlurmReader
from toposcope.slurm.records import ClusterState

LOG = logging.getLogger("toposcope.slurm.exporter")
T = TypeVar("T")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
#: the collectors' names, as ``toposcope_scrape_collector_success{collector}`` shows them
QUEUE_COLLECTOR = "slurm_queue"
FAIRSHARE_COLLECTOR = "slurm_fairshare"
PRIORITY_COLLECTOR = "slurm_priority"
FABRIC_COLLECTOR = "slurm_fabric"


class QueueCollector:
    """Reads Slurm on every scrape and yields the queue families (see the module docstring).

    ``commands`` run ``scontrol show config``, ``sshare`` and ``sprio``; ``None`` (slurmrestd
    without the client tools) leaves the fair-share figures and priority factors out.
    ``max_accounts`` is how many accounts per partition keep their own series. ``fabric``,
    where given, adds the ``slurm_fabric`` collector (the fabric and its multi-node jobs).
    """

    def __init__(
        self,
        reader: SlurmReader,
        commands: SlurmCommands | None,
        clock: Callable[[], float] = time.perf_counter,
        max_accounts: int = DEFAULT_MAX_ACCOUNTS,
        fabric: FabricIndex | None = None,
    ) -> None:
        if max_accounts < 1:
            raise ValueError(f"max_accounts must be at least 1, not {max_accounts}")
        self.reader = reader
        self.commands = commands
        self.max_accounts = max_accounts
        self._clock = clock
        self._skip_reasons: dict[str, str | None] = {}
        self.fabric = fabric

    def _skip(self, collector: str, reason: str | None) -> None:
        """Log when the reason for leaving ``collector`` out appears, changes or goes."""
        if reason != self._skip_reasons.get(collector):
            if reason is None:
                LOG.info("collector=%s enabled: its Slurm configuration is there", collector)
            else:
                LOG.info("collector=%s skipped: %s", collector, reason)
        self._skip_reasons[collector] = reason

    def _config(self) -> dict[str, str] | str:
        """slurmctld's configuration, or why it cannot be read."""
        if self.commands is None:
            return "Slurm's commands are not configured (scontrol, sshare and sprio read it)"
        try:
            return read_config(self.commands)
        except SourceError as exc:
            return f"cannot read slurmctld's configuration: {exc}"

    def _enabled(
        self, collector: str, config: dict[str, str] | str, required: Mapping[str, str]
    ) -> bool:
        """Whether ``config`` has what ``collector`` needs (the reason logged once if not)."""
        reason = config if isinstance(config, str) else accounting_gap(config, required)
        self._skip(collector, reason)
        return reason is None

    def _timed(
        self,
        collector: str,
        read: Callable[[], T],
        success: GaugeMetricFamily | CounterMetricFamily,
        duration: GaugeMetricFamily | CounterMetricFamily,
    ) -> T | None:
        """``read()``, with ``collector``'s success and duration; ``None`` when it failed."""
        started = self._clock()
        try:
            result: T | None = read()
        except SourceError as exc:
            LOG.error("collector=%s failed: %s", collector, exc)
            result = None
        success.add_metric([collector], 0.0 if result is None else 1.0)
        duration.add_metric([collector], self._clock() - started)
        return result

    def collect(self) -> Iterator[Metric]:
        """One scrape: the fair-share figures and the queue, then the priority factors."""
        success = spec("toposcope_scrape_collector_success").family()
        duration = spec("toposcope_scrape_collector_duration_seconds").family()
        commands = self.commands
        config = self._config()
        weights: dict[str, float] = {}
        if commands is not None and self._enabled(FAIRSHARE_COLLECTOR, config, REQUIRED):
            figures = self._timed(
                FAIRSHARE_COLLECTOR, lambda: read_fairshare(commands), success, duration
            )
            if figures is not None:
                weights = {account: shares for account, (_, shares, _) in figures.items()}
                yield from accounting_families(figures, self.max_accounts)
        started = self._clock()
        snapshot = None
        state = None
        try:
            state = self.reader.read()
            snapshot = queue_snapshot(state, weights, self.max_accounts)
        except SourceError as exc:
            LOG.error(
                "collector=%s failed reading %s: %s", QUEUE_COLLECTOR, self.reader.source, exc
            )
            success.add_metric([QUEUE_COLLECTOR], 0.0)
        else:
            yield from queue_families(snapshot)
            success.add_metric([QUEUE_COLLECTOR], 1.0)
        duration.add_metric([QUEUE_COLLECTOR], self._clock() - started)
        if self.fabric is not None:
            yield from self._fabric_families(state, success, duration)
        if (
            commands is not None
            and snapshot is not None
            and self._enabled(PRIORITY_COLLECTOR, config, PRIORITY_REQUIRED)
        ):
            rows = self._timed(
                PRIORITY_COLLECTOR, lambda: read_priorities(commands), success, duration
            )
            if rows is not None:
                yield from priority_families(aggregate(rows, snapshot))
        yield success
        yield duration

    def _fabric_families(
        self,
        state: ClusterState | None,
        success: GaugeMetricFamily | CounterMetricFamily,
        duration: GaugeMetricFamily | CounterMetricFamily,
    ) -> list[Metric]:
        """The multi-node jobs' spread; success 0 without a read."""
        started = self._clock()
        fabric = self.fabric
        out: list[Metric] = []
        if fabric is not None and state is not None:
            out = job_families(fabric.spreads(placements(state.running)))
        success.add_metric([FABRIC_COLLECTOR], 0.0 if state is None else 1.0)
        duration.add_metric([FABRIC_COLLECTOR], self._clock() - started)
        return out


class _Fixed:
    """A collector of fixed families, to render them once."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> list[Metric]:
        """The fixed families."""
        return self.metrics


def fabric_exposition(fabric: FabricIndex | None) -> bytes:
    """The fabric's switch and node series as exposition text, rendered once (empty
    without a fabric); :func:`make_app` appends it to every scrape.
    """
    if fabric is None:
        return b""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(fabric_families(fabric.fabric)))
    return generate_latest(registry)


def exporter_registry(collector: QueueCollector) -> CollectorRegistry:
    """A registry with ``collector`` and the daemon's own ``process_*`` and build info."""
    registry = daemon_registry()
    registry.register(collector)
    return registry


def _landing_page(source: str) -> bytes:
    return (
        "<!doctype html><html><head><title>toposcope Slurm exporter</title></head><body>"
        f"<h1>toposcope Slurm exporter {html.escape(__version__)}</h1>"
        f"<p>Reading Slurm from {html.escape(source)}.</p>"
        '<p><a href="metrics">/metrics</a></p></body></html>'
    ).encode()


def make_app(
    registry: CollectorRegistry, source: str, static: bytes = b""
) -> Callable[..., Iterable[bytes]]:
    """The exporter's WSGI application: ``/metrics``, ``/-/healthy``, ``/-/ready``, ``/``.

    ``static`` is exposition text served after the registry's on every ``/metrics`` (the
    fabric's series, :func:`fabric_exposition`).
    """

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            output = generate_latest(registry) + static
            start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
            return [output]
        if path in ("/-/healthy", "/-/ready"):
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"OK\n"]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [_landing_page(source)]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    return app
