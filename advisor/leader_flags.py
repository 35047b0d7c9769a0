"""The ``--leader-elect*`` options of ``toposcope advisor serve``, named as Kubernetes
components name them (kube-scheduler, kube-controller-manager, the descheduler).

``--leader-elect`` turns the election on; ``--leader-elect-resource-lock`` picks the lock:
``leases`` (a ``Lease`` named ``--leader-elect-resource-name`` in
``--leader-elect-resource-namespace``, through the pod's service account or
``--leader-elect-kubeconfig``) or ``file`` (a ``flock`` beside the audit database); the
default is ``leases`` inside a pod and ``file`` elsewhere. The three periods are
``--leader-elect-lease-duration``, ``--leader-elect-renew-deadline`` and
``--leader-elect-retry-period``.
"""

from __future__ import annotations

import argparse
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

from toposcope.advisor.leader_election import (
    DEFAULT_LEASE_DURATION,
    DEFAULT_RENEW_DEADLINE,
    DEFAULT_RETRY_PERIOD,
    ElectionSettings,
    LeaderLock,
)
from toposcope.advisor.leader_locks import FileLock, LeaseLock, lock_file_of
from toposcope.advisor.loaders.base import parse_duration
from toposcope.errors import ConfigError, UsageError
from toposcope.kubeapi.client import SERVICE_ACCOUNT_DIR, connect

DEFAULT_LEASE_NAME = "toposcope-advisor"
#: the lock kinds; ``auto`` is ``leases`` in a pod, ``file`` elsewhere
LOCKS = ("auto", "leases", "file")


@dataclass(frozen=True)
class Election:
    """The lock to campaign for and the periods to campaign with."""

    lock: LeaderLock
    settings: ElectionSettings


def add_leader_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``--leader-elect*`` options (module docstring)."""
    group = parser.add_argument_group("leader election (several replicas, one acts)")
    group.add_argument(
        "--leader-elect",
        action="store_true",
        help="run as one of several replicas: only the holder of the lock applies and reverts, "
        "the others answer reads and refuse changes with 503 until they take over",
    )
    group.add_argument(
        "--leader-elect-resource-lock",
        choices=LOCKS,
        default="auto",
        help="leases (a coordination.k8s.io/v1 Lease), file (a flock beside --audit-db); "
        "auto (default): leases in a pod, file elsewhere",
    )
    group.add_argument(
        "--leader-elect-resource-name",
        "--leader-elect-lease-name",
        default=DEFAULT_LEASE_NAME,
        metavar="NAME",
        help=f"name of the Lease (default {DEFAULT_LEASE_NAME})",
    )
    group.add_argument(
        "--leader-elect-resource-namespace",
        "--leader-elect-namespace",
        metavar="NAMESPACE",
        help="namespace of the Lease (default: the pod's own, else default)",
    )
    group.add_argument(
        "--leader-elect-kubeconfig",
        metavar="FILE",
        help="kubeconfig of the API server holding the Lease (default: the pod's service account)",
    )
    for option, default, what in (
        ("lease-duration", DEFAULT_LEASE_DURATION, "how long a standby waits for a silent leader"),
        ("renew-deadline", DEFAULT_RENEW_DEADLINE, "how long the leader tries to renew"),
        ("retry-period", DEFAULT_RETRY_PERIOD, "time between attempts to take or renew the lock"),
    ):
        group.add_argument(
            f"--leader-elect-{option}",
            default=f"{default:g}s",
            metavar="DURATION",
            help=f"{what} (default {default:g}s)",
        )


def _seconds(option: str, text: str) -> float:
    try:
        return parse_duration(text)
    except ConfigError as exc:
        raise UsageError(f"--leader-elect-{option}: {exc}") from exc


def identity() -> str:
    """This replica's identity: its host name and a random suffix, as client-go makes it."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def _namespace(given: str | None) -> str:
    if given:
        return given
    try:
        return (SERVICE_ACCOUNT_DIR / "namespace").read_text(encoding="utf-8").strip() or "default"
    except OSError:
        return "default"


def election_from_args(args: argparse.Namespace, audit_db: Path) -> Election | None:
    """The election the options describe (``None`` without ``--leader-elect``)."""
    if not args.leader_elect:
        return None
    settings = ElectionSettings(
        lease_duration=_seconds("lease-duration", args.leader_elect_lease_duration),
        renew_deadline=_seconds("renew-deadline", args.leader_elect_renew_deadline),
        retry_period=_seconds("retry-period", args.leader_elect_retry_period),
    )
    kind = args.leader_elect_resource_lock
    if kind == "auto":
        in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) or args.leader_elect_kubeconfig
        kind = "leases" if in_pod else "file"
    me = identity()
    if kind == "file":
        return Election(FileLock(lock_file_of(audit_db), me), settings)
    api = connect(args.leader_elect_kubeconfig, timeout=settings.renew_deadline)
    namespace = _namespace(args.leader_elect_resource_namespace)
    lock = LeaseLock(api, namespace, args.leader_elect_resource_name, me, settings.lease_duration)
    return Election(lock, settings)
