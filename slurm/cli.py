"""``toposcope slurm``: Slurm tools.

* ``toposcope slurm gres-conf [--path.sysfs DIR | --root DIR | --hwloc-xml FILE]
  [--nvidia-smi-topo FILE] [--node NAME]`` prints the gres.conf lines of a node from its
  topology (``Cores=`` of each GPU, ``Links=`` from the NVLink matrix);
* ``toposcope slurm topology-conf (--slurm-topology FILE | --ibnetdiscover FILE | --file
  FILE)`` writes Slurm's ``topology.conf`` from a fabric (:mod:`toposcope.fabric`): the
  switch tree, then the blocks and ``BlockSizes``;
* ``toposcope slurm show [--format text|json]`` prints the nodes, running jobs (CPU ids, GPU
  indices) and pending jobs, read from slurmrestd (``--slurm-url`` and a JWT) or from the
  Slurm commands;
* ``toposcope slurm exporter [--web.listen-address 127.0.0.1:9852] [--web.config.file FILE]
  [--slurm-max-accounts N] [--print]`` serves the queue and fairness metrics
  (``toposcope_queue_*``) read from Slurm on every scrape (:mod:`toposcope.slurm.exporter`);
  at most N accounts per partition keep their own series, the rest are summed under
  ``(other)``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from pathlib import Path

from prometheus_client import generate_latest

from toposcope.config import HostPaths
from toposcope.errors import ConfigError, UsageError
from toposcope.fabric.slurmconf import write_topology_conf
from toposcope.fabric.sources import add_source_arguments, describe_source, load_fabric
from toposcope.identity.names import is_node_name
from toposcope.queue.accounts import DEFAULT_MAX_ACCOUNTS, MAX_MAX_ACCOUNTS, OTHER_ACCOUNT
from toposcope.serving.httpserver import HttpServer
from toposcope.serving.webflags import add_web_arguments, apply_web_arguments
from toposcope.slurm.exporter import (
    QueueCollector,
    exporter_registry,
    fabric_exposition,
    make_app,
)
from toposcope.slurm.fabric_options import add_fabric_arguments, load_exporter_fabric
from toposcope.slurm.report import state_to_json, state_to_text
from toposcope.slurm.settings import (
    add_slurm_options,
    open_commands,
    open_reader,
    settings_from_args,
)
from toposcope.topology.gresconf import DEFAULT_DEVICE_FILE, gres_conf_lines
from toposcope.topology.hwloc_xml import build_from_hwloc_xml
from toposcope.topology.model import Topology
from toposcope.topology.nvidia_smi import build_from_nvidia_smi_topo
from toposcope.topology.sysfs import build_from_sysfs

LOG = logging.getLogger("toposcope.slurm")
#: where ``toposcope slurm exporter`` listens unless told otherwise (the exporter is 9847)
DEFAULT_LISTEN = "127.0.0.1:9852"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``gres-conf``, ``topology-conf``, ``show`` and ``exporter`` actions."""
    actions = parser.add_subparsers(dest="slurm_action", metavar="ACTION")
    gres = actions.add_parser("gres-conf", help="print a node's gres.conf lines from its topology")
    source = gres.add_mutually_exclusive_group()
    source.add_argument("--path.sysfs", dest="path_sysfs", metavar="DIR", help="sysfs root")
    source.add_argument("--root", metavar="DIR", help="snapshot root holding sys/ (and proc/)")
    source.add_argument("--hwloc-xml", metavar="FILE", help="hwloc XML (lstopo --of xml)")
    gres.add_argument(
        "--nvidia-smi-topo",
        metavar="FILE",
        help="output of nvidia-smi topo -m, for the GPUs' NVLinks (Links=)",
    )
    gres.add_argument("--node", metavar="NAME", help="add NodeName=NAME to every line")
    gres.add_argument("--type", dest="gpu_type", metavar="TYPE", help="add Type=TYPE (a100)")
    gres.add_argument(
        "--device-file",
        default=DEFAULT_DEVICE_FILE,
        metavar="TEMPLATE",
        help=f"device path of GPU {{index}} (default: {DEFAULT_DEVICE_FILE})",
    )
    topology_conf = actions.add_parser(
        "topology-conf",
        help="write Slurm's topology.conf (tree and block forms) from a fabric source",
    )
    add_source_arguments(topology_conf)
    show = actions.add_parser("show", help="print Slurm's nodes, running and pending jobs")
    show.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="text (default: one line per node and per job) or json",
    )
    add_slurm_options(show)
    exporter = actions.add_parser(
        "exporter", help="serve Slurm's queue and fairness metrics on /metrics"
    )
    add_web_arguments(
        exporter,
        DEFAULT_LISTEN,
        f"address to serve /metrics on (default {DEFAULT_LISTEN}, loopback only)",
    )
    exporter.add_argument(
        "--print", action="store_true", help="print one scrape to standard output and exit"
    )
    exporter.add_argument(
        "--slurm-max-accounts",
        type=int,
        default=DEFAULT_MAX_ACCOUNTS,
        metavar="N",
        help="accounts per partition that keep their own series, by GPUs then jobs; the rest "
        f'are summed under account="{OTHER_ACCOUNT}" (default: {DEFAULT_MAX_ACCOUNTS}, '
        f"at most {MAX_MAX_ACCOUNTS})",
    )
    add_slurm_options(exporter)
    add_fabric_arguments(exporter)


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc


def load_topology(args: argparse.Namespace) -> Topology:
    """The topology the ``gres-conf`` options name, with nvidia-smi's links merged in."""
    if args.hwloc_xml:
        topology = build_from_hwloc_xml(Path(args.hwloc_xml))
    else:
        paths = (
            HostPaths.under(args.root)
            if args.root
            else HostPaths.from_options(sysfs=args.path_sysfs)
        )
        paths.check()
        topology = build_from_sysfs(paths.sysfs, paths.procfs if paths.procfs.exists() else None)
    if not args.nvidia_smi_topo:
        return topology
    links = build_from_nvidia_smi_topo(
        _read_text(args.nvidia_smi_topo), source=f"nvidia-smi:{args.nvidia_smi_topo}"
    )
    if len(links.gpus) != len(topology.gpus):
        raise ConfigError(
            f"{args.nvidia_smi_topo} shows {len(links.gpus)} GPUs but the topology from "
            f"{topology.source} has {len(topology.gpus)}: they are not the same machine"
        )
    return dataclasses.replace(topology, gpu_links=links.gpu_links)


def run(args: argparse.Namespace) -> int:
    """Carry out the chosen action; exit 2 on bad input or an unreachable Slurm."""
    if args.slurm_action == "gres-conf":
        if args.node is not None and not is_node_name(args.node):
            raise UsageError(f"--node {args.node[:80]!r} is not a host name")
        lines = gres_conf_lines(
            load_topology(args),
            node=args.node,
            device_file=args.device_file,
            gpu_type=args.gpu_type,
        )
        print("\n".join(lines))
        return 0
    if args.slurm_action == "topology-conf":
        fabric = load_fabric(args)
        source = describe_source(args)
        sys.stdout.write(write_topology_conf(fabric, note=f"written by toposcope from {source}"))
        return 0
    if args.slurm_action == "show":
        state = open_reader(settings_from_args(args, os.environ)).read()
        if args.format == "json":
            json.dump(state_to_json(state), sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            print(state_to_text(state))
        return 0
    if args.slurm_action == "exporter":
        return serve_exporter(args)
    raise UsageError(
        "choose an action: toposcope slurm gres-conf | topology-conf | show | exporter (see --help)"
    )


def serve_exporter(args: argparse.Namespace) -> int:
    """``toposcope slurm exporter``: print one scrape, or serve until signalled."""
    if not 1 <= args.slurm_max_accounts <= MAX_MAX_ACCOUNTS:
        raise UsageError(
            f"--slurm-max-accounts {args.slurm_max_accounts} is not between 1 and "
            f"{MAX_MAX_ACCOUNTS}"
        )
    settings = settings_from_args(args, os.environ)
    reader = open_reader(settings)
    fabric = load_exporter_fabric(args)
    collector = QueueCollector(
        reader, open_commands(settings), max_accounts=args.slurm_max_accounts, fabric=fabric
    )
    static = fabric_exposition(fabric)
    registry = exporter_registry(collector)
    if args.print:
        sys.stdout.write((generate_latest(registry) + static).decode())
        return 0
    server = HttpServer(
        make_app(registry, reader.source, static), args.listen, methods=("GET", "HEAD")
    )
    web = apply_web_arguments(server, args)
    LOG.info(
        "serving /metrics on %s (%s), reading Slurm from %s",
        ", ".join([args.listen, *(args.listen_also or [])]),
        "TLS" if web is not None and web.tls else "plain HTTP",
        reader.source,
    )
    server.serve_until_signalled()
    return 0
