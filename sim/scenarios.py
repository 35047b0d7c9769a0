"""Scenarios: the nodes and jobs of a simulated cluster, from YAML, checked with clear errors.

A scenario file (built-ins in ``sim/scenarios/*.yaml``, named ``builtin:NAME``)::

    name: demo
    description: what it shows
    seed: 0                      # default seed (``--seed`` overrides)
    scheduler: first-fit         # or none: pending jobs wait for a ``place`` action
    templates:                   # optional: node templates imported from files
      lab-box: {hwloc_xml: boxes/lab.xml, gpu_model: "NVIDIA A40", gpu_memory_gb: 48}
      snap: {sysfs: snapshots/host1}        # a root holding sys/ (and proc/)
    nodes:
      - {name: dgx, template: dgx-a100, count: 2, labels: {rack: r1}}   # dgx-01, dgx-02
      - {name: cpu-01, template: xeon-2s}
    jobs:
      - name: cnn-wrong-memory
        type: cpu-train          # cpu-train, gpu-train, inference, notebook
        threads: 28
        memory_gb: 64
        placement: {node: cpu-01, cpus: "0-13,28-41", mems: [1]}
      - {name: worker, type: gpu-train, gpus: 2, count: 3, submit: 600, duration: 3600}
    trace: {file: ../traces/sample.csv, limit: 50, offset: 0}   # or just the path
    generate: {nodes: {dgx-a100: 10, xeon-2s: 10}, workloads: 80}   # a synthetic cluster
    fabric:                      # optional: the network between nodes, multi-node jobs
      file: fabrics/demo.yaml    # a fabric file (docs/fabric.md)
      multi_node_jobs: [{name: llm, jobs: [llm-a, llm-b]}]   # one job's parts, one per node

Job fields: ``type``, ``gpus``, ``threads``, ``memory_gb``, ``gpu_memory_gb`` (per GPU),
``numa_sensitivity``, ``comm_intensity``, ``input_intensity`` (0..1), ``throughput`` (at
the best placement), ``submit`` and ``duration`` (simulated seconds; no duration: runs until
stopped), ``count`` and ``placement`` (``node``, ``gpus``, ``cpus`` as a cpulist string or a
list, ``mems``; GPUs may be shared between placed jobs on purpose). Paths are relative to
the scenario file. Any problem raises :class:`~toposcope.errors.ConfigError` as
``FILE:LINE: FIELD: problem``.

Names follow :mod:`toposcope.identity.names`: node names are host names that are also object names
(they become URLs, labels and directory names), job and template names are object names.
Numbers must be finite and within the limits below (:data:`MAX_NODES`, and
:data:`~toposcope.sim.jobs.MAX_JOBS` and the other job limits of :mod:`toposcope.sim.jobs`);
counts are checked before anything is expanded or generated. A job that no node could ever
hold (more GPUs than the largest node has, or, for a CPU job the first-fit scheduler must
place, more threads than the largest node has CPUs) is an error too.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import yaml

from toposcope.errors import ConfigError
from toposcope.identity.names import (
    is_object_name,
)
from toposcope.rm import ResourceManagerError
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.gang_engine import GangBook
from toposcope.sim.jobs import MAX_JOBS, short_repr
from toposcope.sim.scenario_fabric import scenario_fabric
from toposcope.sim.scenario_generate import generate_cluster
from toposcope.sim.scenario_jobs import JobContext, scenario_jobs, trace_jobs
from toposcope.sim.scenario_model import (
    GENERATE_FIELDS,
    MAX_JOBS_PER_NODE,
    MAX_NODES,
    SCENARIO_DIR,
    TOP_FIELDS,
    JobDecl,
    NodeDecl,
    Scenario,
)
from toposcope.sim.scenario_nodes import scenario_nodes, scenario_templates
from toposcope.sim.scenario_yaml import ScenarioFields, ScenarioLoader, ScenarioMap
from toposcope.sim.traces import Capacity

#: What callers import from here (the parts live in the ``scenario_*`` modules).
__all__ = [
    "MAX_JOBS_PER_NODE",
    "MAX_NODES",
    "SCENARIO_DIR",
    "JobDecl",
    "NodeDecl",
    "Scenario",
    "build_cluster",
    "builtin_scenarios",
    "load_scenario",
    "parse_scenario",
    "resolve_scenario",
]


def builtin_scenarios() -> list[str]:
    """Names of the shipped scenarios (``builtin:NAME``)."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def resolve_scenario(ref: str) -> Path:
    """The file a ``--scenario`` value names: ``builtin:NAME`` or a path."""
    if ref.startswith("builtin:"):
        name = ref.removeprefix("builtin:")
        path = SCENARIO_DIR / f"{name}.yaml"
        if not is_object_name(name) or not path.is_file():
            raise ConfigError(
                f"no built-in scenario {short_repr(name)} "
                f"(built-in: {', '.join(builtin_scenarios())})"
            )
        return path
    path = Path(ref)
    if not path.is_file():
        raise ConfigError(f"scenario file {ref} does not exist")
    return path


def load_scenario(ref: str, seed: int | None = None) -> Scenario:
    """Read and check a scenario (``builtin:NAME`` or a file); ``seed`` overrides its own."""
    path = resolve_scenario(ref)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read scenario {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    source = f"builtin:{path.stem}" if ref.startswith("builtin:") else str(path)
    return parse_scenario(text, source, path.parent, seed)


def load_yaml(text: str, source: str) -> object:
    """The YAML document with line numbers; any problem is a :class:`ConfigError`."""
    try:
        return yaml.load(text, Loader=ScenarioLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f":{mark.line + 1}" if mark is not None else ""
        what = "; ".join(part for part in (exc.context, exc.problem) if part)
        raise ConfigError(f"{source}{at}: not valid YAML: {what or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{source}: not valid YAML: nested too deeply") from None
    except (ValueError, OverflowError) as exc:
        raise ConfigError(f"{source}: not valid YAML: a value cannot be read: {exc}") from None


def parse_scenario(text: str, source: str, base: Path, seed: int | None = None) -> Scenario:
    """Check scenario YAML ``text`` (``source`` names it in errors; ``base`` resolves paths;
    ``seed``, when given, replaces the file's).
    """
    data = load_yaml(text, source)
    top = ScenarioFields(source, "", data if data is not None else ScenarioMap(), TOP_FIELDS, 1)
    name = top.text("name") or Path(source).stem
    scheduler = top.text("scheduler", "first-fit") or "first-fit"
    if scheduler not in ("first-fit", "none"):
        raise top.error("scheduler", f"must be first-fit or none, got {short_repr(scheduler)}")
    file_seed = top.integer("seed", 0) or 0
    seed = seed if seed is not None else file_seed
    templates = scenario_templates(top, base)
    nodes = scenario_nodes(top, templates)
    generated_nodes: list[NodeDecl] = []
    generated_jobs: list[JobDecl] = []
    generate = top.child("generate", GENERATE_FIELDS)
    if generate is not None:
        generated_nodes, generated_jobs = generate_cluster(
            generate, seed, len(nodes), seed != file_seed
        )
    if not nodes and not generated_nodes:
        raise top.error("nodes", "a scenario needs at least one node (nodes or generate)")
    declared = {n.name for n in nodes}
    clash = next((n.name for n in generated_nodes if n.name in declared), None)
    if generate is not None and clash is not None:
        raise generate.error("nodes", f"generated node {clash} is also declared in nodes")
    capacity = _capacity([*nodes, *generated_nodes], scheduler)
    jobs: list[JobDecl] = []
    node_map = {n.name: n for n in nodes}
    placed: Counter[str] = Counter()
    for index, (line, raw) in enumerate(top.items("jobs")):
        room = MAX_JOBS - len(generated_jobs) - len(jobs)
        jobs.extend(
            scenario_jobs(top, index, line, raw, JobContext(node_map, capacity, room, placed))
        )
    trace = top.data.get("trace")
    if trace is not None:
        room = MAX_JOBS - len(generated_jobs) - len(jobs)
        jobs.extend(trace_jobs(top, trace, base, nodes, capacity, room))
    jobs.extend(generated_jobs)
    seen: set[str] = set()
    for job in jobs:
        if job.spec.name in seen:
            raise ConfigError(f"{job.where}.name: job {job.spec.name} is declared twice")
        seen.add(job.spec.name)
    fabric = scenario_fabric(top, base, [*nodes, *generated_nodes], jobs)
    return Scenario(
        name=name,
        description=top.text("description", "") or "",
        seed=seed,
        scheduler=scheduler,
        nodes=(*nodes, *generated_nodes),
        jobs=tuple(jobs),
        source=source,
        fabric=fabric,
    )


def _capacity(nodes: list[NodeDecl], scheduler: str) -> Capacity:
    """The largest node's GPUs (and CPUs, when first-fit places CPU jobs)."""
    templates = {n.template.name: n.template for n in nodes}.values()
    return Capacity(
        max_gpus=max((len(t.gpus) for t in templates), default=0),
        max_threads=(
            max((len(t.cpus) for t in templates), default=0) if scheduler == "first-fit" else None
        ),
    )


# -- building ------------------------------------------------------------------------------------


def build_cluster(scenario: Scenario, clock: SimClock | None = None) -> SimCluster:
    """A :class:`SimCluster` holding the scenario's nodes and jobs at time 0.

    A placement the cluster refuses (a GPU count that does not match, for instance) is a
    :class:`ConfigError` naming the job's line.
    """
    cluster = SimCluster(clock or SimClock(seed=scenario.seed), scheduler=scenario.scheduler)
    for node in scenario.nodes:
        cluster.add_node(node.name, node.template, node.labels)
    if scenario.fabric is not None and scenario.fabric.gangs:
        cluster.use_gangs(GangBook(scenario.fabric.prices(), scenario.fabric.gangs))
    with cluster.building():
        for job in scenario.jobs:
            try:
                cluster.submit(job.spec, job.placement)
            except ResourceManagerError as exc:
                raise ConfigError(f"{job.where}.placement: {exc}") from None
            except ValueError as exc:
                raise ConfigError(f"{job.where}: {exc}") from None
    return cluster
