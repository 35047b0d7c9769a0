"""Waiting for a condition with a deadline: the one loop every part that starts or watches a
process uses, never a bare sleep on timing luck (the Slurm daemons of a local cluster, the
development toolkit of tests, benchmarks and the local stack).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class NotReadyError(TimeoutError):
    """A condition or a server was not ready by its deadline; the message says which."""


def wait_until(
    check: Callable[[], T],
    deadline_s: float = 30.0,
    *,
    interval_s: float = 0.2,
    what: str = "condition",
    errors: tuple[type[BaseException], ...] = (OSError, ValueError),
) -> T:
    """Call ``check`` until it returns something truthy, and return that.

    ``errors`` raised by ``check`` count as "not yet" (a refused connection, a half-written
    file); at the deadline :class:`NotReadyError` names ``what`` and the last such error.
    """
    end = time.monotonic() + deadline_s
    last_error: BaseException | None = None
    while True:
        try:
            value = check()
        except errors as exc:
            last_error = exc
        else:
            if value:
                return value
        if time.monotonic() >= end:
            raise NotReadyError(f"{what} not met within {deadline_s}s (last error: {last_error})")
        time.sleep(interval_s)
