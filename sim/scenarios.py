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

Job fields: ``type``, ``gpus``, ``threads``, ``memory_gb``, ``gpu_memory_gb`` (per GPU),
``numa_sensitivity``, ``comm_intensity``, ``input_intensity`` (0..1), ``throughput`` (at
the best placement), ``submit`` and ``duration`` (simulated seconds; no duration: runs until
stopped), ``count`` and ``placement`` (``node``, ``gpus``, ``cpus`` as a cpulist string or a
list, ``mems``; GPUs may be shared between placed jobs on purpose). Paths are relative to
the scenario file. Any problem raises :class:`~toposcope.errors.ConfigError` as
``FILE:LINE: FIELD: problem``.

Names follow :mod:`toposcope.names`: node names are host names that are also object names
(they become URLs, labels and directory names), job and template names are object names.
Numbers must be finite and within the limits below (:data:`MAX_NODES`, and
:data:`~toposcope.sim.jobs.MAX_JOBS` and the other job limits of :mod:`toposcope.sim.jobs`);
counts are checked before anything is expanded or generated. A job that no node could ever
hold (more GPUs than the largest node has, or, for a CPU job the first-fit scheduler must
place, more threads than the largest node has CPUs) is an error too.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from toposcope.cpulist import format_cpulist, parse_cpulist
from toposcope.errors import ConfigError
from toposcope.names import (
    OBJECT_NAME_RULE,
    InvalidNameError,
    check_node_name,
    check_object_name,
    is_object_name,
)
from toposcope.resources import Allocation, ResourceManagerError
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.jobs import (
    GIB,
    MAX_GPU_MEMORY_GB,
    MAX_JOB_GPUS,
    MAX_JOB_THREADS,
    MAX_JOBS,
    MAX_MEMORY_GB,
    MAX_SECONDS,
    MAX_THROUGHPUT,
    Capacity,
    JobKind,
    JobSpec,
    job_kind,
    load_trace,
    make_job,
    short_repr,
)
from toposcope.sim.templates import (
    BUILTIN_TEMPLATES,
    NodeTemplate,
    builtin_template,
    template_from_hwloc_xml,
    template_from_sysfs,
)

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"

#: Most nodes of a scenario (declared and generated), and most jobs placed on one node by
#: ``placement`` or ``generate`` (the model re-evaluates a node's jobs together, so its cost
#: grows fast with their number). The job limits live in :mod:`toposcope.sim.jobs`.
MAX_NODES = 10_000
MAX_JOBS_PER_NODE = 64
_TOP_FIELDS = (
    "name", "description", "seed", "scheduler", "templates", "nodes", "jobs", "trace", "generate",
)  # fmt: skip
_NODE_FIELDS = ("name", "template", "count", "labels")
_JOB_FIELDS = (
    "name", "type", "gpus", "threads", "memory_gb", "gpu_memory_gb", "numa_sensitivity",
    "comm_intensity", "input_intensity", "throughput", "submit", "duration", "count",
    "placement",
)  # fmt: skip
_PLACEMENT_FIELDS = ("node", "gpus", "cpus", "mems")
_TEMPLATE_FIELDS = ("hwloc_xml", "sysfs", "gpu_model", "gpu_memory_gb")
_TRACE_FIELDS = ("file", "limit", "offset")
_GENERATE_FIELDS = ("nodes", "workloads", "seed")


# -- YAML with line numbers ------------------------------------------------------------------


class _Map(dict[Any, Any]):
    """A YAML mapping that remembers its line and each key's line (1-based)."""

    line: int = 0
    key_lines: dict[Any, int]


class _Seq(list[Any]):
    """A YAML sequence that remembers its line and each item's line (1-based)."""

    line: int = 0
    item_lines: list[int]


class _Loader(yaml.SafeLoader):
    """Safe YAML loader whose mappings and sequences carry line numbers, and whose values
    that cannot be built (a date such as ``2024-13-45``) are errors at their line.
    """

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """The value of ``node``; a value error becomes a YAML error at the node's line."""
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {short_repr(node.value)}: {exc}", node.start_mark
            ) from None


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    result = _Map()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, Hashable):
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"a key must be text or a number, not a {_type(key)} ({short_repr(key)})",
                key_node.start_mark,
            )
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> _Seq:
    result = _Seq(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_seq)


class _Fields:
    """One mapping of the file being checked: typed getters that fail with file, line, field."""

    def __init__(
        self, source: str, path: str, data: object, allowed: tuple[str, ...], line: int = 0
    ) -> None:
        self.source = source
        self.path = path
        self.line = getattr(data, "line", line)
        self.data: Mapping[Any, Any] = {}
        if not isinstance(data, Mapping):
            raise self.error("", f"expected a mapping, got {_type(data)}")
        self.data = data
        for key in data:
            if key not in allowed:
                raise self.error(str(key), f"unknown field (known: {', '.join(allowed)})")

    def _line_of(self, key: str) -> int:
        lines: dict[Any, int] = getattr(self.data, "key_lines", {})
        return lines.get(key, self.line)

    def where(self, key: str = "") -> str:
        """``FILE:LINE: FIELD`` for a key of this mapping."""
        field = f"{self.path}.{key}" if self.path and key else (key or self.path or "(top)")
        return f"{self.source}:{self._line_of(key) if key else self.line}: {field}"

    def error(self, key: str, problem: str) -> ConfigError:
        """A :class:`ConfigError` for ``key`` (or the mapping itself)."""
        return ConfigError(f"{self.where(key)}: {problem}")

    def has(self, key: str) -> bool:
        """Whether ``key`` is present and not null."""
        return self.data.get(key) is not None

    def text(self, key: str, default: str | None = None) -> str | None:
        """A string field."""
        value = self.data.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(key, f"expected text, got {_type(value)}")
        return value

    def required_text(self, key: str) -> str:
        """A string field that must be there."""
        value = self.text(key)
        if not value:
            raise self.error(key, "is required")
        return value

    def integer(
        self,
        key: str,
        default: int | None = None,
        minimum: int = 0,
        maximum: int | None = None,
    ) -> int | None:
        """An integer field within ``[minimum, maximum]``."""
        value = self.data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {short_repr(value)}")
        if value < minimum:
            raise self.error(key, f"must be at least {minimum}, got {short_repr(value)}")
        if maximum is not None and value > maximum:
            raise self.error(key, f"must be at most {maximum:,}, got {short_repr(value)}")
        return value

    def number(
        self,
        key: str,
        default: float | None = None,
        *,
        minimum: float = 0.0,
        maximum: float,
    ) -> float | None:
        """A finite number field within ``[minimum, maximum]``."""
        value = self.data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, f"expected a number, got {short_repr(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(key, f"must be a finite number, got {value}")
        if value < minimum:
            raise self.error(key, f"must be at least {minimum:g}, got {short_repr(value)}")
        if value > maximum:
            raise self.error(key, f"must be at most {maximum:g}, got {short_repr(value)}")
        return float(value)

    def items(self, key: str) -> list[tuple[int, Any]]:
        """A list field as ``(line, item)`` pairs."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(key, f"expected a list, got {_type(value)}")
        lines = getattr(value, "item_lines", [self._line_of(key)] * len(value))
        return list(zip(lines, value, strict=True))

    def child(self, key: str, allowed: tuple[str, ...]) -> _Fields | None:
        """A nested mapping field."""
        value = self.data.get(key)
        if value is None:
            return None
        path = f"{self.path}.{key}" if self.path else key
        return _Fields(self.source, path, value, allowed, self._line_of(key))

    def int_list(self, key: str) -> list[int] | None:
        """A list of integers, or a cpulist string (``"0-13,28-41"``, bounded by
        :func:`~toposcope.cpulist.parse_cpulist`).
        """
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            try:
                return list(parse_cpulist(value))
            except ValueError as exc:
                raise self.error(key, f"not a cpulist: {exc}") from None
        if isinstance(value, int) and not isinstance(value, bool):
            return [value]
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.error(
                key, f"expected a list of integers or a cpulist, got {short_repr(value)}"
            )
        return list(value)


def _type(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


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


def _load_yaml(text: str, source: str) -> object:
    """The YAML document with line numbers; any problem is a :class:`ConfigError`."""
    try:
        return yaml.load(text, Loader=_Loader)
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
    data = _load_yaml(text, source)
    top = _Fields(source, "", data if data is not None else _Map(), _TOP_FIELDS, 1)
    name = top.text("name") or Path(source).stem
    scheduler = top.text("scheduler", "first-fit") or "first-fit"
    if scheduler not in ("first-fit", "none"):
        raise top.error("scheduler", f"must be first-fit or none, got {short_repr(scheduler)}")
    file_seed = top.integer("seed", 0) or 0
    seed = seed if seed is not None else file_seed
    templates = _templates(top, base)
    nodes = _nodes(top, templates)
    generated_nodes: list[NodeDecl] = []
    generated_jobs: list[JobDecl] = []
    generate = top.child("generate", _GENERATE_FIELDS)
    if generate is not None:
        generated_nodes, generated_jobs = _generate(generate, seed, len(nodes), seed != file_seed)
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
        jobs.extend(_jobs(top, index, line, raw, _JobContext(node_map, capacity, room, placed)))
    trace = top.data.get("trace")
    if trace is not None:
        room = MAX_JOBS - len(generated_jobs) - len(jobs)
        jobs.extend(_trace_jobs(top, trace, base, nodes, capacity, room))
    jobs.extend(generated_jobs)
    seen: set[str] = set()
    for job in jobs:
        if job.spec.name in seen:
            raise ConfigError(f"{job.where}.name: job {job.spec.name} is declared twice")
        seen.add(job.spec.name)
    return Scenario(
        name=name,
        description=top.text("description", "") or "",
        seed=seed,
        scheduler=scheduler,
        nodes=(*nodes, *generated_nodes),
        jobs=tuple(jobs),
        source=source,
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


def _templates(top: _Fields, base: Path) -> dict[str, NodeTemplate]:
    raw = top.data.get("templates")
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise top.error("templates", f"expected a mapping of name to file, got {_type(raw)}")
    names = _Fields(top.source, "templates", raw, tuple(raw), top.line)
    found: dict[str, NodeTemplate] = {}
    for key in raw:
        try:
            check_object_name(key, "template name")
        except InvalidNameError as exc:
            raise names.error(str(key), str(exc)) from None
        if key in BUILTIN_TEMPLATES:
            raise names.error(key, "a built-in template has this name: choose another")
        fields = _Fields(top.source, f"templates.{key}", raw[key], _TEMPLATE_FIELDS)
        xml, sysfs = fields.text("hwloc_xml"), fields.text("sysfs")
        if (xml is None) == (sysfs is None):
            raise fields.error("", "needs exactly one of hwloc_xml or sysfs")
        field = "hwloc_xml" if xml is not None else "sysfs"
        try:
            if xml is not None:
                template = template_from_hwloc_xml(base / xml, key)
            else:
                assert sysfs is not None
                template = template_from_sysfs(base / sysfs, key)
        except ConfigError as exc:
            raise fields.error(field, str(exc)) from None
        except Exception as exc:
            raise fields.error(field, f"cannot import: {exc}") from exc
        model = fields.text("gpu_model")
        memory = fields.number("gpu_memory_gb", minimum=1.0, maximum=MAX_GPU_MEMORY_GB)
        if model is not None or memory is not None:
            template = _with_gpu(template, model, memory)
        found[key] = template
    return found


def _with_gpu(template: NodeTemplate, model: str | None, memory_gb: float | None) -> NodeTemplate:
    return NodeTemplate(
        name=template.name,
        topology=template.topology,
        gpus=template.gpus,
        nics=template.nics,
        gpu_model=model or template.gpu_model,
        gpu_memory_bytes=int(memory_gb * GIB) if memory_gb else template.gpu_memory_bytes,
        description=template.description,
    )


def _template(fields: _Fields, imported: Mapping[str, NodeTemplate]) -> NodeTemplate:
    name = fields.required_text("template")
    if name in imported:
        return imported[name]
    if name in BUILTIN_TEMPLATES:
        return builtin_template(name)
    known = [*BUILTIN_TEMPLATES, *imported]
    raise fields.error(
        "template", f"unknown template {short_repr(name)} (known: {', '.join(known)})"
    )


def _node_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a node (a host name that is also an object name), or None."""
    try:
        check_node_name(name)
        check_object_name(name, "node name")
    except InvalidNameError as exc:
        return str(exc)
    return None


def _labels(fields: _Fields) -> dict[str, str]:
    raw = fields.data.get("labels") or {}
    if not isinstance(raw, Mapping):
        raise fields.error("labels", f"expected a mapping, got {_type(raw)}")
    for key, value in raw.items():
        if not isinstance(value, str | int | float | bool):
            raise fields.error(
                "labels", f"label {short_repr(key)}: expected text or a number, got {_type(value)}"
            )
    return {str(k): str(v) for k, v in raw.items()}


def _nodes(top: _Fields, imported: Mapping[str, NodeTemplate]) -> list[NodeDecl]:
    nodes: list[NodeDecl] = []
    names: set[str] = set()
    for i, (line, raw) in enumerate(top.items("nodes")):
        fields = _Fields(top.source, f"nodes[{i}]", raw, _NODE_FIELDS, line)
        name = fields.required_text("name")
        problem = _node_name_problem(name)
        if problem is not None:
            raise fields.error("name", problem)
        template = _template(fields, imported)
        count = fields.integer("count", minimum=1, maximum=MAX_NODES)
        if len(nodes) + (count or 1) > MAX_NODES:
            raise fields.error(
                "count" if count is not None else "name",
                f"a scenario holds at most {MAX_NODES:,} nodes",
            )
        labels = _labels(fields)
        expanded = [name] if count is None else [f"{name}-{k:02d}" for k in range(1, count + 1)]
        for node_name in expanded:
            problem = _node_name_problem(node_name)
            if problem is not None:
                raise fields.error("count", f"with its number, {problem}")
            if node_name in names:
                raise fields.error("name", f"node {node_name} is declared twice")
            names.add(node_name)
            nodes.append(NodeDecl(node_name, template, labels))
    return nodes


@dataclass
class _JobContext:
    """What checking one ``jobs`` entry needs: the declared nodes, the cluster's capacity,
    how many more jobs the scenario may hold, and how many jobs each node holds by
    ``placement`` so far (updated).
    """

    nodes: Mapping[str, NodeDecl]
    capacity: Capacity
    room: int
    placed: Counter[str]


def _jobs(top: _Fields, index: int, line: int, raw: object, context: _JobContext) -> list[JobDecl]:
    fields = _Fields(top.source, f"jobs[{index}]", raw, _JOB_FIELDS, line)
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
    placement_fields = fields.child("placement", _PLACEMENT_FIELDS)
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
    fields: _Fields, spec: JobSpec, capacity: Capacity, placement: _Fields | None
) -> None:
    """Refuse a job that no node could ever hold (see :class:`Capacity`)."""
    problem = capacity.gpu_problem(spec.gpus)
    if problem is not None:
        raise fields.error("gpus" if fields.has("gpus") else "type", problem)
    if placement is None:
        problem = capacity.thread_problem(spec.gpus, spec.threads)
        if problem is not None:
            raise fields.error("threads" if fields.has("threads") else "type", problem)


def _placement(fields: _Fields, spec: JobSpec, nodes: Mapping[str, NodeDecl]) -> Allocation:
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


def _trace_jobs(
    top: _Fields,
    raw: object,
    base: Path,
    nodes: list[NodeDecl],
    capacity: Capacity,
    room: int,
) -> list[JobDecl]:
    if isinstance(raw, str):
        file, limit, offset = raw, None, 0.0
    else:
        fields = top.child("trace", _TRACE_FIELDS)
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


# -- generated clusters -------------------------------------------------------------------------


def _generate(
    fields: _Fields, default_seed: int, existing: int, override: bool
) -> tuple[list[NodeDecl], list[JobDecl]]:
    """A deterministic synthetic cluster: ``nodes`` per template, ``workloads`` spread evenly,
    each placed on its node with a realistic share of poor placements. The counts are
    checked against the limits before anything is generated.
    """
    raw_nodes = fields.data.get("nodes")
    if not isinstance(raw_nodes, Mapping) or not raw_nodes:
        raise fields.error("nodes", "expected a mapping of template name to node count")
    counts: list[tuple[NodeTemplate, int]] = []
    node_fields = fields.child("nodes", tuple(str(k) for k in raw_nodes))
    assert node_fields is not None
    for key in raw_nodes:
        if str(key) not in BUILTIN_TEMPLATES:
            raise node_fields.error(
                str(key), f"unknown template (built-in: {', '.join(BUILTIN_TEMPLATES)})"
            )
        count = node_fields.integer(str(key), minimum=1, maximum=MAX_NODES)
        if count is None:
            raise node_fields.error(str(key), "expected a node count")
        counts.append((builtin_template(str(key)), count))
    total_nodes = sum(c for _, c in counts)
    if existing + total_nodes > MAX_NODES:
        raise fields.error(
            "nodes",
            f"{total_nodes:,} generated nodes and {existing:,} declared ones: a scenario holds "
            f"at most {MAX_NODES:,} nodes",
        )
    workloads = fields.integer("workloads", total_nodes * 4, minimum=0, maximum=MAX_JOBS) or 0
    if workloads > total_nodes * MAX_JOBS_PER_NODE:
        raise fields.error(
            "workloads",
            f"{workloads:,} workloads on {total_nodes:,} node(s): at most {MAX_JOBS_PER_NODE} "
            "per node",
        )
    own = fields.integer("seed", default_seed) or 0
    rng = random.Random(default_seed if override else own)
    nodes: list[NodeDecl] = []
    for template, count in counts:
        for _ in range(count):
            nodes.append(
                NodeDecl(f"node-{existing + len(nodes) + 1:04d}", template, {"generated": "true"})
            )
    per_node = [workloads // len(nodes) + (1 if i < workloads % len(nodes) else 0)
                for i in range(len(nodes))]  # fmt: skip
    jobs: list[JobDecl] = []
    where = fields.where()
    for node, wanted in zip(nodes, per_node, strict=True):
        jobs.extend(
            JobDecl(spec, alloc, where) for spec, alloc in _node_jobs(node, wanted, rng, len(jobs))
        )
    return nodes, jobs


def _node_jobs(
    node: NodeDecl, wanted: int, rng: random.Random, first: int
) -> list[tuple[JobSpec, Allocation]]:
    """``wanted`` jobs on one generated node: GPU jobs share out its GPUs, CPU jobs its CPUs;
    about a third get a poor placement (GPUs across switches or sockets, memory or threads
    on the wrong NUMA node, no pinning).
    """
    template = node.template
    free = [g.index for g in template.gpus]
    result: list[tuple[JobSpec, Allocation]] = []
    numa_with_cpus = [n.id for n in template.topology.numa_nodes if n.cpus]
    for k in range(wanted):
        name = f"job-{first + k + 1:05d}"
        slots_left = wanted - k
        if free:
            share = max(len(free) // slots_left, 1)
            roll = rng.random()
            if roll < 0.15:
                kind, gpus = JobKind.NOTEBOOK, 1
            elif roll < 0.35:
                kind, gpus = JobKind.INFERENCE, 1
            else:
                kind, gpus = JobKind.GPU_TRAIN, min(share, 2 if share < 4 else 4)
            gpus = min(gpus, len(free))
            spec = make_job(name, kind, gpus=gpus, gpu_total_bytes=template.gpu_memory_bytes)
            poor = rng.random() < 0.35
            chosen = sorted(rng.sample(free, gpus)) if poor else free[:gpus]
            for g in chosen:
                free.remove(g)
            home = template.gpu(chosen[0]).numa_node
            if home is None or poor:
                home = rng.choice(numa_with_cpus)
            pinned = rng.random() < 0.5
            cpus = list(template.node_cpus(home)) if pinned else []
            mems = [home] if pinned else []
            result.append((spec, Allocation(node.name, cpus, mems, chosen)))
            continue
        threads = max(len(template.cpus) // max(wanted, 1) // 2, 1)
        spec = make_job(name, JobKind.CPU_TRAIN, threads=threads, memory_gb=16)
        roll = rng.random()
        home = numa_with_cpus[k % len(numa_with_cpus)]
        if roll < 0.3:
            cpus, mems = [], []
        elif roll < 0.5:
            cpus = list(template.node_cpus(home))
            mems = [numa_with_cpus[(k + 1) % len(numa_with_cpus)]]
        else:
            cpus, mems = list(template.node_cpus(home)), [home]
        result.append((spec, Allocation(node.name, cpus, mems, [])))
    return result


# -- building ------------------------------------------------------------------------------------


def build_cluster(scenario: Scenario, clock: SimClock | None = None) -> SimCluster:
    """A :class:`SimCluster` holding the scenario's nodes and jobs at time 0.

    A placement the cluster refuses (a GPU count that does not match, for instance) is a
    :class:`ConfigError` naming the job's line.
    """
    cluster = SimCluster(clock or SimClock(seed=scenario.seed), scheduler=scenario.scheduler)
    for node in scenario.nodes:
        cluster.add_node(node.name, node.template, node.labels)
    for job in scenario.jobs:
        try:
            cluster.submit(job.spec, job.placement)
        except ResourceManagerError as exc:
            raise ConfigError(f"{job.where}.placement: {exc}") from None
        except ValueError as exc:
            raise ConfigError(f"{job.where}: {exc}") from None
    return cluster
