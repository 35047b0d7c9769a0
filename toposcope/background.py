"""A daemon thread that loops until told to stop: the lifecycle every background worker shares.

The exporter's workload sampler, its NVML workers and the NodeResourceTopology publisher each
run one loop on a daemon thread; :class:`BackgroundLoop` starts it once, says whether it is
alive, and stops it within a timeout (a loop stuck in a call is reported, not killed). A
subclass writes :meth:`BackgroundLoop._run`, which waits on ``self._stop`` between rounds.
"""

from __future__ import annotations

import threading


class BackgroundLoop:
    """Runs :meth:`_run` on a daemon thread named :attr:`name` between :meth:`start` and
    :meth:`stop`.
    """

    name = "background"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (once; a stopped loop stays stopped)."""
        if self._thread is not None or self._stop.is_set():
            return
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> bool:
        """Ask the thread to stop and wait for it; ``False`` if it is still stuck in a call."""
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        """One loop until ``self._stop`` is set (subclasses write it)."""
        raise NotImplementedError
