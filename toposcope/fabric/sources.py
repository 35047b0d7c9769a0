"""Where a command reads a fabric from: one option per format, one loader.

``toposcope fabric show`` and ``toposcope slurm topology-conf`` both take exactly one of
``--slurm-topology FILE``, ``--ibnetdiscover FILE``, ``--file FILE`` (YAML or JSON),
``--kubernetes-nodes FILE`` (with ``--kueue-topology FILE``) or ``--kubernetes`` (the API
server's nodes and Kueue Topology). Only the reader of the chosen format is imported.
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
    "kubernetes_nodes": "Kubernetes Node objects (kubectl get nodes -o yaml|json output), "
    "at the levels of --kueue-topology",
    "kubernetes": "the Kubernetes API server's nodes, at the levels of its Kueue Topology",
}


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the one-of-them source options on ``parser``."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--slurm-topology", dest="slurm_topology", metavar="FILE", help=SOURCES["slurm_topology"]
    )
    group.add_argument("--ibnetdiscover", metavar="FILE", help=SOURCES["ibnetdiscover"])
    group.add_argument("--file", dest="fabric_file", metavar="FILE", help=SOURCES["fabric_file"])
    group.add_argument("--kubernetes-nodes", metavar="FILE", help=SOURCES["kubernetes_nodes"])
    group.add_argument("--kubernetes", action="store_true", help=SOURCES["kubernetes"])
    kube = parser.add_argument_group("Kubernetes sources (--kubernetes-nodes, --kubernetes)")
    kube.add_argument(
        "--kueue-topology",
        metavar="FILE",
        help="a file holding the Kueue Topology (kueue.x-k8s.io) whose spec.levels name the "
        "node labels, highest level first (with --kubernetes-nodes)",
    )
    kube.add_argument(
        "--kueue-topology-name",
        metavar="NAME",
        help="which Topology to read (default: the only one there)",
    )
    kube.add_argument(
        "--node-selector",
        metavar="SELECTOR",
        help="list only the nodes this label selector matches (with --kubernetes; "
        "as kubectl get nodes -l)",
    )
    kube.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig file (with --kubernetes; default: $KUBECONFIG, the in-cluster "
        "service account, ~/.kube/config)",
    )


def load_fabric(args: argparse.Namespace) -> Fabric:
    """The fabric the source option of ``args`` names (:class:`UsageError` without one)."""
    _check_kubernetes_options(args)
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
    if args.kubernetes_nodes:
        from toposcope.fabric.kubernetes import read_kubernetes_files  # noqa: PLC0415

        return read_kubernetes_files(
            args.kubernetes_nodes, args.kueue_topology, args.kueue_topology_name
        )
    if args.kubernetes:
        from toposcope.fabric.kubernetes_api import read_kubernetes_api  # noqa: PLC0415

        return read_kubernetes_api(args.kubeconfig, args.kueue_topology_name, args.node_selector)
    raise UsageError(
        "name the fabric: --slurm-topology FILE, --ibnetdiscover FILE, --file FILE, "
        "--kubernetes-nodes FILE --kueue-topology FILE or --kubernetes"
    )


def describe_source(args: argparse.Namespace) -> str:
    """What the source option of ``args`` reads, in words (for a written file's header)."""
    if args.kubernetes_nodes:
        return f"{args.kubernetes_nodes} at the levels of {args.kueue_topology}"
    if args.kubernetes:
        return "the Kubernetes API server's nodes and Kueue Topology"
    return str(args.slurm_topology or args.ibnetdiscover or args.fabric_file)


def _check_kubernetes_options(args: argparse.Namespace) -> None:
    """Refuse a Kubernetes option that the chosen source does not use."""
    if args.kubernetes_nodes and not args.kueue_topology:
        raise UsageError("--kubernetes-nodes needs --kueue-topology FILE (the levels)")
    if args.kueue_topology and not args.kubernetes_nodes:
        raise UsageError("--kueue-topology goes with --kubernetes-nodes FILE")
    if args.kueue_topology_name and not (args.kubernetes_nodes or args.kubernetes):
        raise UsageError("--kueue-topology-name goes with --kubernetes-nodes or --kubernetes")
    for option in ("node_selector", "kubeconfig"):
        if getattr(args, option) and not args.kubernetes:
            raise UsageError(f"--{option.replace('_', '-')} goes with --kubernetes")
