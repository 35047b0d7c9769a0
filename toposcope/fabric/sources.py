"""Where a command reads a fabric from: one option per format, one loader.

``toposcope fabric show`` and ``toposcope slurm topology-conf`` both take exactly one of
``--slurm-topology FILE``, ``--ibnetdiscover FILE`` or ``--file FILE`` (YAML or JSON).
Only the reader of the chosen format is imported.
"""

from __future__ import annotations

import argparse

from toposcope.errors import UsageError
from toposcope.fabric.model import Fabric

#: option destination -> what the option reads
SOURCES = {
    "slurm_topology": "Slurm's topology.conf (tree or block form)",
    "ibnetdiscover": "the output of ibnetdiscover (InfiniBand switches, HCAs and links)",
    "fabric_file": "a fabric YAML or JSON file (docs/fabric.md; fabric show --format json)",
}


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the one-of-them source options on ``parser``."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--slurm-topology", dest="slurm_topology", metavar="FILE", help=SOURCES["slurm_topology"]
    )
    group.add_argument("--ibnetdiscover", metavar="FILE", help=SOURCES["ibnetdiscover"])
    group.add_argument("--file", dest="fabric_file", metavar="FILE", help=SOURCES["fabric_file"])


def load_fabric(args: argparse.Namespace) -> Fabric:
    """The fabric the source option of ``args`` names (:class:`UsageError` without one)."""
    # each reader is imported only when its format is asked for (PyYAML for --file only)
    if args.slurm_topology:
        from toposcope.fabric.slurmconf import read_topology_conf  # noqa: PLC0415

        return read_topology_conf(args.slurm_topology)
    if args.ibnetdiscover:
        from toposcope.fabric.ibnetdiscover import read_ibnetdiscover  # noqa: PLC0415

        return read_ibnetdiscover(args.ibnetdiscover)
    if args.fabric_file:
        from toposcope.fabric.yamlfile import read_fabric_file  # noqa: PLC0415

        return read_fabric_file(args.fabric_file)
    raise UsageError("name the fabric: --slurm-topology FILE, --ibnetdiscover FILE or --file FILE")
