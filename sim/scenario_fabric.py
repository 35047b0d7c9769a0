"""A scenario's network fabric and its multi-node jobs (the ``fabric:`` section).

::

    fabric:
      file: fabrics/demo.yaml     # a fabric file (docs/fabric.md), from the scenario's folder
      multi_node_jobs:
        - {name: llm-pretrain, jobs: [llm-pretrain-a, llm-pretrain-b]}
        - {name: gpt, jobs: [gpt-a, gpt-b], pattern: data-parallel, comm_share: 0.2}

The fabric file is read by the core's reader (:func:`~toposcope.fabric.yamlfile.
read_fabric_file`: bounded, every mistake named by file and line), and every node it names
must be a node of the scenario (a scenario node outside it is allowed: it hangs nowhere). A
multi-node job is a set of the scenario's jobs, one part per node, that the simulator treats
as one job on the fabric: its name is the ``workload`` of the per-job fabric series
(:mod:`toposcope.sim.fabric`). Each names at least two jobs, every job at most once over all
multi-node jobs. Without a ``pattern`` the parts run as any other simulated job (the
network is not priced); with one (``data-parallel``, ``tensor-parallel`` or ``pipeline``)
the job is a gang (:mod:`toposcope.sim.gang_engine`): its GPU parts start, step and finish
together and its step pays the network (:mod:`toposcope.sim.gang_price`), its share of a
step in inter-node collectives the truth's for the pattern unless ``comm_share`` pins it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from toposcope.errors import ConfigError
from toposcope.fabric.model import Fabric
from toposcope.fabric.yamlfile import read_fabric_file
from toposcope.identity.names import OBJECT_NAME_RULE, is_object_name
from toposcope.sim.gang_price import PATTERNS, FabricPrices, Gang
from toposcope.sim.jobs import short_repr
from toposcope.sim.scenario_model import JobDecl, NodeDecl
from toposcope.sim.scenario_yaml import ScenarioFields

FABRIC_FIELDS = ("file", "multi_node_jobs")
MULTI_NODE_FIELDS = ("name", "jobs", "pattern", "comm_share")
#: the most multi-node jobs of a scenario
MAX_MULTI_NODE_JOBS = 10_000
#: what the simulator appends to a job's name to make it a systemd unit
UNIT_SUFFIX = ".service"


@dataclass(frozen=True)
class ScenarioFabric:
    """The scenario's fabric and its multi-node jobs (name -> its parts' workload names),
    and those of them that run as gangs.
    """

    fabric: Fabric
    multi_node_jobs: dict[str, tuple[str, ...]]
    gangs: tuple[Gang, ...] = ()
    #: the fabric file the scenario names (what an advisor's ``fabric_file`` setting reads)
    file: Path | None = None

    def prices(self) -> FabricPrices:
        """The fabric as the gang model reads it."""
        return FabricPrices(self.fabric)


def scenario_fabric(
    top: ScenarioFields, base: Path, nodes: list[NodeDecl], jobs: list[JobDecl]
) -> ScenarioFabric | None:
    """The checked ``fabric:`` section of a scenario (``None`` without one)."""
    fields = top.child("fabric", FABRIC_FIELDS)
    if fields is None:
        return None
    relative = fields.required_text("file")
    try:
        fabric = read_fabric_file(base / relative)
    except ConfigError as exc:
        raise fields.error("file", str(exc)) from None
    declared = {node.name for node in nodes}
    stranger = next((n.name for n in fabric.nodes if n.name not in declared), None)
    if stranger is not None:
        raise fields.error("file", f"fabric node {stranger} is not a node of the scenario")
    # a job is named as written (``llm-a``) or by its unit (``llm-a.service``)
    known = {job.spec.name.removesuffix(UNIT_SUFFIX): job.spec.name for job in jobs}
    gpus = {job.spec.name: job.spec.gpus for job in jobs}
    known.update({name: name for name in known.values()})
    owner: dict[str, str] = {}
    groups: dict[str, tuple[str, ...]] = {}
    gangs: list[Gang] = []
    items = fields.items("multi_node_jobs")
    if len(items) > MAX_MULTI_NODE_JOBS:
        raise fields.error("multi_node_jobs", f"at most {MAX_MULTI_NODE_JOBS:,} multi-node jobs")
    for index, (line, raw) in enumerate(items):
        entry = ScenarioFields(
            top.source, f"fabric.multi_node_jobs[{index}]", raw, MULTI_NODE_FIELDS, line
        )
        name = entry.required_text("name")
        if not is_object_name(name):
            raise entry.error("name", f"{short_repr(name)} is not {OBJECT_NAME_RULE}")
        if name in groups:
            raise entry.error("name", f"multi-node job {name} is declared twice")
        parts: list[str] = []
        for _, part in entry.items("jobs"):
            if not isinstance(part, str) or part not in known:
                raise entry.error("jobs", f"{short_repr(part)} is not a job of the scenario")
            unit = known[part]
            if unit in owner:
                raise entry.error("jobs", f"job {part} is part of {owner[unit]} already")
            owner[unit] = name
            parts.append(unit)
        if len(parts) < 2:
            raise entry.error("jobs", "a multi-node job names at least two jobs")
        groups[name] = tuple(parts)
        pattern = entry.text("pattern")
        if pattern is None:
            if "comm_share" in entry.data:
                raise entry.error("comm_share", "only a job with a pattern has a share")
            continue
        if pattern not in PATTERNS:
            raise entry.error(
                "pattern", f"{short_repr(pattern)} is not one of {', '.join(PATTERNS)}"
            )
        if any(gpus[part] < 1 for part in parts):
            raise entry.error("jobs", "every part of a gang job holds GPUs")
        share = entry.number("comm_share", maximum=1.0)
        gangs.append(Gang(name, tuple(parts), pattern, share))
    return ScenarioFabric(fabric, groups, tuple(gangs), base / relative)
