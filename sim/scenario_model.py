"""A validated scenario (nodes, jobs and their placements) and the limits and field names
of the scenario format (:mod:`toposcope.sim.scenarios`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from toposcope.rm import Allocation
from toposcope.sim.jobs import (
    JobSpec,
)
from toposcope.sim.templates import (
    NodeTemplate,
)

if TYPE_CHECKING:  # the fabric section's module imports this one
    from toposcope.sim.scenario_fabric import ScenarioFabric

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"

#: Most nodes of a scenario (declared and generated), and most jobs placed on one node by
#: ``placement`` or ``generate`` (the model re-evaluates a node's jobs together, so its cost
#: grows fast with their number). The job limits live in :mod:`toposcope.sim.jobs`.
MAX_NODES = 10_000
MAX_JOBS_PER_NODE = 64
TOP_FIELDS = (
    "name", "description", "seed", "scheduler", "templates", "nodes", "jobs", "trace", "generate",
    "fabric",
)  # fmt: skip
NODE_FIELDS = ("name", "template", "count", "labels")
JOB_FIELDS = (
    "name", "type", "gpus", "threads", "memory_gb", "gpu_memory_gb", "numa_sensitivity",
    "comm_intensity", "input_intensity", "throughput", "submit", "duration", "count",
    "placement",
)  # fmt: skip
PLACEMENT_FIELDS = ("node", "gpus", "cpus", "mems")
TEMPLATE_FIELDS = ("hwloc_xml", "sysfs", "gpu_model", "gpu_memory_gb")
TRACE_FIELDS = ("file", "limit", "offset")
GENERATE_FIELDS = ("nodes", "workloads", "seed")


# -- the model of a scenario ------------------------------------------------------------------


@dataclass(frozen=True)
class NodeDecl:
    """One node of a scenario."""

    name: str
    template: NodeTemplate
    labels: dict[str, str]


@dataclass(frozen=True)
class JobDecl:
    """One job of a scenario, with its optional initial placement and where it was written."""

    spec: JobSpec
    placement: Allocation | None
    where: str


@dataclass(frozen=True)
class Scenario:
    """A validated scenario, ready for :func:`build_cluster`."""

    name: str
    description: str
    seed: int
    scheduler: str
    nodes: tuple[NodeDecl, ...]
    jobs: tuple[JobDecl, ...]
    source: str
    #: the network fabric and its multi-node jobs (:mod:`toposcope.sim.scenario_fabric`)
    fabric: ScenarioFabric | None = None
