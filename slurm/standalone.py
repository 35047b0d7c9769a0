"""A local Slurm cluster built from a node description, run until told to stop.

``python -m toposcope.slurm.standalone --description FILE --state-dir DIR --info FILE`` reads
the neutral node description the simulator writes (``toposcope sim --slurm-describe``: each
node's CPUs with package and core, NUMA nodes, GPUs with their local CPUs, GPU links), turns
it into slurm.conf node lines and gres.conf lines (``Cores=``, ``Links=``) through the one
writer of those files (:mod:`toposcope.topology.gresconf`, :mod:`toposcope.slurm.clusterfiles`),
starts :class:`~toposcope.slurm.localcluster.LocalCluster` with it, writes where to reach the
cluster (slurm.conf, slurmrestd's URL, a 0600 JWT file it renews) to the info file, and runs
until SIGTERM or SIGINT, when it stops the cluster and leaves no process, cgroup directory or
state behind. Exit codes: 0 after a clean stop, 1 when something outlived the stop, 2 for a
bad description or a cluster that did not start.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from toposcope.auth.tokens import write_secret
from toposcope.errors import ConfigError
from toposcope.identity.names import is_node_name
from toposcope.slurm.clusterfiles import ClusterLayout, ClusterSpec, DescribedNode, NodeShape
from toposcope.slurm.daemons import ClusterError
from toposcope.slurm.localcluster import LocalCluster
from toposcope.topology.gresconf import gres_conf_lines, node_shape
from toposcope.topology.model import Cpu, Gpu, GpuLink, NumaNode, Topology

#: The description format this module reads (what the simulator writes).
FORMAT = "toposcope-nodes/1"
MAX_NODES = 64
MAX_CPUS = 4096
MAX_GPUS = 64
_MIB = 1024 * 1024
#: Token lifespan; the file is renewed at half of it.
TOKEN_LIFESPAN_S = 86400


def _int(value: object, where: str, upper: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= upper:
        raise ConfigError(f"{where} must be a whole number from 0 to {upper}, not {value!r:.40}")
    return value


def _ints(value: object, where: str, upper: int) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > MAX_CPUS:
        raise ConfigError(f"{where} must be a list of at most {MAX_CPUS} numbers")
    return tuple(_int(v, f"{where}[{i}]", upper) for i, v in enumerate(value))


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{where} must be a list")
    return value


def _map(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be an object")
    return value


def topology_of(node: Mapping[str, Any], where: str) -> Topology:
    """The core topology of one described node (:class:`ConfigError` naming what is wrong)."""
    cpus = []
    for i, row in enumerate(_list(node.get("cpus"), f"{where}.cpus")[: MAX_CPUS + 1]):
        cpu_id, package, core, numa = _ints(row, f"{where}.cpus[{i}]", MAX_CPUS)
        cpus.append(Cpu(cpu_id, package, core, numa))
    if not 0 < len(cpus) <= MAX_CPUS:
        raise ConfigError(f"{where}.cpus must list 1 to {MAX_CPUS} CPUs")
    numa_nodes = []
    for i, raw in enumerate(_list(node.get("numa_nodes"), f"{where}.numa_nodes")[:MAX_CPUS]):
        entry = _map(raw, f"{where}.numa_nodes[{i}]")
        numa_nodes.append(
            NumaNode(
                _int(entry.get("id"), f"{where}.numa_nodes[{i}].id", MAX_CPUS),
                None,
                _ints(entry.get("cpus"), f"{where}.numa_nodes[{i}].cpus", MAX_CPUS),
                _int(entry.get("memory_bytes"), f"{where}.numa_nodes[{i}].memory_bytes", 1 << 60),
            )
        )
    gpus = []
    for i, raw in enumerate(_list(node.get("gpus"), f"{where}.gpus")):
        entry = _map(raw, f"{where}.gpus[{i}]")
        gpu_numa = entry.get("numa_node")
        gpus.append(
            Gpu(
                _int(entry.get("index"), f"{where}.gpus[{i}].index", MAX_GPUS - 1),
                None,
                None
                if gpu_numa is None
                else _int(gpu_numa, f"{where}.gpus[{i}].numa_node", MAX_CPUS),
                _ints(entry.get("local_cpus"), f"{where}.gpus[{i}].local_cpus", MAX_CPUS),
            )
        )
    if len(gpus) > MAX_GPUS:
        raise ConfigError(f"{where}.gpus lists more than {MAX_GPUS} GPUs")
    links = []
    for i, row in enumerate(_list(node.get("gpu_links", []), f"{where}.gpu_links")):
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[2], str)):
            raise ConfigError(f"{where}.gpu_links[{i}] must be [gpu, peer_gpu, label]")
        gpu = _int(row[0], f"{where}.gpu_links[{i}][0]", MAX_GPUS - 1)
        peer = _int(row[1], f"{where}.gpu_links[{i}][1]", MAX_GPUS - 1)
        links.append(GpuLink(gpu, peer, row[2][:16]))
    return Topology(
        numa_nodes=tuple(numa_nodes),
        cpus=tuple(cpus),
        gpus=tuple(gpus),
        gpu_links=tuple(links),
        source=where,
    )


def described_node(node: Mapping[str, Any], where: str, layout: ClusterLayout) -> DescribedNode:
    """One node's slurm.conf shape and gres.conf lines (its GPUs on the cluster's fake devices)."""
    name = node.get("name")
    if not is_node_name(name) or not isinstance(name, str):
        raise ConfigError(f"{where}.name {name!r:.80} is not a host name")
    topology = topology_of(node, f"{where} ({name})")
    shape = node_shape(topology)
    if shape is None:
        raise ConfigError(
            f"{where} ({name}): sockets with different core counts or cores with different "
            "thread counts cannot be declared in slurm.conf"
        )
    sockets, cores, threads = shape
    memory_mb = sum(n.memory_bytes for n in topology.numa_nodes) // _MIB
    lines = gres_conf_lines(topology, node=name, device_file=f"{layout.dev}/nvidia{{index}}")
    return DescribedNode(
        name,
        NodeShape(sockets, cores, threads, len(topology.gpus), None, max(memory_mb, 1)),
        tuple(line for line in lines if not line.startswith("#")),
    )


def spec_from_description(
    description: object, layout: ClusterLayout, *, rest: bool = True
) -> ClusterSpec:
    """A :class:`ClusterSpec` of the described nodes (:class:`ConfigError` for bad input)."""
    top = _map(description, "the description")
    if top.get("format") != FORMAT:
        raise ConfigError(f"the description's format is {top.get('format')!r:.40}, not {FORMAT}")
    nodes = _list(top.get("nodes"), "nodes")
    if not 0 < len(nodes) <= MAX_NODES:
        raise ConfigError(f"the description must list 1 to {MAX_NODES} nodes")
    described = tuple(
        described_node(_map(n, f"nodes[{i}]"), f"nodes[{i}]", layout) for i, n in enumerate(nodes)
    )
    names = [n.name for n in described]
    if len(set(names)) != len(names):
        raise ConfigError("the description names a node twice")
    return ClusterSpec(described=described, rest=rest)


def load_description(path: str | Path, layout: ClusterLayout) -> ClusterSpec:
    """Read and check a description file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read the node description {path}: {exc}") from None
    return spec_from_description(data, layout)


def write_info(cluster: LocalCluster, info: Path, token_file: Path) -> None:
    """Write where to reach the cluster (JSON) and a fresh JWT (0600) for root."""
    write_secret(token_file, cluster.token("root", TOKEN_LIFESPAN_S) + "\n")
    info.write_text(
        json.dumps(
            {
                "slurm_conf": str(cluster.layout.slurm_conf),
                "rest_url": cluster.rest_url,
                "token_file": str(token_file),
                "nodes": list(cluster.node_names),
            },
            indent=1,
        )
        + "\n"
    )


def serve(cluster: LocalCluster, info: Path, token_file: Path, stop: threading.Event) -> None:
    """Start the cluster, publish it, renew its token until ``stop`` is set, then stop it."""
    try:
        cluster.start()
        write_info(cluster, info, token_file)
        while not stop.wait(TOKEN_LIFESPAN_S / 2):
            write_secret(token_file, cluster.token("root", TOKEN_LIFESPAN_S) + "\n")
    finally:
        info.unlink(missing_ok=True)
        token_file.unlink(missing_ok=True)
        cluster.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the described cluster until SIGTERM or SIGINT (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m toposcope.slurm.standalone", description=__doc__
    )
    parser.add_argument("--description", required=True, metavar="FILE")
    parser.add_argument("--state-dir", required=True, metavar="DIR")
    parser.add_argument("--info", required=True, metavar="FILE", help="where to write the URLs")
    parser.add_argument("--token-file", required=True, metavar="FILE", help="the JWT, 0600")
    args = parser.parse_args(argv)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        layout = ClusterLayout(Path(args.state_dir).absolute())
        cluster = LocalCluster(layout.root, load_description(args.description, layout))
        serve(cluster, Path(args.info), Path(args.token_file), stop)
    except ConfigError as exc:
        print(f"slurm standalone: error: {exc}", file=sys.stderr)
        return 2
    except ClusterError as exc:
        print(f"slurm standalone: {exc}", file=sys.stderr)
        return 1 if stop.is_set() else 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
