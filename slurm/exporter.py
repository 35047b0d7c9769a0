"""``toposcope slurm exporter``: Slurm's queue and fairness as Prometheus metrics.

:class:`QueueCollector` is a prometheus_client custom collector: each scrape reads the cluster
once (slurmrestd or the commands, as ``toposcope slurm show`` does) and yields the
``toposcope_queue_*`` families of the catalogue, with ``toposcope_scrape_collector_success``
and ``..._duration_seconds`` for each of its two collectors, as node_exporter does:

- ``slurm_queue``: pending jobs, wait times, GPUs per partition, fragmentation, accounts;
- ``slurm_fairshare``: ``sshare``'s figures, only where accounting is configured (see
  :mod:`toposcope.slurm.accounting`); otherwise it is left out and the reason logged once.

A failed read gives success 0 and no other series of that collector; the server keeps
serving. :func:`make_app` serves ``/metrics`` (with prometheus_client's ``process_*`` and
``toposcope_build_info``), ``/-/healthy`` and a landing page, on the core's HTTP server.
"""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from toposcope import __version__
from toposcope.catalogue import spec
from toposcope.errors import SourceError
from toposcope.selfmetrics import daemon_registry
from toposcope.slurm.accounting import accounting_gap, read_config, read_fairshare
from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.queue import queue_snapshot
from toposcope.slurm.queue_families import accounting_families, queue_families
from toposcope.slurm.reader import SlurmReader

LOG = logging.getLogger("toposcope.slurm.exporter")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
#: the collectors' names, as ``toposcope_scrape_collector_success{collector}`` shows them
QUEUE_COLLECTOR = "slurm_queue"
FAIRSHARE_COLLECTOR = "slurm_fairshare"


class QueueCollector:
    """Reads Slurm on every scrape and yields the queue families (see the module docstring).

    ``commands`` run ``scontrol show config`` and ``sshare``; ``None`` (slurmrestd without
    the client tools) leaves the fair-share figures out.
    """

    def __init__(
        self,
        reader: SlurmReader,
        commands: SlurmCommands | None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.reader = reader
        self.commands = commands
        self._clock = clock
        self._skip_reason: str | None = None

    def _skip(self, reason: str | None) -> None:
        """Log when the reason for leaving fair-share out appears, changes or goes."""
        if reason != self._skip_reason:
            if reason is None:
                LOG.info("collector=%s enabled: accounting is configured", FAIRSHARE_COLLECTOR)
            else:
                LOG.info("collector=%s skipped: %s", FAIRSHARE_COLLECTOR, reason)
        self._skip_reason = reason

    def _fairshare(self) -> dict[str, tuple[float, float, float]] | None:
        """sshare's figures, or ``None`` when accounting is not there (logged once)."""
        if self.commands is None:
            self._skip("Slurm's commands are not configured (scontrol and sshare read it)")
            return None
        try:
            gap = accounting_gap(read_config(self.commands))
        except SourceError as exc:
            self._skip(f"cannot read slurmctld's configuration: {exc}")
            return None
        self._skip(gap)
        return None if gap else read_fairshare(self.commands)

    def collect(self) -> Iterator[Metric]:
        """One scrape: the fair-share figures (where configured), then the queue."""
        success = spec("toposcope_scrape_collector_success").family()
        duration = spec("toposcope_scrape_collector_duration_seconds").family()
        weights: dict[str, float] = {}
        started = self._clock()
        try:
            figures = self._fairshare()
        except SourceError as exc:
            LOG.error("collector=%s failed: %s", FAIRSHARE_COLLECTOR, exc)
            success.add_metric([FAIRSHARE_COLLECTOR], 0.0)
            duration.add_metric([FAIRSHARE_COLLECTOR], self._clock() - started)
        else:
            if figures is not None:
                weights = {account: shares for account, (_, shares, _) in figures.items()}
                yield from accounting_families(figures)
                success.add_metric([FAIRSHARE_COLLECTOR], 1.0)
                duration.add_metric([FAIRSHARE_COLLECTOR], self._clock() - started)
        started = self._clock()
        try:
            snapshot = queue_snapshot(self.reader.read(), weights)
        except SourceError as exc:
            LOG.error(
                "collector=%s failed reading %s: %s", QUEUE_COLLECTOR, self.reader.source, exc
            )
            success.add_metric([QUEUE_COLLECTOR], 0.0)
        else:
            yield from queue_families(snapshot)
            success.add_metric([QUEUE_COLLECTOR], 1.0)
        duration.add_metric([QUEUE_COLLECTOR], self._clock() - started)
        yield success
        yield duration


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


def make_app(registry: CollectorRegistry, source: str) -> Callable[..., Iterable[bytes]]:
    """The exporter's WSGI application: ``/metrics``, ``/-/healthy``, ``/-/ready``, ``/``."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            output = generate_latest(registry)
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
