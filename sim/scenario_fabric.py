"""A scenario's network fabric and its multi-node jobs (the ``fabric:`` section).

::

    fabric:
      file: fabrics/demo.yaml     # a fabric file (docs/fabric.md), from the scenario's folder
      multi_node_jobs:
        - {name: llm-pretrain, jobs: [llm-pretrain-a, llm-pretrain-b]}

The fabric file is read by the core's reader (:func:`~toposcope.fabric.yamlfile.
read_fabric_file`: bounded, every mistake named by file and line), and every node it names
must be a node of the scenario (a scenario node outside it is allowed: it hangs nowhere). A
multi-node job is a set of the scenario's jobs, one part per node, that the simulator treats
as one job on the fabric: its name is the ``workload`` of the per-job fabric series
(:mod:`toposcope.sim.fabric`). Each names at least two jobs, every job at most once over all
multi-node jobs; the parts run as any other simulated job (the performance model does not
price the network).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from toposcope.errors import ConfigError
from toposcope.fabric.model import Fabric
from toposcope.fabric.yamlfile import read_fabric_file
from toposcope.identity.names import OBJECT_NAME_RULE, is_object_name
from toposcope.sim.jobs import short_repr
from toposcope.sim.scenario_model import JobDecl, NodeDecl
from toposcope.sim.scenario_yaml import ScenarioFields

FABRIC_FIELDS = ("file", "multi_node_jobs")
MULTI_NODE_FIELDS = ("name", "jobs")
#: the most multi-node jobs of a scenario
MAX_MULTI_NODE_JOBS = 10_000
#: what the simulator appends to a job's name to make it a systemd unit
UNIT_SUFFIX = ".service"


@dataclass(frozen=True)
class ScenarioFabric:
    """The scenario's fabric and its multi-node jobs (name -> its parts' workload names)."""

    fabric: Fabric
    multi_node_jobs: dict[str, tuple[str, ...]]


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
    known.update({name: name for name in known.values()})
    owner: dict[str, str] = {}
    groups: dict[str, tuple[str, ...]] = {}
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
    return ScenarioFabric(fabric, groups)
