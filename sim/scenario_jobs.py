"""A scenario's ``jobs:`` (with their placements) and ``trace:`` (a Philly/Helios-style
CSV) (:mod:`toposcope.sim.scenarios`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toposcope.cpulist import format_cpulist
from toposcope.errors import ConfigError
from toposcope.identity.names import (
    OBJECT_NAME_RULE,
    InvalidNameError,
    check_object_name,
    is_object_name,
)
from toposcope.rm import Allocation
from toposcope.sim.jobs import (
    GIB,
    MAX_GPU_MEMORY_GB,
    MAX_JOB_GPUS,
    MAX_JOB_THREADS,
    MAX_JOBS,
    MAX_MEMORY_GB,
    MAX_SECONDS,
    MAX_THROUGHPUT,
    JobKind,
    JobSpec,
    job_kind,
    make_job,
    short_repr,
)
from toposcope.sim.scenario_model import (
    JOB_FIELDS,
    MAX_JOBS_PER_NODE,
    PLACEMENT_FIELDS,
    TRACE_FIELDS,
    JobDecl,
    NodeDecl,
)
from toposcope.sim.scenario_yaml import ScenarioFields
from toposcope.sim.traces import Capacity, load_trace


@dataclass
class JobContext:
    """What checking one ``jobs`` entry needs: the declared nodes, the cluster's capacity,
    how many more jobs the scenario may hold, and how many jobs each node holds by
    ``placement`` so far (updated).
    """

    nodes: Mapping[str, NodeDecl]
    capacity: Capacity
    room: int
    placed: Counter[str]


def scenario_jobs(
    top: ScenarioFields, index: int, line: int, raw: object, context: JobContext
) -> list[JobDecl]:
    """The jobs of entry ``index`` of ``jobs:`` (``count`` copies), validated."""
    fields = ScenarioFields(top.source, f"jobs[{index}]", raw, JOB_FIELDS, line)
    name = fields.required_text("name")
    try:
        check_object_name(name, "job name")
    except InvalidNameError as exc:
        raise fields.error("name", str(exc)) from None
    kind_text = fields.required_text("type")
    try:
        kind = job_kind(kind_text)
    except ValueError as exc:
        raise fields.error("type", str(exc)) from None
    gpus = fields.integer("gpus", maximum=MAX_JOB_GPUS)
    if kind is JobKind.CPU_TRAIN and gpus:
        raise fields.error("gpus", "a cpu-train job uses no GPU")
    placement_fields = fields.child("placement", PLACEMENT_FIELDS)
    gpu_total = 40 * GIB
    if placement_fields is not None:
        node_name = placement_fields.required_text("node")
        if node_name not in context.nodes:
            raise placement_fields.error("node", f"unknown node {short_repr(node_name)}")
        gpu_total = context.nodes[node_name].template.gpu_memory_bytes or gpu_total
    count = fields.integer("count", minimum=1, maximum=MAX_JOBS)
    if (count or 1) > context.room:
        raise fields.error(
            "count" if count is not None else "name",
            f"a scenario holds at most {MAX_JOBS:,} jobs (trace and generated ones included)",
        )
    spec_args: dict[str, Any] = {
        "gpus": gpus,
        "threads": fields.integer("threads", minimum=1, maximum=MAX_JOB_THREADS),
        "memory_gb": fields.number("memory_gb", maximum=MAX_MEMORY_GB),
        "gpu_memory_gb": fields.number("gpu_memory_gb", maximum=MAX_GPU_MEMORY_GB),
        "gpu_total_bytes": gpu_total,
        "numa_sensitivity": fields.number("numa_sensitivity", maximum=1.0),
        "comm_intensity": fields.number("comm_intensity", maximum=1.0),
        "input_intensity": fields.number("input_intensity", maximum=1.0),
        "base_throughput": fields.number("throughput", maximum=MAX_THROUGHPUT),
        "submit_time": fields.number("submit", 0.0, maximum=MAX_SECONDS) or 0.0,
        "duration": fields.number("duration", maximum=MAX_SECONDS),
    }
    if spec_args["duration"] == 0.0:
        raise fields.error("duration", "must be positive (leave it out to run until stopped)")
    names = [name] if count is None else [f"{name}-{k}" for k in range(1, count + 1)]
    bad = next((n for n in names if not is_object_name(n)), None)
    if bad is not None:
        raise fields.error("count", f"with its number, job name {bad!r} is not {OBJECT_NAME_RULE}")
    _check_fits(fields, make_job(name, kind, **spec_args), context.capacity, placement_fields)
    result = []
    for job_name in names:
        spec = make_job(job_name, kind, **spec_args)
        placement = None
        if placement_fields is not None:
            placement = _placement(placement_fields, spec, context.nodes)
        result.append(JobDecl(spec, placement, fields.where()))
    if placement_fields is not None:
        node_name = placement_fields.required_text("node")
        context.placed[node_name] += len(result)
        if context.placed[node_name] > MAX_JOBS_PER_NODE:
            raise placement_fields.error(
                "node", f"more than {MAX_JOBS_PER_NODE} jobs placed on {node_name}"
            )
    return result


def _check_fits(
    fields: ScenarioFields, spec: JobSpec, capacity: Capacity, placement: ScenarioFields | None
) -> None:
    """Refuse a job that no node could ever hold (see :class:`Capacity`)."""
    problem = capacity.gpu_problem(spec.gpus)
    if problem is not None:
        raise fields.error("gpus" if fields.has("gpus") else "type", problem)
    if placement is None:
        problem = capacity.thread_problem(spec.gpus, spec.threads)
        if problem is not None:
            raise fields.error("threads" if fields.has("threads") else "type", problem)


def _placement(fields: ScenarioFields, spec: JobSpec, nodes: Mapping[str, NodeDecl]) -> Allocation:
    node = nodes[fields.required_text("node")]
    template = node.template
    gpus = fields.int_list("gpus") or []
    if len(gpus) != spec.gpus:
        raise fields.error("gpus", f"the job asks for {spec.gpus} GPU(s), {len(gpus)} given")
    known_gpus = {g.index for g in template.gpus}
    bad = [g for g in gpus if g not in known_gpus]
    if bad:
        raise fields.error(
            "gpus", f"GPUs {short_repr(bad)} are not on {node.name} ({template.name})"
        )
    cpus = fields.int_list("cpus") or []
    bad = [c for c in cpus if c not in template.cpu_set]
    if bad:
        raise fields.error(
            "cpus",
            f"CPUs {format_cpulist(bad)} are not on {node.name} "
            f"({template.name} has {format_cpulist(template.cpus)})",
        )
    mems = fields.int_list("mems") or []
    bad = [m for m in mems if m not in template.numa_ids]
    if bad:
        raise fields.error(
            "mems",
            f"NUMA nodes {short_repr(bad)} are not on {node.name} "
            f"(it has {list(template.numa_ids)})",
        )
    return Allocation(node.name, cpus, mems, gpus)


def trace_jobs(
    top: ScenarioFields,
    raw: object,
    base: Path,
    nodes: list[NodeDecl],
    capacity: Capacity,
    room: int,
) -> list[JobDecl]:
    """The jobs of ``trace:`` (a CSV path, or ``file``/``limit``/``offset``), spread over
    ``nodes`` only by the scheduler; at most ``room`` more jobs."""
    if isinstance(raw, str):
        file, limit, offset = raw, None, 0.0
    else:
        fields = top.child("trace", TRACE_FIELDS)
        assert fields is not None
        file = fields.required_text("file")
        limit = fields.integer("limit", minimum=1, maximum=MAX_JOBS)
        offset = fields.number("offset", 0.0, maximum=MAX_SECONDS) or 0.0
    gpu_total = max((n.template.gpu_memory_bytes for n in nodes), default=40 * GIB) or 40 * GIB
    where = top.where("trace")
    try:
        specs = load_trace(
            base / file,
            time_offset=offset,
            gpu_total_bytes=gpu_total,
            limit=limit,
            capacity=capacity,
            max_jobs=max(room, 0),
        )
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return [JobDecl(spec, None, where) for spec in specs]
