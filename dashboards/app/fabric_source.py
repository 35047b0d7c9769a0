"""``toposcope dash``'s fabric options: the network fabric the fabric page draws.

One of ``--fabric-file FILE`` (a fabric YAML or JSON file, as ``toposcope fabric show
--file`` reads and ``--format json`` writes), ``--fabric-slurm-topology FILE`` (Slurm's
``topology.conf``) or ``--fabric-ibnetdiscover FILE``. Any other source ``fabric show`` reads
(Kubernetes node labels, the API server) becomes a file with ``toposcope fabric show ...
--format json > fabric.json``. The file is read and checked once, at start: a malformed one
stops the app with ``file:line`` (exit 2), never a page that fails later.
"""

from __future__ import annotations

import argparse

from toposcope.fabric.model import Fabric
from toposcope.fabric.sources import SOURCES, load_fabric

#: option -> the destination ``toposcope.fabric.sources.load_fabric`` reads
FABRIC_OPTIONS = {
    "--fabric-file": "fabric_file",
    "--fabric-slurm-topology": "slurm_topology",
    "--fabric-ibnetdiscover": "ibnetdiscover",
}


def add_fabric_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the one-of-them fabric options (none: the fabric page says how to add one)."""
    group = parser.add_argument_group("network fabric (the fabric page; at most one)")
    exclusive = group.add_mutually_exclusive_group()
    for option, dest in FABRIC_OPTIONS.items():
        exclusive.add_argument(option, dest=dest, metavar="FILE", help=SOURCES[dest])


def fabric_from_args(args: argparse.Namespace) -> Fabric | None:
    """The fabric the options of ``args`` name, read and checked now; ``None`` without one."""
    chosen = {dest: getattr(args, dest, None) for dest in FABRIC_OPTIONS.values()}
    if not any(chosen.values()):
        return None
    source = argparse.Namespace(
        **chosen,
        kubernetes_nodes=None,
        kubernetes=False,
        kueue_topology=None,
        kueue_topology_name=None,
        node_selector=None,
        kubeconfig=None,
    )
    return load_fabric(source)


def describe_fabric(fabric: Fabric | None) -> str:
    """The fabric in a few words, for the start-up log line."""
    if fabric is None:
        return "no fabric (the fabric page says how to give one)"
    return f"fabric of {len(fabric.switches):,} switches, {len(fabric.nodes):,} nodes"
