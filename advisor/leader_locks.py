"""The two locks the advisor's leader election can hold (:mod:`toposcope.advisor.leader_election`).

* :class:`LeaseLock`: a ``coordination.k8s.io/v1`` ``Lease``, as client-go's
  ``resourcelock.LeaseLock``: ``spec.holderIdentity``, ``leaseDurationSeconds``,
  ``acquireTime``, ``renewTime`` and ``leaseTransitions``; every write is a ``PUT`` carrying
  the ``metadata.resourceVersion`` read, so that of two replicas racing for it the API server
  lets one win (the other gets 409 Conflict). A lease held by another replica counts as
  expired once it has not changed for its ``leaseDurationSeconds`` *as this replica observed
  it* (its own monotonic clock, never the timestamps, so clock skew does not matter).
* :class:`FileLock`: where there is no API server (two processes on one host sharing the
  audit log), an exclusive ``flock`` on a file beside the audit database. The kernel frees it
  when its holder dies, however it dies; the holder writes its identity in the file so that
  a standby can name the leader.
"""

from __future__ import annotations

import fcntl
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toposcope.kubeapi.client import KubeApi, KubeApiStatusError

#: the largest identity read back from a lock file
MAX_IDENTITY = 256


def micro_time(moment: datetime | None = None) -> str:
    """A Kubernetes ``MicroTime`` (RFC 3339 with microseconds, UTC)."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lock_file_of(audit_db: Path) -> Path:
    """The leader lock file of an audit database: beside it, ``<name>.leader.lock``."""
    return audit_db.with_name(audit_db.name + ".leader.lock")


class FileLock:
    """An exclusive ``flock`` on ``path`` (module docstring), held as ``identity``."""

    def __init__(self, path: Path, identity: str) -> None:
        self.path = path
        self.identity = identity
        self._fd: int | None = None
        self._held = False

    def describe(self) -> str:
        """The lock, for logs."""
        return f"lock file {self.path}"

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return self._fd

    def acquire_or_renew(self) -> bool:
        """Hold the lock (once held, the kernel keeps it for this process until it ends)."""
        if self._held:
            return True
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self._held = True
        os.ftruncate(fd, 0)
        os.pwrite(fd, self.identity.encode(), 0)
        os.fsync(fd)
        return True

    def holder(self) -> str:
        """The identity the holder wrote in the file (``""`` before anyone did)."""
        if self._held:
            return self.identity
        try:
            with open(self.path, "rb") as handle:
                text = handle.read(MAX_IDENTITY).decode(errors="replace")
        except OSError:
            return ""
        return "".join(c for c in text if c.isprintable()).strip()

    def release(self) -> None:
        """Empty the file and unlock it."""
        if self._fd is None:
            return
        if self._held:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            self._held = False
        os.close(self._fd)
        self._fd = None


class LeaseLock:
    """The ``Lease`` ``namespace/name`` through ``api``, held as ``identity`` for
    ``lease_duration`` seconds at a time (module docstring).
    """

    def __init__(
        self, api: KubeApi, namespace: str, name: str, identity: str, lease_duration: float
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self._observed: dict[str, Any] = {}
        self._observed_at = 0.0
        self._version = ""

    @property
    def path(self) -> str:
        """The lease's API path."""
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    def describe(self) -> str:
        """The lock, for logs."""
        return f"lease {self.namespace}/{self.name}"

    def _spec(self, acquire_time: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": acquire_time,
            "renewTime": micro_time(),
            "leaseTransitions": transitions,
        }

    def _observe(self, lease: dict[str, Any]) -> dict[str, Any]:
        spec: dict[str, Any] = dict(lease.get("spec") or {})
        if spec != self._observed:
            self._observed = spec
            self._observed_at = time.monotonic()
        self._version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        return spec

    def acquire_or_renew(self) -> bool:
        """Create the lease, renew it, or take it over once it expired; whether held now.

        A 409 (someone else wrote first) is a lost race, not an error.
        """
        try:
            lease = self.api.get(self.path)
        except KubeApiStatusError as exc:
            if exc.code != 404:
                raise
            return self._create()
        spec = self._observe(lease)
        holder = str(spec.get("holderIdentity") or "")
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        mine = holder == self.identity
        if holder and not mine and time.monotonic() < self._observed_at + duration:
            return False
        now = micro_time()
        transitions = int(spec.get("leaseTransitions") or 0)
        wanted = (
            self._spec(str(spec.get("acquireTime") or now), transitions)
            if mine
            else self._spec(now, transitions + 1)
        )
        return self._write(lease, wanted)

    def _create(self) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": self._spec(micro_time(), 0),
        }
        collection = self.path.rsplit("/", 1)[0]
        try:
            created = self.api.request("POST", collection, body)
        except KubeApiStatusError as exc:
            if exc.code == 409:
                return False
            raise
        self._observe(created)
        return True

    def _write(self, lease: dict[str, Any], spec: dict[str, Any]) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {**(lease.get("metadata") or {}), "resourceVersion": self._version},
            "spec": spec,
        }
        try:
            written = self.api.request("PUT", self.path, body)
        except KubeApiStatusError as exc:
            if exc.code == 409:
                return False
            raise
        self._observe(written)
        return True

    def holder(self) -> str:
        """The holder of the lease as last read."""
        return str(self._observed.get("holderIdentity") or "")

    def release(self) -> None:
        """Hand the lease back (client-go's ``ReleaseOnCancel``): no holder, one second."""
        if self.holder() != self.identity:
            return
        lease = self.api.get(self.path)
        spec = self._observe(lease)
        if spec.get("holderIdentity") != self.identity:
            return
        now = micro_time()
        released = {
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": int(spec.get("leaseTransitions") or 0),
        }
        self._write(lease, released)
