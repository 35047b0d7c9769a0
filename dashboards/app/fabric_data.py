"""The fabric page's data from Prometheus: each fabric node's GPUs up and held, and the
multi-node jobs with their spread over the fabric.

GPU occupancy is counted per scrape target by Prometheus (two answers of one sample per node,
however many GPUs) and joined to the fabric's nodes by name: the node name of the app's rule
(:mod:`.prom_frames`), else its first DNS label when that names one fabric node only. The
jobs are the ``toposcope_job_fabric_*`` series of the cluster-level exporter that knows the
fabric (``toposcope slurm exporter`` with a fabric); ``toposcope_job_fabric_node_gpus`` says
on which nodes each job runs. :func:`load_fabric_data` queries, :func:`shape_fabric_data`
joins (pure, tested on hand-made answers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from toposcope.dashboards.app import queries as q
from toposcope.dashboards.app.fabric_layout import FabricIndex
from toposcope.dashboards.app.prom_frames import NodeIndex, load_index
from toposcope.dashboards.app.promclient import PromClient
from toposcope.identity.node import AUTO
from toposcope.promql.results import Vector

_BY_TARGET = ", ".join(q.TARGET_LABELS)
#: labels that name a multi-node job on every per-job series
JOB_LABELS = ("scheduler", "partition", "workload")
_BY_JOB = ", ".join(JOB_LABELS)

#: GPUs up per scrape target
GPUS_UP = f"count by ({_BY_TARGET}) ({q.GPU_UP} == 1)"
#: GPUs held by at least one workload, per scrape target
GPUS_HELD = f"count by ({_BY_TARGET}) (count by ({_BY_TARGET}, gpu) ({q.WORKLOAD_GPU}))"
#: per job and node: the GPUs the job holds there
JOB_NODE_GPUS = f"max by ({_BY_JOB}, node) ({q.metric('toposcope_job_fabric_node_gpus')})"
#: per-job figures: field -> query (one sample per job)
JOB_FIGURES: dict[str, str] = {
    name: f"max by ({_BY_JOB}) ({q.metric(f'toposcope_job_fabric_{name}')})"
    for name in ("nodes", "gpus", "top_level", "top_level_needed", "rail_aligned")
}
#: per job and level (leaf, spine, core, block): domains spanned and the fewest needed
JOB_DOMAINS = f"max by ({_BY_JOB}, level) ({q.metric('toposcope_job_fabric_domains')})"
JOB_DOMAINS_NEEDED = (
    f"max by ({_BY_JOB}, level) ({q.metric('toposcope_job_fabric_domains_needed')})"
)
#: recorded by alerts/fabric.rules.yml: bytes/s through the job's nodes' ports, by direction
JOB_TRAFFIC_RECORD = "workload_direction:toposcope_job_fabric_port_bytes:rate5m"
JOB_TRAFFIC = f"sum by ({_BY_JOB}, direction) ({JOB_TRAFFIC_RECORD})"

Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class FabricJob:
    """One multi-node job: its key labels, GPUs per node, and its spread figures.

    ``figures`` holds the :data:`JOB_FIGURES` found; ``domains`` and ``needed`` map a level
    (``leaf``, ``spine``, ``core``, ``block``) to domains spanned and the fewest needed;
    ``traffic`` maps a direction to bytes/s.
    """

    workload: str
    scheduler: str
    partition: str
    node_gpus: Mapping[str, float]
    figures: Mapping[str, float] = field(default_factory=dict)
    domains: Mapping[str, float] = field(default_factory=dict)
    needed: Mapping[str, float] = field(default_factory=dict)
    traffic: Mapping[str, float] = field(default_factory=dict)

    @property
    def nodes(self) -> tuple[str, ...]:
        """The job's nodes, sorted."""
        return tuple(sorted(self.node_gpus))

    @property
    def excess(self) -> float:
        """Domains spanned beyond need, summed over levels (0 when placed as tight as it can)."""
        return sum(max(0.0, v - self.needed.get(level, v)) for level, v in self.domains.items())

    @property
    def spread(self) -> bool:
        """Whether the job spans more domains of some level than its size needs."""
        return self.excess > 0


@dataclass(frozen=True)
class FabricData:
    """Occupancy per fabric node (arrays in the fabric's node order) and the jobs.

    ``up`` and ``held`` count GPUs (0 where a node reports none); ``reported`` says which
    fabric nodes Prometheus has GPU series for; ``outside`` counts reporting nodes the fabric
    lacks; ``jobs`` are sorted by spread beyond need, then size.
    """

    up: Floats
    held: Floats
    reported: npt.NDArray[np.bool_]
    outside: int
    jobs: tuple[FabricJob, ...]
    dropped: int = 0

    def job(self, workload: str | None) -> FabricJob | None:
        """The job called ``workload``, or ``None``."""
        return next((j for j in self.jobs if j.workload == workload), None)


def load_fabric_data(prom: PromClient, index: FabricIndex, node_label: str = AUTO) -> FabricData:
    """Query the page's data (instant queries at now)."""
    nodes = load_index(prom, node_label)
    answers = {
        "up": prom.query(GPUS_UP),
        "held": prom.query(GPUS_HELD),
        "node_gpus": prom.query(JOB_NODE_GPUS),
        "domains": prom.query(JOB_DOMAINS),
        "needed": prom.query(JOB_DOMAINS_NEEDED),
        "traffic": prom.query(JOB_TRAFFIC),
        **{name: prom.query(expr) for name, expr in JOB_FIGURES.items()},
    }
    return shape_fabric_data(index, nodes, answers)


def _matcher(index: FabricIndex) -> dict[str, int]:
    """Short name -> fabric node position, for short names that name one fabric node only."""
    short: dict[str, list[int]] = {}
    for name, position in index.position.items():
        short.setdefault(name.split(".", 1)[0], []).append(position)
    return {name: found[0] for name, found in short.items() if len(found) == 1}


def _per_node(
    vector: Vector, nodes: NodeIndex, index: FabricIndex, short: Mapping[str, int]
) -> tuple[Floats, npt.NDArray[np.bool_], set[str]]:
    """Each fabric node's summed value, which fabric nodes answered, the names outside it."""
    values = np.zeros(len(index.node_names), dtype=np.float64)
    seen = np.zeros(len(index.node_names), dtype=np.bool_)
    outside: set[str] = set()
    for sample in vector.samples:
        name = nodes.name(sample.labels)
        position = index.position.get(name, short.get(name.split(".", 1)[0]))
        if position is None:
            outside.add(name)
        else:
            values[position] += sample.value
            seen[position] = True
    return values, seen, outside


def _key(labels: Mapping[str, str]) -> tuple[str, str, str]:
    return labels.get("scheduler", ""), labels.get("partition", ""), labels.get("workload", "")


def _by_job(vector: Vector, label: str = "") -> dict[tuple[str, str, str], dict[str, float]]:
    found: dict[tuple[str, str, str], dict[str, float]] = {}
    for sample in vector.samples:
        found.setdefault(_key(sample.labels), {})[sample.labels.get(label, "")] = sample.value
    return found


def shape_fabric_data(
    index: FabricIndex, nodes: NodeIndex, answers: Mapping[str, Vector]
) -> FabricData:
    """Join the answers of :func:`load_fabric_data` to the fabric's nodes and to jobs."""
    short = _matcher(index)
    up, reported, outside_up = _per_node(answers["up"], nodes, index, short)
    held, _, outside_held = _per_node(answers["held"], nodes, index, short)
    node_gpus = _by_job(answers["node_gpus"], "node")
    figures = {name: _by_job(answers[name]) for name in JOB_FIGURES}
    domains, needed = _by_job(answers["domains"], "level"), _by_job(answers["needed"], "level")
    traffic = _by_job(answers["traffic"], "direction")
    jobs = [
        FabricJob(
            key[2],
            key[0],
            key[1],
            per_node,
            {name: found[key][""] for name, found in figures.items() if key in found},
            domains.get(key, {}),
            needed.get(key, {}),
            traffic.get(key, {}),
        )
        for key, per_node in node_gpus.items()
        if key[2]
    ]
    jobs.sort(key=lambda j: (-j.excess, -len(j.node_gpus), j.workload))
    dropped = sum(v.non_finite for v in answers.values())
    return FabricData(up, held, reported, len(outside_up | outside_held), tuple(jobs), dropped)


def occupancy(
    data: FabricData, positions: Sequence[int] | npt.NDArray[np.int64]
) -> tuple[float, float]:
    """GPUs held and up over the nodes at ``positions``."""
    return float(data.held[positions].sum()), float(data.up[positions].sum())
