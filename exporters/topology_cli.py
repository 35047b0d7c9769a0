"""``toposcope topology``: print a machine's topology as text or JSON.

Reads this host's sysfs by default, or a snapshot (``--root DIR`` with ``sys/`` and
``proc/`` inside), an hwloc XML file (``lstopo --of xml``) or ``nvidia-smi topo -m`` output.
The command lives with the exporter because merging NVML's view (``--nvml``) needs the
exporter's NVML layer; the core's builders stay free of it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from toposcope.config import HostPaths
from toposcope.errors import ConfigError
from toposcope.exporters.gpu_source import merge_nvml_topology
from toposcope.topology.hwloc_xml import build_from_hwloc_xml
from toposcope.topology.model import Topology
from toposcope.topology.nvidia_smi import build_from_nvidia_smi_topo
from toposcope.topology.sysfs import build_from_sysfs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the input and format options."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--root", metavar="DIR", help="snapshot root holding sys/ and proc/")
    source.add_argument("--hwloc-xml", metavar="FILE", help="hwloc XML (lstopo --of xml), v1-v3")
    source.add_argument(
        "--nvidia-smi-topo", metavar="FILE", help="output of nvidia-smi topo -m ('-' = stdin)"
    )
    parser.add_argument("--path.sysfs", dest="path_sysfs", metavar="DIR", help="sysfs root")
    parser.add_argument("--path.procfs", dest="path_procfs", metavar="DIR", help="procfs root")
    parser.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="text (default: a tree to read) or json (the topology model, for scripts)",
    )
    parser.add_argument(
        "--nvml",
        default="auto",
        metavar="auto|off|fake|fake:FILE",
        help="merge NVML's GPUs and link matrix into a sysfs topology: auto (this host's "
        "NVML when it loads; not with --root or --path.sysfs), off, or the fake NVML",
    )


def load_topology(args: argparse.Namespace) -> Topology:
    """Build the topology from whichever source the arguments name."""
    if args.hwloc_xml:
        return build_from_hwloc_xml(Path(args.hwloc_xml))
    if args.nvidia_smi_topo:
        if args.nvidia_smi_topo == "-":
            try:
                text = sys.stdin.read()
            except UnicodeDecodeError as exc:
                raise ConfigError(
                    f"standard input is not {exc.encoding} text: {exc.reason}"
                ) from exc
            return build_from_nvidia_smi_topo(text, source="nvidia-smi:stdin")
        path = Path(args.nvidia_smi_topo)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
        return build_from_nvidia_smi_topo(text, source=f"nvidia-smi:{path}")
    if args.root:
        paths = HostPaths.under(args.root)
    else:
        paths = HostPaths.from_options(sysfs=args.path_sysfs, procfs=args.path_procfs)
    paths.check()
    topology = build_from_sysfs(paths.sysfs, paths.procfs)
    nvml = getattr(args, "nvml", "off")
    if nvml == "off" or (nvml == "auto" and (args.root or args.path_sysfs)):
        return topology
    return merge_nvml_topology(topology, nvml)


def run(args: argparse.Namespace) -> int:
    """Print the topology; exit 2 when the input is missing or malformed."""
    topology = load_topology(args)
    if args.format == "json":
        json.dump(topology.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(topology.to_text())
    return 0
