"""Leader election for the advisor service: of several replicas, exactly one acts at a time.

The shape is client-go's ``leaderelection`` (what the descheduler and controller-runtime
use): a lock (:class:`LeaderLock`) that one replica holds; a candidate tries to take it
every ``retry_period``; the leader renews it every ``retry_period`` and gives up when it
has not managed to for ``renew_deadline``; a standby takes an abandoned lock over once
``lease_duration`` has passed without a renewal (a Kubernetes ``Lease``,
:mod:`toposcope.advisor.leader_locks`) or at once when the kernel freed it (a ``flock`` on a
file beside the audit log, where there is no API server).

:class:`LeaderElector` runs that loop in a thread and calls ``on_started_leading`` in a
thread of its own (the service settles what the last leader left unfinished there, which may
wait on the resource manager, while renewals go on) and ``on_stopped_leading`` when the
lease is lost. Every transition is logged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from toposcope.errors import ConfigError, UsageError

LOG = logging.getLogger("toposcope.advisor.leader")

#: client-go's defaults (kube-scheduler, kube-controller-manager, the descheduler)
DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0


@dataclass(frozen=True)
class ElectionSettings:
    """How long a lease lasts, how long a leader keeps trying to renew it, how often
    candidates and the leader try (seconds; see the module docstring).
    """

    lease_duration: float = DEFAULT_LEASE_DURATION
    renew_deadline: float = DEFAULT_RENEW_DEADLINE
    retry_period: float = DEFAULT_RETRY_PERIOD

    def __post_init__(self) -> None:
        """Refuse what client-go refuses: each period shorter than the one before."""
        if self.retry_period <= 0:
            raise UsageError("--leader-elect-retry-period must be greater than zero")
        if self.renew_deadline <= self.retry_period:
            raise UsageError(
                "--leader-elect-renew-deadline must be greater than --leader-elect-retry-period"
            )
        if self.lease_duration <= self.renew_deadline:
            raise UsageError(
                "--leader-elect-lease-duration must be greater than --leader-elect-renew-deadline"
            )

    @property
    def retry_after(self) -> int:
        """Whole seconds a refused client should wait: one lease, when a standby may lead."""
        return max(1, round(self.lease_duration))


class LeaderLock(Protocol):
    """Something one replica at a time can hold (see :mod:`toposcope.advisor.leader_locks`)."""

    identity: str

    def describe(self) -> str:
        """What the lock is, for logs (``lease toposcope/toposcope-advisor``)."""
        ...

    def acquire_or_renew(self) -> bool:
        """Take the lock, or renew it when held; whether this replica holds it now.

        Raises :class:`~toposcope.errors.ConfigError` (or :class:`OSError`) when the lock
        could not be read or written; the elector counts that as a failed attempt.
        """
        ...

    def holder(self) -> str:
        """The identity of the replica known to hold the lock (``""`` when none is known)."""
        ...

    def release(self) -> None:
        """Give the lock up (a standby takes over at once rather than after a lease)."""
        ...


class LeaderElector:
    """Runs the election over ``lock`` (module docstring) in a daemon thread."""

    def __init__(
        self,
        lock: LeaderLock,
        settings: ElectionSettings,
        on_started_leading: Callable[[], object],
        on_stopped_leading: Callable[[], None],
    ) -> None:
        self.lock = lock
        self.settings = settings
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self._leading = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._renewed = 0.0
        self._seen_holder = ""

    @property
    def leading(self) -> bool:
        """Whether this replica holds the lock."""
        return self._leading.is_set()

    def holder(self) -> str:
        """Who leads, as far as this replica knows (``""``: nobody known)."""
        return self.lock.identity if self.leading else self.lock.holder()

    def start(self) -> None:
        """Campaign in a daemon thread until :meth:`stop`."""
        LOG.info("leader election: %s as %s", self.lock.describe(), self.lock.identity)
        self._thread = threading.Thread(target=self._run, daemon=True, name="leader-election")
        self._thread.start()

    def stop(self) -> None:
        """Stop campaigning and release the lock when held (a standby then takes over)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.renew_deadline + 5)
        if self._leading.is_set():
            self._leading.clear()
            try:
                self.lock.release()
            except (ConfigError, OSError) as exc:
                LOG.warning("could not release %s: %s", self.lock.describe(), exc)
            else:
                LOG.info("released %s", self.lock.describe())

    def _attempt(self) -> bool:
        try:
            return self.lock.acquire_or_renew()
        except (ConfigError, OSError) as exc:
            LOG.warning("leader election: %s: %s", self.lock.describe(), exc)
            return False

    def _run(self) -> None:
        while not self._stop.is_set():
            held = self._attempt()
            now = time.monotonic()
            if held:
                self._renewed = now
                if not self._leading.is_set():
                    self._start_leading()
            elif self._leading.is_set():
                if now - self._renewed >= self.settings.renew_deadline:
                    self._stop_leading()
            else:
                self._note_holder()
            self._stop.wait(self.settings.retry_period)

    def _start_leading(self) -> None:
        self._leading.set()
        LOG.info("became the leader (%s, %s)", self.lock.describe(), self.lock.identity)
        threading.Thread(
            target=self.on_started_leading, daemon=True, name="leader-takeover"
        ).start()

    def _stop_leading(self) -> None:
        self._leading.clear()
        LOG.error(
            "lost the leadership: %s not renewed for %gs",
            self.lock.describe(),
            self.settings.renew_deadline,
        )
        self.on_stopped_leading()

    def _note_holder(self) -> None:
        holder = self.lock.holder()
        if holder != self._seen_holder:
            self._seen_holder = holder
            LOG.info("standing by: the leader is %s", holder or "unknown")
