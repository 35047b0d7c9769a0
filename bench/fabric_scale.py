"""How long ``toposcope fabric show`` takes on a generated 10,000-node, three-level fabric.

The fabric is rail-optimised, as large GPU clusters are built: units of 32 nodes with 8 NICs
each, leaf k of a unit reached by NIC k of each of its nodes (8 leaves per unit, 313 units),
pods of 16 units whose leaves all reach the pod's 8 spines, and 16 cores above every spine;
400 Gb/s links, leaves 1:1. It is written in each format ``fabric show`` reads (a fabric
JSON file with every port, Slurm's ``topology.conf``, ``ibnetdiscover`` output) and each is
shown by the real command in a fresh interpreter, start-up included; the wall time of each is
printed. Then ``--jobs`` running multi-node jobs (default 2,000, 2 to 16 nodes of 8 GPUs each,
filling the cluster) are placed on it, half packed into as few units as they need and half
scattered over random nodes, and the per-job spread is computed as ``toposcope slurm
exporter --fabric-...`` does: the index of the fabric and its own series (rendered once at
start), then on every scrape every job's spread, its metric families and their text
exposition. Run it from the repository root::

    .venv/bin/python bench/fabric_scale.py [--nodes 10000] [--jobs 2000]

With ``--cells N`` it times the buddy-cell placement instead (:mod:`toposcope.fabric.cells`,
:mod:`toposcope.fabric.cellfit`): the cell tree built once, then, on the cluster half full
(the packed half of the running jobs), N pending jobs of 2 to 64 nodes placed one after the
other, each taking the nodes chosen for it, as the advisor's fabric-placement policy does.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from toposcope.fabric.cellfit import choose
from toposcope.fabric.cells import CellTree, NodeFree
from toposcope.fabric.job_families import fabric_families, job_families
from toposcope.fabric.jsonform import fabric_to_json
from toposcope.fabric.model import Fabric, Node, Port, Switch, assemble
from toposcope.fabric.slurmconf import write_topology_conf
from toposcope.fabric.spread import FabricIndex, JobPlacement, NodeShare

NODES_PER_UNIT = 32
RAILS = 8
UNITS_PER_POD = 16
SPINES_PER_POD = 8
CORES = 16
GBPS = 400.0


def generate(total: int) -> Fabric:
    """A rail-optimised three-level fabric of ``total`` nodes (see the module docstring)."""
    nodes = [f"gpu{index:05d}" for index in range(total)]
    units = [nodes[i : i + NODES_PER_UNIT] for i in range(0, total, NODES_PER_UNIT)]
    switches: list[Switch] = []
    ports: dict[str, list[Port]] = {name: [] for name in nodes}
    spines: list[str] = []
    for pod in range(0, len(units), UNITS_PER_POD):
        pod_leaves: list[str] = []
        for unit_index in range(pod, min(pod + UNITS_PER_POD, len(units))):
            for rail in range(RAILS):
                leaf = f"leaf-u{unit_index:03d}-r{rail}"
                members = units[unit_index]
                switches.append(
                    Switch(
                        leaf,
                        0,
                        nodes=tuple(members),
                        uplink_gbps=SPINES_PER_POD * 4 * GBPS,
                        downlink_gbps=len(members) * GBPS,
                    )
                )
                pod_leaves.append(leaf)
                for name in members:
                    ports[name].append(Port(f"mlx5_{rail}", leaf, GBPS))
        for spine in range(SPINES_PER_POD):
            name = f"spine-p{pod // UNITS_PER_POD:02d}-{spine}"
            spines.append(name)
            switches.append(
                Switch(
                    name,
                    1,
                    switches=tuple(pod_leaves),
                    uplink_gbps=CORES * 2 * GBPS,
                    downlink_gbps=len(pod_leaves) * 4 * GBPS / SPINES_PER_POD,
                )
            )
    for core in range(CORES):
        switches.append(Switch(f"core-{core:02d}", 2, switches=tuple(spines)))
    return assemble(switches, (), [Node(name, tuple(ports[name])) for name in nodes])


def ibnetdiscover_text(fabric: Fabric) -> str:
    """``fabric`` as ``ibnetdiscover`` would print it (switches, then one CA per NIC)."""
    guid = {s.name: f"S-{index + 1:016x}" for index, s in enumerate(fabric.switches)}
    parents: dict[str, list[str]] = {}
    for switch in fabric.switches:
        for child in switch.switches:
            parents.setdefault(child, []).append(switch.name)
    cas: list[tuple[str, str, str, int]] = []  # (guid, host, nic, leaf port)
    attached: dict[str, list[int]] = {}
    for node in fabric.nodes:
        for port in node.ports:
            attached.setdefault(port.switch, []).append(len(cas))
            cas.append((f"H-{len(cas) + 1:016x}", node.name, port.nic, 0))
    out: list[str] = []
    for switch in fabric.switches:
        lines = [f'Switch\t128 "{guid[switch.name]}"\t\t# "MF0;{switch.name}:MQM9790/U1" lid 1']
        number = 0
        for ca in attached.get(switch.name, []):
            number += 1
            cas[ca] = (*cas[ca][:3], number)
            lines.append(f'[{number}]\t"{cas[ca][0]}"[1]\t\t# "{cas[ca][1]} {cas[ca][2]}" 4xNDR')
        for child in switch.switches:
            number += 1
            lines.append(f'[{number}]\t"{guid[child]}"[1]\t\t# "MF0;{child}:M/U1" 4xNDR')
        for parent in parents.get(switch.name, []):
            number += 1
            lines.append(f'[{number}]\t"{guid[parent]}"[1]\t\t# "MF0;{parent}:M/U1" 4xNDR')
        out.append("\n".join(lines))
    owner = {index: s for s, indices in attached.items() for index in indices}
    for index, (ca_guid, host, nic, number) in enumerate(cas):
        out.append(
            f'Ca\t1 "{ca_guid}"\t\t# "{host} {nic}"\n'
            f'[1]\t"{guid[owner[index]]}"[{number}]\t\t# lid 2 lmc 0 "x" lid 1 4xNDR'
        )
    return "\n\n".join(out) + "\n"


def timed_show(option: str, path: Path) -> float:
    """Seconds ``toposcope fabric show OPTION PATH`` takes, start-up included."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "toposcope.cli", "fabric", "show", option, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"fabric show {option} failed: {done.stderr.strip()}")
    return elapsed


def place_jobs(fabric: Fabric, count: int, seed: int = 28) -> list[JobPlacement]:
    """``count`` multi-node jobs of 8 GPUs per node: even ones packed, odd ones scattered."""
    chooser = random.Random(seed)
    free = [node.name for node in fabric.nodes]
    sizes = [chooser.choice((2, 2, 4, 4, 4, 8, 8, 16)) for _ in range(count)]
    while sum(sizes) > len(free):  # shrink the largest until the jobs fit the cluster
        sizes[sizes.index(max(sizes))] //= 2
    packed, scattered = free[: len(free) // 2], free[len(free) // 2 :]
    chooser.shuffle(scattered)
    jobs: list[JobPlacement] = []
    for number, size in enumerate(sizes):
        pool = packed if number % 2 == 0 and len(packed) >= size else scattered
        if len(pool) < size:
            pool = packed if pool is scattered else scattered
        names, pool[:] = pool[:size], pool[size:]
        shares = tuple(NodeShare(name, 8, tuple(range(8))) for name in names)
        jobs.append(JobPlacement("slurm", "gpu", f"slurm-job-{number + 1}", shares))
    return jobs


class _Served(CollectorRegistry):
    """A registry serving fixed families, so that their exposition can be timed."""

    def __init__(self, metrics: list[Metric]) -> None:
        super().__init__(auto_describe=False)
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        """The fixed families."""
        yield from self._metrics


def timed_spread(fabric: Fabric, jobs: list[JobPlacement]) -> tuple[float, float, int]:
    """Seconds to index ``fabric`` and to compute every job's spread and families; the
    number of jobs spread beyond their need.
    """
    start = time.perf_counter()
    index = FabricIndex(fabric)
    static = generate_latest(_Served(fabric_families(fabric)))
    indexed = time.perf_counter() - start
    size = f"{static.count(b'{'):,} series, {len(static) / 1e6:.1f} MB"
    print(f"fabric series (rendered once): {size}")
    start = time.perf_counter()
    spreads = index.spreads(jobs)
    text = generate_latest(_Served(job_families(spreads)))
    scrape = time.perf_counter() - start
    print(f"per-job exposition: {text.count(b'{'):,} series, {len(text) / 1e6:.1f} MB")
    return indexed, scrape, sum(1 for spread in spreads if spread.spread_beyond_need)


def timed_cells(fabric: Fabric, jobs: list[JobPlacement], pending: int) -> None:
    """Print how long the cell tree takes to build and ``pending`` jobs take to place, with
    the cluster holding every even (packed) job of ``jobs``.
    """
    start = time.perf_counter()
    tree = CellTree(fabric)
    built = time.perf_counter() - start
    held = {share.node for job in jobs[::2] for share in job.shares}
    free = {
        node.name: NodeFree(node.name, 8, 0 if node.name in held else 8, None)
        for node in fabric.nodes
    }
    chooser = random.Random(29)
    seconds: list[float] = []
    levels: dict[str, int] = {}
    for _ in range(pending):
        size = chooser.choice((2, 4, 4, 8, 8, 16, 32, 64))
        start = time.perf_counter()
        choice = choose(tree, free, size, 8)
        seconds.append(time.perf_counter() - start)
        if choice is None:
            levels["none"] = levels.get("none", 0) + 1
            continue
        levels[choice.level_name] = levels.get(choice.level_name, 0) + 1
        for name in choice.nodes:
            free[name] = NodeFree(name, 8, 0, None)
    seconds.sort()
    cells = len(tree.cells) - len(fabric.nodes)
    print(f"cell tree (once): {built:.2f} s, {cells:,} cells above the nodes")
    print(f"cluster: {len(held):,} of {len(fabric.nodes):,} nodes held")
    print(
        f"{pending:,} placements: median {seconds[len(seconds) // 2] * 1e3:.1f} ms, "
        f"max {seconds[-1] * 1e3:.1f} ms, total {sum(seconds):.2f} s; levels {levels}"
    )


def main() -> int:
    """Generate the fabric, write each format, time ``fabric show`` on each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000, help="nodes (default 10,000)")
    parser.add_argument(
        "--jobs", type=int, default=2_000, help="running multi-node jobs (default 2,000)"
    )
    parser.add_argument(
        "--cells",
        type=int,
        default=0,
        metavar="N",
        help="time the buddy-cell placement of N pending jobs instead",
    )
    args = parser.parse_args()
    fabric = generate(args.nodes)
    if args.cells > 0:
        timed_cells(fabric, place_jobs(fabric, args.jobs), args.cells)
        return 0
    levels = len({s.level for s in fabric.switches})
    shape = f"{len(fabric.switches):,} switches, {levels} levels"
    print(f"fabric: {len(fabric.nodes):,} nodes, {shape}")
    with tempfile.TemporaryDirectory() as folder:
        files = {
            "--slurm-topology": (Path(folder) / "topology.conf", write_topology_conf(fabric)),
            "--file": (Path(folder) / "fabric.json", json.dumps(fabric_to_json(fabric))),
            "--ibnetdiscover": (Path(folder) / "ibnetdiscover.out", ibnetdiscover_text(fabric)),
        }
        for option, (path, text) in files.items():
            path.write_text(text)
            seconds = timed_show(option, path)
            size = len(text.encode()) / 1e6
            print(f"fabric show {option:<17} {size:6.1f} MB  {seconds:6.2f} s")
    jobs = place_jobs(fabric, args.jobs)
    gpus = sum(share.gpus for job in jobs for share in job.shares)
    indexed, scrape, beyond = timed_spread(fabric, jobs)
    print(f"jobs: {len(jobs):,} running on {gpus:,} GPUs, {beyond:,} spread beyond their need")
    print(f"fabric index and its series (once): {indexed:.2f} s")
    print(f"spread, families and exposition per scrape: {scrape:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
