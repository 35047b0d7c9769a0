"""The options of ``--resource-manager kubernetes`` and the limits they set.

Declared here and found by the advisor through the ``toposcope.resource_manager_options``
entry point; their destinations start with ``kubernetes_`` so that the advisor hands them to
this backend's factory.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from toposcope.errors import UsageError

#: the most any ``--kube-max-*`` limit accepts
MAX_LIMIT = 1000


@dataclass(frozen=True)
class KubeLimits:
    """How many evictions one run (one backend) may make in all, per node and per namespace."""

    evictions: int = 3
    per_node: int = 1
    per_namespace: int = 1


def add_manager_options(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """Declare ``--kubeconfig``, ``--kube-context``, ``--kube-timeout`` and the limits."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("Kubernetes actions (--resource-manager kubernetes)")
    group.add_argument(
        "--kubeconfig",
        dest="kubernetes_kubeconfig",
        default=default(None),
        metavar="FILE",
        help="kubeconfig file (default: $KUBECONFIG, the in-cluster service account, "
        "~/.kube/config)",
    )
    group.add_argument(
        "--kube-context",
        dest="kubernetes_context",
        default=default(None),
        metavar="NAME",
        help="kubeconfig context to use (default: the kubeconfig's current context)",
    )
    group.add_argument(
        "--kube-timeout",
        dest="kubernetes_timeout",
        type=float,
        default=default(30.0),
        metavar="SECONDS",
        help="timeout of each API request (30)",
    )
    group.add_argument(
        "--kube-kueue-levels",
        dest="kubernetes_kueue_levels",
        default=default(None),
        metavar="LABEL,...",
        help="the node labels of the Kueue Topology's levels, highest first, for fabric "
        "placements (default: read the cluster's only Topology; needed for --dry-run without "
        "an API server)",
    )
    limits = KubeLimits()
    for name, value, what in (
        ("max-evictions", limits.evictions, "evictions per run"),
        ("max-evictions-per-node", limits.per_node, "evictions per node and run"),
        ("max-evictions-per-namespace", limits.per_namespace, "evictions per namespace and run"),
    ):
        group.add_argument(
            f"--kube-{name}",
            dest=f"kubernetes_{name.replace('-', '_')}",
            type=int,
            default=default(value),
            metavar="N",
            help=f"{what} ({value}; 0: none)",
        )


def kueue_levels_from(options: dict[str, object]) -> tuple[str, ...]:
    """The ``--kube-kueue-levels`` labels (none when not given); a :class:`UsageError` for a
    malformed list.
    """
    from toposcope.kube.fabric_steer import parse_levels  # noqa: PLC0415

    text = options.get("kubernetes_kueue_levels")
    if not text:
        return ()
    try:
        return parse_levels(str(text))
    except ValueError as exc:
        raise UsageError(f"--kube-kueue-levels: {exc}") from None


def limits_from(options: dict[str, object]) -> KubeLimits:
    """The limits the parsed options give (:class:`UsageError` for one out of range)."""
    base = KubeLimits()
    values = {
        "evictions": options.get("kubernetes_max_evictions", base.evictions),
        "per_node": options.get("kubernetes_max_evictions_per_node", base.per_node),
        "per_namespace": options.get("kubernetes_max_evictions_per_namespace", base.per_namespace),
    }
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT:
            raise UsageError(f"--kube-max-evictions limits must be from 0 to {MAX_LIMIT} ({key})")
    return KubeLimits(**values)  # type: ignore[arg-type]
