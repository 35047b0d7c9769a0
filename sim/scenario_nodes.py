"""A scenario's ``templates:`` (imported from hwloc XML or sysfs) and ``nodes:``
(:mod:`toposcope.sim.scenarios`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from toposcope.errors import ConfigError
from toposcope.identity.names import (
    InvalidNameError,
    check_node_name,
    check_object_name,
)
from toposcope.sim.jobs import (
    GIB,
    MAX_GPU_MEMORY_GB,
    short_repr,
)
from toposcope.sim.scenario_model import MAX_NODES, NODE_FIELDS, TEMPLATE_FIELDS, NodeDecl
from toposcope.sim.scenario_yaml import ScenarioFields, type_name
from toposcope.sim.templates import (
    BUILTIN_TEMPLATES,
    NodeTemplate,
    builtin_template,
    template_from_hwloc_xml,
    template_from_sysfs,
)


def scenario_templates(top: ScenarioFields, base: Path) -> dict[str, NodeTemplate]:
    """The scenario's ``templates:``, imported from hwloc XML or sysfs, by name."""
    raw = top.data.get("templates")
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise top.error("templates", f"expected a mapping of name to file, got {type_name(raw)}")
    names = ScenarioFields(top.source, "templates", raw, tuple(raw), top.line)
    found: dict[str, NodeTemplate] = {}
    for key in raw:
        try:
            check_object_name(key, "template name")
        except InvalidNameError as exc:
            raise names.error(str(key), str(exc)) from None
        if key in BUILTIN_TEMPLATES:
            raise names.error(key, "a built-in template has this name: choose another")
        fields = ScenarioFields(top.source, f"templates.{key}", raw[key], TEMPLATE_FIELDS)
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


def _template(fields: ScenarioFields, imported: Mapping[str, NodeTemplate]) -> NodeTemplate:
    name = fields.required_text("template")
    if name in imported:
        return imported[name]
    if name in BUILTIN_TEMPLATES:
        return builtin_template(name)
    known = [*BUILTIN_TEMPLATES, *imported]
    raise fields.error(
        "template", f"unknown template {short_repr(name)} (known: {', '.join(known)})"
    )


def node_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a node (a host name that is also an object name), or None."""
    try:
        check_node_name(name)
        check_object_name(name, "node name")
    except InvalidNameError as exc:
        return str(exc)
    return None


def _labels(fields: ScenarioFields) -> dict[str, str]:
    raw = fields.data.get("labels") or {}
    if not isinstance(raw, Mapping):
        raise fields.error("labels", f"expected a mapping, got {type_name(raw)}")
    for key, value in raw.items():
        if not isinstance(value, str | int | float | bool):
            got = type_name(value)
            raise fields.error(
                "labels", f"label {short_repr(key)}: expected text or a number, got {got}"
            )
    return {str(k): str(v) for k, v in raw.items()}


def scenario_nodes(top: ScenarioFields, imported: Mapping[str, NodeTemplate]) -> list[NodeDecl]:
    """The scenario's ``nodes:`` (``count`` copies named ``NAME-01``...), validated."""
    nodes: list[NodeDecl] = []
    names: set[str] = set()
    for i, (line, raw) in enumerate(top.items("nodes")):
        fields = ScenarioFields(top.source, f"nodes[{i}]", raw, NODE_FIELDS, line)
        name = fields.required_text("name")
        problem = node_name_problem(name)
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
            problem = node_name_problem(node_name)
            if problem is not None:
                raise fields.error("count", f"with its number, {problem}")
            if node_name in names:
                raise fields.error("name", f"node {node_name} is declared twice")
            names.add(node_name)
            nodes.append(NodeDecl(node_name, template, labels))
    return nodes
