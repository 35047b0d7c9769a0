"""A fabric written by hand: a YAML (or JSON) file, checked key by key (docs/fabric.md).

The schema is the JSON form :mod:`toposcope.fabric.jsonform` writes, so ``toposcope fabric
show --format json`` output reads back; by hand, ``nodes`` of a switch or block may also be a
Slurm host list (``gpu[01-16]``)::

    switches:
      - {name: spine1, switches: [leaf1, leaf2], uplink_gbps: 3200, downlink_gbps: 6400}
      - {name: leaf1, nodes: "gpu[01-16]", uplink_gbps: 6400, downlink_gbps: 6400}
    blocks:
      - {name: nvl72-1, nodes: "gpu[01-18]"}
    block_sizes: [18]
    nodes:
      - name: gpu01
        ports: [{nic: mlx5_0, switch: leaf1, gbps: 400}]

A switch's ``level`` is computed from its children as Slurm does when not given. Unknown
keys, wrong types, duplicate keys and every rule of the model are refused as
``file:line: field: problem``; the file is bounded (:data:`MAX_BYTES`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from toposcope.boundedread import read_bounded
from toposcope.fabric.located import Lines, assemble_at
from toposcope.fabric.model import (
    Block,
    Fabric,
    FabricError,
    Node,
    Port,
    Switch,
    levels_from_children,
)
from toposcope.hostlist import HostlistError, expand_hostlist
from toposcope.yamlnodes import STR, YamlNodes, json_nodes

if TYPE_CHECKING:
    import yaml

#: the largest fabric file read, in bytes
MAX_BYTES = 64 << 20
_TOP = ("switches", "blocks", "block_sizes", "nodes")
_SWITCH = (
    "name",
    "level",
    "level_name",
    "switches",
    "nodes",
    "uplink_gbps",
    "downlink_gbps",
    "oversubscription",
    "link_speed",
)
_BLOCK = ("name", "nodes", "block_sizes")
_NODE = ("name", "ports")
_PORT = ("nic", "switch", "gbps")


class _Reader(YamlNodes):
    """The checks of :class:`~toposcope.yamlnodes.YamlNodes`, refusals located by ``lines``,
    and Slurm host lists where a list of names is expected.
    """

    def __init__(self, lines: Lines) -> None:
        super().__init__(lines.error)
        self.lines = lines

    def names(self, node: yaml.Node, field: str) -> tuple[str, ...]:
        """A list of names, or one Slurm host list string."""
        if isinstance(node, self._scalar) and node.tag == STR:
            try:
                return expand_hostlist(str(node.value))
            except HostlistError as exc:
                raise self.error(node, field, str(exc)) from None
        return tuple(
            self.text(item, f"{field}[{index}]")
            for index, item in enumerate(self.sequence(node, field))
        )


def _switch(reader: _Reader, node: yaml.Node, field: str) -> tuple[Switch, int | None, int]:
    entries = reader.mapping(node, field, _SWITCH)
    if "name" not in entries:
        raise reader.error(node, field, "needs a name")
    name = reader.text(entries["name"], f"{field}.name")
    reader.lines.note("switch", name, reader.line(node))
    optional: dict[str, float | None] = {
        key: reader.number(entries[key], f"{field}.{key}") if key in entries else None
        for key in ("uplink_gbps", "downlink_gbps")
    }
    switch = Switch(
        name,
        switches=reader.names(entries["switches"], f"{field}.switches")
        if "switches" in entries
        else (),
        nodes=reader.names(entries["nodes"], f"{field}.nodes") if "nodes" in entries else (),
        uplink_gbps=optional["uplink_gbps"],
        downlink_gbps=optional["downlink_gbps"],
        link_speed=reader.whole(entries["link_speed"], f"{field}.link_speed")
        if "link_speed" in entries
        else None,
    )
    for child in switch.nodes:
        reader.lines.note("node", child, reader.line(node))
    level = reader.whole(entries["level"], f"{field}.level") if "level" in entries else None
    return switch, level, reader.line(node)


def _node(reader: _Reader, node: yaml.Node, field: str) -> Node:
    entries = reader.mapping(node, field, _NODE)
    if "name" not in entries:
        raise reader.error(node, field, "needs a name")
    name = reader.text(entries["name"], f"{field}.name")
    reader.lines.where[("node", name)] = reader.line(node)
    ports: list[Port] = []
    items = reader.sequence(entries["ports"], f"{field}.ports") if "ports" in entries else []
    for index, item in enumerate(items):
        where = f"{field}.ports[{index}]"
        port = reader.mapping(item, where, _PORT)
        for key in ("nic", "switch"):
            if key not in port:
                raise reader.error(item, where, f"needs a {key}")
        ports.append(
            Port(
                reader.text(port["nic"], f"{where}.nic"),
                reader.text(port["switch"], f"{where}.switch"),
                reader.number(port["gbps"], f"{where}.gbps") if "gbps" in port else None,
            )
        )
    return Node(name, tuple(ports))


def _compose(text: str, lines: Lines) -> yaml.Node:
    import yaml  # noqa: PLC0415  (PyYAML only when a fabric file is read)

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose(text, Loader=loader)
    except (yaml.YAMLError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        raise lines.error(mark.line + 1 if mark else None, f"not valid YAML: {exc}") from None
    if root is None:
        raise lines.error(None, "empty: a fabric needs switches, blocks or nodes")
    return root


def parse_fabric_yaml(text: str, source: str = "fabric.yaml") -> Fabric:
    """The fabric of YAML (or JSON) ``text``; ``source`` names it in errors.

    JSON is read by the fast JSON parser first; only when something in it is refused is the
    text composed as YAML again, for the line of the refusal.
    """
    fast = json_nodes(text)
    if fast is not None:
        try:
            return _read(fast, Lines(source))
        except FabricError:
            pass  # read again below, with line numbers, for the message
    lines = Lines(source)
    return _read(_compose(text, lines), lines)


def _read(root: yaml.Node, lines: Lines) -> Fabric:
    """The fabric of the composed document ``root``."""
    reader = _Reader(lines)
    top = reader.mapping(root, "(top level)", _TOP)

    def items(key: str) -> list[Any]:
        return reader.sequence(top[key], key) if key in top else []

    declared = [
        _switch(reader, item, f"switches[{index}]") for index, item in enumerate(items("switches"))
    ]
    blocks: list[Block] = []
    for index, item in enumerate(items("blocks")):
        entries = reader.mapping(item, f"blocks[{index}]", _BLOCK)
        if "name" not in entries:
            raise reader.error(item, f"blocks[{index}]", "needs a name")
        name = reader.text(entries["name"], f"blocks[{index}].name")
        lines.note("block", name, reader.line(item))
        nodes = (
            reader.names(entries["nodes"], f"blocks[{index}].nodes") if "nodes" in entries else ()
        )
        for child in nodes:
            lines.note("node", child, reader.line(item))
        blocks.append(Block(name, nodes))
    sizes: tuple[int, ...] = ()
    if "block_sizes" in top:
        lines.note("sizes", "", reader.line(top["block_sizes"]))
        sizes = tuple(
            reader.whole(item, f"block_sizes[{index}]")
            for index, item in enumerate(reader.sequence(top["block_sizes"], "block_sizes"))
        )
    nodes_declared = [
        _node(reader, item, f"nodes[{index}]") for index, item in enumerate(items("nodes"))
    ]
    seen: set[str] = set()
    for switch, _, line in declared:
        if switch.name in seen:
            raise lines.error(line, f"switch {switch.name} is declared twice")
        seen.add(switch.name)
    try:
        computed = levels_from_children({s.name: s.switches for s, _, _ in declared})
    except FabricError as exc:
        raise lines.locate(exc) from None
    switches = [
        Switch(
            s.name,
            computed[s.name] if level is None else level,
            s.switches,
            s.nodes,
            s.uplink_gbps,
            s.downlink_gbps,
            s.link_speed,
        )
        for s, level, _ in declared
    ]
    return assemble_at(lines, switches, blocks, nodes_declared, sizes)


def read_fabric_file(path: str | Path) -> Fabric:
    """The fabric of the YAML or JSON file at ``path`` (errors name the file)."""
    raw = read_bounded(path, MAX_BYTES, str(path), what="a fabric file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FabricError(f"{path}: not UTF-8 text") from None
    return parse_fabric_yaml(text, str(path))
