"""The simulated cluster's hardware as a neutral JSON description, for a Slurm cluster to run.

When Slurm is the scheduler and the simulator the hardware, Slurm's slurm.conf and gres.conf
must declare exactly the simulated machines. The simulator does not write Slurm's files
itself (it may not import the Slurm part, and those files are written in one place, the Slurm
part's ``clusterfiles``/``gresconf``): it writes this description of each node's topology,
which the Slurm part's local cluster turns into its configuration (``python -m
toposcope.slurm.standalone --description FILE``).

The description (``format`` :data:`FORMAT`), one object per node in the scenario's order::

    {"format": "toposcope-nodes/1",
     "nodes": [{"name": "dgx-01",
                "cpus": [[cpu, package, core, numa_node], ...],
                "numa_nodes": [{"id": 0, "cpus": [...], "memory_bytes": 274877906944}, ...],
                "gpus": [{"index": 0, "numa_node": 1, "local_cpus": [...]}, ...],
                "gpu_links": [[gpu, peer_gpu, "NV12"], ...]}]}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toposcope.sim.cluster import SimCluster
from toposcope.topology.model import Topology

#: The description's format name and version.
FORMAT = "toposcope-nodes/1"


def node_description(name: str, topology: Topology) -> dict[str, Any]:
    """One node's entry: its CPUs with package and core, NUMA nodes, GPUs and GPU links."""
    return {
        "name": name,
        "cpus": [[c.id, c.package, c.core, c.numa_node] for c in topology.cpus],
        "numa_nodes": [
            {"id": n.id, "cpus": list(n.cpus), "memory_bytes": n.memory_bytes}
            for n in topology.numa_nodes
        ],
        "gpus": [
            {"index": g.index, "numa_node": g.numa_node, "local_cpus": list(g.local_cpus)}
            for g in topology.gpus
        ],
        "gpu_links": [[link.gpu, link.peer_gpu, link.link] for link in topology.gpu_links],
    }


def describe_cluster(cluster: SimCluster) -> dict[str, Any]:
    """The description of every node of ``cluster``."""
    return {
        "format": FORMAT,
        "nodes": [
            node_description(name, cluster.template_of(name).topology)
            for name in cluster.node_names()
        ],
    }


def write_description(cluster: SimCluster, path: str | Path) -> None:
    """Write :func:`describe_cluster` to ``path`` as JSON."""
    Path(path).write_text(json.dumps(describe_cluster(cluster)) + "\n")
