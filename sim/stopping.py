"""Stop requests (SIGTERM, SIGINT) for the simulator's main thread, at any moment of its life.

:class:`StopSignals` turns the first SIGTERM or SIGINT into a :class:`StopRequested`
exception raised in the main thread wherever it is (loading the scenario, writing trees,
serving), so that the caller's ``finally`` blocks clean up; later signals are ignored
while it does. Inside :meth:`StopSignals.deferred` the exception waits until the block has
ended, for steps that must not be cut in half (creating the state directory and
remembering its name).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequested(BaseException):
    """A stop signal arrived: the main thread unwinds and cleans up."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"received signal {signum}")
        self.signum = signum


class StopSignals:
    """While entered (in the main thread), SIGTERM and SIGINT raise :class:`StopRequested`
    once; the previous handlers come back on exit. Outside the main thread it does nothing.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._deferring = 0
        self._held = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            return
        self.received = signum
        if self._deferring:
            self._held = True
        else:
            raise StopRequested(signum)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold a stop request back until the block has ended (then raise it)."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        if self._held and not self._deferring and self.received is not None:
            self._held = False
            raise StopRequested(self.received)
