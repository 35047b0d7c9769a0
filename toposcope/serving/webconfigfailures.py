"""How many times this process refused to reload its web configuration file, published as
``toposcope_web_config_reload_failures_total`` (:mod:`toposcope.serving.selfmetrics`), as Prometheus
publishes whether its own last configuration reload worked.

One count per process (:data:`RELOAD_FAILURES`): a daemon reads one ``--web.config.file``,
and a refusal is decided where the file is read (:mod:`toposcope.serving.livewebconfig`), far from
the registry that publishes it. The count only grows, so tests compare it before and after.
"""

from __future__ import annotations

import threading


class FailureCount:
    """A thread-safe count that only grows."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0

    def add(self) -> None:
        """Count one more failure."""
        with self._lock:
            self._value += 1

    @property
    def value(self) -> int:
        """The failures counted so far."""
        with self._lock:
            return self._value


#: Refused web configuration reloads since this process started (a file that no longer
#: reads, or one the reload rules refuse).
RELOAD_FAILURES = FailureCount()
