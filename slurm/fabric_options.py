"""``toposcope slurm exporter``'s fabric options: which fabric its ``slurm_fabric`` collector
measures multi-node jobs against.

One of ``--fabric-slurm-topology FILE`` (Slurm's own ``topology.conf``, tree or block form),
``--fabric-file FILE`` (a fabric YAML or JSON file, docs/fabric.md) or
``--fabric-ibnetdiscover FILE``; without one the collector is off. The fabric is read and
checked once at start (a malformed file is exit 2 naming its line), then indexed for the
per-scrape computation; restart the exporter to read a changed fabric.
"""

from __future__ import annotations

import argparse

from toposcope.fabric.spread import FabricIndex


def add_fabric_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the one-of-them fabric options on ``parser``."""
    group = parser.add_argument_group(
        "fabric (the slurm_fabric collector: how far each multi-node job is spread)"
    )
    one = group.add_mutually_exclusive_group()
    one.add_argument(
        "--fabric-slurm-topology",
        metavar="FILE",
        help="Slurm's topology.conf (tree or block form) describing the fabric",
    )
    one.add_argument(
        "--fabric-file", metavar="FILE", help="a fabric YAML or JSON file (docs/fabric.md)"
    )
    one.add_argument("--fabric-ibnetdiscover", metavar="FILE", help="the output of ibnetdiscover")


def load_exporter_fabric(args: argparse.Namespace) -> FabricIndex | None:
    """The indexed fabric the options name, or ``None`` when none is named."""
    # each reader is imported only when its format is asked for
    if args.fabric_slurm_topology:
        from toposcope.fabric.slurmconf import read_topology_conf  # noqa: PLC0415

        return FabricIndex(read_topology_conf(args.fabric_slurm_topology))
    if args.fabric_file:
        from toposcope.fabric.yamlfile import read_fabric_file  # noqa: PLC0415

        return FabricIndex(read_fabric_file(args.fabric_file))
    if args.fabric_ibnetdiscover:
        from toposcope.fabric.ibnetdiscover import read_ibnetdiscover  # noqa: PLC0415

        return FabricIndex(read_ibnetdiscover(args.fabric_ibnetdiscover))
    return None
