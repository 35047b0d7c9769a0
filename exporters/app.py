"""Assemble the exporter: build the selected collectors, serve them over HTTP or print once.

The HTTP side follows node_exporter: ``/metrics`` serves every enabled collector and accepts
``collect[]=NAME`` / ``exclude[]=NAME`` query parameters to scrape a subset, and always adds
the exporter's own ``process_*`` and ``toposcope_build_info`` (:mod:`toposcope.serving.selfmetrics`,
on a registry of its own). The answer is gzip for a scraper that accepts it, made here
(:func:`toposcope.serving.httpgzip.encode_answer`) since the workload sample is kept compressed.
``/`` is a small landing page; ``/-/healthy`` answers 200. Nothing goes through
prometheus_client's process-wide default registry; the text is written by
:mod:`toposcope.exporters.exposition`.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.core import Metric

from toposcope import __version__
from toposcope.catalogue import spec
from toposcope.config import ExporterConfig
from toposcope.errors import ConfigError, UsageError
from toposcope.exporters.context import CollectorContext
from toposcope.exporters.exposition import joined, render_chunks
from toposcope.exporters.registry import CollectorEntry
from toposcope.exporters.runner import BrokenCollector, NamedCollector, ScrapeRunner
from toposcope.serving.httpgzip import encode_answer, plain_chunks
from toposcope.serving.httpserver import HttpServer
from toposcope.serving.selfmetrics import BuildInfoCollector as DaemonBuildInfo
from toposcope.serving.selfmetrics import process_registry

LOG = logging.getLogger("toposcope.exporter")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class BuildInfoCollector:
    """Publishes ``toposcope_exporter_build_info`` (version and reported hostname), its family
    built once: neither changes while the exporter runs.
    """

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname
        self.family = spec("toposcope_exporter_build_info").family()
        self.family.add_metric([__version__, hostname], 1.0)

    def collect(self) -> Iterator[Metric]:
        """Yield the single build-info sample (the same family every time)."""
        yield self.family


def build_runner(
    config: ExporterConfig,
    entries: Sequence[CollectorEntry],
    context: CollectorContext | None = None,
) -> ScrapeRunner:
    """Build each selected collector once.

    A collector whose construction fails because of bad configuration stops start-up
    (:class:`ConfigError`); any other failure (a missing library, an unreadable source) is
    kept as a :class:`BrokenCollector`, so the scrape shows it failing while the other
    collectors serve.
    """
    ctx = context if context is not None else CollectorContext(config)
    built: list[NamedCollector] = []
    for entry in entries:
        try:
            collector = entry.factory(ctx)
        except (ConfigError, UsageError):
            raise
        except Exception as exc:
            LOG.error("collector=%s cannot start: %s: %s", entry.name, type(exc).__name__, exc)
            built.append(NamedCollector(entry.name, BrokenCollector(exc)))
            continue
        built.append(NamedCollector(entry.name, collector))
    return ScrapeRunner(built)


def render_scrape(runner: ScrapeRunner, hostname: str) -> list[bytes]:
    """One scrape of ``runner`` in the Prometheus text format, as the byte chunks an HTTP
    answer writes one after the other (the workload sampler's text is not copied: it is a
    gzip member, see :func:`toposcope.serving.httpgzip.encode_answer`).
    """
    return render_chunks(chain(runner.collect(), BuildInfoCollector(hostname).collect()))


def render(runner: ScrapeRunner, hostname: str) -> bytes:
    """One scrape of ``runner`` in the Prometheus text format, in one piece (``--print``)."""
    return b"".join(plain_chunks(render_scrape(runner, hostname)))


def _landing_page(runner: ScrapeRunner) -> bytes:
    items = "".join(f"<li>{html.escape(name)}</li>" for name in runner.names())
    body = (
        "<!doctype html><html><head><title>toposcope exporter</title></head><body>"
        f"<h1>toposcope exporter {html.escape(__version__)}</h1>"
        '<p><a href="metrics">/metrics</a> (use <code>collect[]=NAME</code> or '
        "<code>exclude[]=NAME</code> to scrape a subset)</p>"
        f"<p>Enabled collectors:</p><ul>{items}</ul></body></html>"
    )
    return body.encode()


def make_wsgi_app(runner: ScrapeRunner, hostname: str) -> Callable[..., Iterable[bytes]]:
    """The exporter's WSGI application.

    What does not change while the exporter runs is rendered here, once: both build-info
    families and the collector names a ``collect[]`` parameter may give. A scrape collects
    the chosen collectors and ``process_*`` only.
    """
    process = process_registry()
    exporter_info = render_chunks(BuildInfoCollector(hostname).collect())
    daemon_info = render_chunks(DaemonBuildInfo().collect())
    known = frozenset(runner.names())

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            query = parse_qs(environ.get("QUERY_STRING", ""))
            include = query.get("collect[]", [])
            exclude = query.get("exclude[]", [])
            unknown = sorted(set(include) - known)
            if unknown:
                start_response("400 Bad Request", [("Content-Type", "text/plain")])
                return [f"unknown collector(s): {', '.join(unknown)}\n".encode()]
            chosen = runner.subset(include, exclude) if include or exclude else runner
            chunks = joined(
                [
                    *render_chunks(chosen.collect()),
                    *exporter_info,
                    *render_chunks(process.collect()),
                    *daemon_info,
                ]
            )
            headers, body = encode_answer(chunks, environ.get("HTTP_ACCEPT_ENCODING", ""))
            start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST), *headers])
            return body
        if path in ("/-/healthy", "/-/ready"):
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"OK\n"]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [_landing_page(runner)]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    return app


class ExporterServer(HttpServer):
    """The exporter's HTTP server: :func:`make_wsgi_app` on ``address``.

    Everything it serves is read-only, so any method but ``GET`` and ``HEAD`` answers 405.
    """

    def __init__(self, runner: ScrapeRunner, hostname: str, address: str) -> None:
        super().__init__(make_wsgi_app(runner, hostname), address, methods=("GET", "HEAD"))
