"""The options that say where a node's pod names come from, shared by the exporter and the
node agent so both name a container's pod the same way from the same sources.
"""

from __future__ import annotations

import argparse

from toposcope.host.podresources.runtime_state import DEFAULT_STATE_DIRS
from toposcope.host.podresources.source import DEFAULT_SOCKET


def add_pod_naming_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``--kubelet.pod-resources-socket`` and ``--path.runtime-state``.

    They land in ``args.pod_resources_socket`` (``None``: the default socket, where it
    exists) and ``args.runtime_state`` (a list; empty: the default state directories).
    """
    parser.add_argument(
        "--kubelet.pod-resources-socket",
        dest="pod_resources_socket",
        metavar="PATH",
        help="the kubelet's pod-resources socket, for pod/namespace/container names and "
        f"allocations (default {DEFAULT_SOCKET}, used where it exists)",
    )
    parser.add_argument(
        "--path.runtime-state",
        dest="runtime_state",
        action="append",
        default=[],
        metavar="DIR",
        help="container runtime state directory on the host (under --path.rootfs) whose "
        "containers' config.json name their pods; repeatable (default: "
        + ", ".join(DEFAULT_STATE_DIRS)
        + ")",
    )
