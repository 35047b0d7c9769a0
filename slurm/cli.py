"""``toposcope slurm``: Slurm tools.

* ``toposcope slurm gres-conf [--path.sysfs DIR | --root DIR | --hwloc-xml FILE]
  [--nvidia-smi-topo FILE] [--node NAME]`` prints the gres.conf lines of a node from its
  topology (``Cores=`` of each GPU, ``Links=`` from the NVLink matrix);
* ``toposcope slurm show [--format text|json]`` prints the nodes, running jobs (CPU ids, GPU
  indices) and pending jobs, read from slurmrestd (``--slurm-url`` and a JWT) or from the
  Slurm commands.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from toposcope.config import HostPaths
from toposcope.errors import ConfigError, UsageError
from toposcope.names import is_node_name
from toposcope.slurm.gresconf import DEFAULT_DEVICE_FILE, gres_conf_lines
from toposcope.slurm.report import state_to_json, state_to_text
from toposcope.slurm.settings import add_slurm_options, open_reader, settings_from_args
from toposcope.topology.hwloc_xml import build_from_hwloc_xml
from toposcope.topology.model import Topology
from toposcope.topology.nvidia_smi import build_from_nvidia_smi_topo
from toposcope.topology.sysfs import build_from_sysfs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``gres-conf`` and ``show`` actions and their options."""
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
    show = actions.add_parser("show", help="print Slurm's nodes, running and pending jobs")
    show.add_argument("--format", choices=["text", "json"], default="text")
    add_slurm_options(show)


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
    if args.slurm_action == "show":
        state = open_reader(settings_from_args(args, os.environ)).read()
        if args.format == "json":
            json.dump(state_to_json(state), sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            print(state_to_text(state))
        return 0
    raise UsageError("choose an action: toposcope slurm gres-conf | show (see --help)")
