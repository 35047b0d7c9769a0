"""What every toposcope daemon says about itself on ``/metrics``: prometheus_client's
``process_*`` families (resident and virtual memory, CPU seconds, open and maximum file
descriptors, start time), ``toposcope_build_info`` (version, source revision, Python and
platform) and ``toposcope_web_config_reload_failures_total``, as node_exporter and
Prometheus publish ``process_*``, ``*_build_info`` and their configuration reloads' outcome.

Each daemon builds its own registry with :func:`daemon_registry`; nothing joins
prometheus_client's process-wide default registry, so importing this module registers
nothing and tests do not leak into each other.
"""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from toposcope import __version__
from toposcope.catalogue import spec
from toposcope.serving.httpgzip import WsgiApp
from toposcope.serving.webconfigfailures import RELOAD_FAILURES

#: The revision label when the installed distribution does not record one.
UNKNOWN = "unknown"


def installed_revision(distribution: str = "toposcope") -> str:
    """The version-control commit ``distribution`` was installed from, or :data:`UNKNOWN`.

    pip records it in the distribution's ``direct_url.json`` when installing from a
    repository URL; a wheel or an editable checkout records none.
    """
    try:
        text = metadata.distribution(distribution).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return UNKNOWN
    try:
        commit = json.loads(text or "{}").get("vcs_info", {}).get("commit_id")
    except (ValueError, AttributeError):
        return UNKNOWN
    return commit if isinstance(commit, str) and commit else UNKNOWN


def build_labels() -> dict[str, str]:
    """The labels of ``toposcope_build_info`` for this process, keyed by label name."""
    return {
        "version": __version__,
        "revision": installed_revision(),
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "os": sys.platform,
        "arch": platform.machine(),
    }


class BuildInfoCollector:
    """Publishes ``toposcope_build_info``: its labels are read and its family built once,
    when the collector is built, since nothing in it changes while the process runs.
    """

    def __init__(self) -> None:
        labels = build_labels()
        self.values = [labels[name] for name in spec("toposcope_build_info").labels]
        self.family = spec("toposcope_build_info").family()
        self.family.add_metric(self.values, 1.0)

    def collect(self) -> Iterator[Metric]:
        """Yield the single build-info sample (the same family every time)."""
        yield self.family


class ReloadFailuresCollector:
    """Publishes ``toposcope_web_config_reload_failures_total``, read on every collection
    from the process's count (:data:`toposcope.serving.webconfigfailures.RELOAD_FAILURES`).
    """

    def collect(self) -> Iterator[Metric]:
        """Yield the count of refused web configuration reloads."""
        family = spec("toposcope_web_config_reload_failures_total").family()
        family.add_metric([], float(RELOAD_FAILURES.value))
        yield family


def process_registry() -> CollectorRegistry:
    """A fresh registry holding what changes while this process runs: its ``process_*``
    families (read from ``/proc/self`` on every collection) and its refused web
    configuration reloads, for a daemon that renders its constant ``toposcope_build_info``
    once (:class:`BuildInfoCollector`).
    """
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    registry.register(ReloadFailuresCollector())
    return registry


def daemon_registry() -> CollectorRegistry:
    """A fresh registry holding this process's ``process_*`` and ``toposcope_build_info``."""
    registry = process_registry()
    registry.register(BuildInfoCollector())
    return registry


def with_self_metrics(app: WsgiApp, *extra: Collector) -> WsgiApp:
    """``app`` with ``GET /metrics`` answered from a :func:`daemon_registry` of its own
    (plus the ``extra`` collectors, e.g. the simulator's queue).

    For daemons whose application has no ``/metrics`` (the node agent, the simulator);
    every other request goes to ``app`` unchanged.
    """
    own = daemon_registry()
    for collector in extra:
        own.register(collector)

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        if environ.get("PATH_INFO") == "/metrics" and method in ("GET", "HEAD"):
            start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
            return [generate_latest(own)]
        return app(environ, start_response)

    return wrapped
