"""The network between nodes: switches in levels, blocks, and each node's NIC ports.

One model whatever the source (Slurm's ``topology.conf``, ``ibnetdiscover``, Kubernetes
labels with Kueue levels, a YAML file), so that every reader is checked by the same rules and
every consumer (``toposcope fabric show``, the ``topology.conf`` writer) reads one shape:

* a :class:`Switch` has a ``level`` (0 for a leaf, 1 for a spine, 2 for a core, any depth up
  to :data:`MAX_LEVELS`) and either child switches, each on a lower level (so the graph has no
  cycles), or child nodes; where its uplink and downlink bandwidth are known its
  oversubscription is their ratio. A switch may have several parents (a fat tree's leaf
  reaches every spine of its unit);
* a :class:`Block` is a set of nodes with fast links between them: Slurm's topology/block
  ``BlockName=`` lines, NVLink domains such as NVL72 racks; :attr:`Fabric.block_sizes` are
  Slurm's ``BlockSizes`` (the planning base size, then each higher level a power of two
  times the one before);
* a :class:`Node` has :class:`Port` entries, each a NIC and the leaf switch it reaches (in a
  rail-optimised cluster port k of every node of a unit reaches leaf k: a rail).

Everything is checked when a :class:`Fabric` is built: names by
:mod:`toposcope.identity.names` (node names are host names, switch and block names object
names), unique names, children that exist, levels that fall towards the leaves, a node under
at most one leaf per port, each node in at most one block, and counts bounded. A refusal is a
:class:`FabricError` naming what it is about, so that a reader can say on which line of its
file that thing was declared.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from toposcope.errors import ConfigError
from toposcope.identity.names import (
    NODE_NAME_RULE,
    OBJECT_NAME_RULE,
    is_node_name,
    is_object_name,
)

#: the most levels of switches (leaf, spine, core ... are 3)
MAX_LEVELS = 16
#: the most switches, nodes and blocks a fabric may have
MAX_SWITCHES = 100_000
MAX_NODES = 1_000_000
MAX_BLOCKS = 100_000
#: the most NIC ports one node may have, and the most ``BlockSizes``
MAX_PORTS = 64
MAX_BLOCK_SIZES = 16
#: a NIC's name (``mlx5_0``, ``HCA-1``, ``eth0``)
NIC_NAME_RULE = "1-64 letters, digits, '.', '_', ':' and '-'"
_NIC_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
#: what each level is called when shown
LEVEL_NAMES = ("leaf", "spine", "core")


class FabricError(ConfigError):
    """A fabric that breaks a rule; ``kind`` and ``name`` say what it is about.

    ``kind`` is ``"switch"``, ``"block"``, ``"node"``, ``"sizes"`` (the block sizes) or ``""``
    (the whole fabric), so a reader
    can put the line that declared the thing in front of the message.
    """

    def __init__(self, message: str, kind: str = "", name: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.name = name


def level_name(level: int) -> str:
    """``leaf``, ``spine``, ``core`` for levels 0-2, ``level N`` above."""
    return LEVEL_NAMES[level] if level < len(LEVEL_NAMES) else f"level {level}"


@dataclass(frozen=True)
class Switch:
    """One switch: its level, its children (switches or nodes) and what is known of its links.

    ``uplink_gbps`` and ``downlink_gbps`` are the summed bandwidth of its links towards the
    core and towards the nodes, in Gb/s, where known; ``link_speed`` is Slurm's ``LinkSpeed``
    (arbitrary units, kept so that a written ``topology.conf`` keeps it).
    """

    name: str
    level: int = 0
    switches: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    uplink_gbps: float | None = None
    downlink_gbps: float | None = None
    link_speed: int | None = None

    @property
    def oversubscription(self) -> float | None:
        """Downlink over uplink bandwidth (2.0 means 2:1), or ``None`` where not known."""
        if self.uplink_gbps is None or self.downlink_gbps is None or self.uplink_gbps <= 0:
            return None
        return self.downlink_gbps / self.uplink_gbps


@dataclass(frozen=True)
class Block:
    """A set of nodes with fast links between them (a Slurm block, an NVLink domain)."""

    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Port:
    """One NIC port of a node and the switch it reaches (``gbps``: its link, where known)."""

    nic: str
    switch: str
    gbps: float | None = None


@dataclass(frozen=True)
class Node:
    """A node of the fabric and its NIC ports (none where the source does not say)."""

    name: str
    ports: tuple[Port, ...] = ()


@dataclass(frozen=True)
class Fabric:
    """The whole network between nodes, checked on construction (see the module docstring).

    ``nodes`` holds every node named anywhere (by a switch, a block or its ports); build one
    with :func:`assemble` to have the nodes without ports filled in.
    """

    switches: tuple[Switch, ...] = ()
    blocks: tuple[Block, ...] = ()
    nodes: tuple[Node, ...] = ()
    block_sizes: tuple[int, ...] = ()
    _by_name: dict[str, Switch] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        _check_counts(self)
        switches = _check_switches(self.switches)
        object.__setattr__(self, "_by_name", switches)
        leaves = _check_leaf_nodes(self.switches, self.nodes)
        _check_ports(self.nodes, switches, leaves)
        _check_blocks(self.blocks, self.block_sizes, {n.name for n in self.nodes})

    def switch(self, name: str) -> Switch:
        """The switch called ``name`` (``KeyError`` when there is none)."""
        return self._by_name[name]

    @property
    def roots(self) -> tuple[Switch, ...]:
        """The switches no other switch has as a child, highest level first."""
        children = {child for s in self.switches for child in s.switches}
        tops = [s for s in self.switches if s.name not in children]
        return tuple(sorted(tops, key=lambda s: (-s.level, s.name)))

    def rails(self) -> dict[str, tuple[str, ...]]:
        """NIC name -> the leaves its ports reach, for the nodes whose ports are known.

        In a rail-optimised cluster each NIC reaches its own leaves (rail k: ``mlx5_k``).
        """
        found: dict[str, dict[str, None]] = {}
        for node in self.nodes:
            for port in node.ports:
                found.setdefault(port.nic, {})[port.switch] = None
        return {nic: tuple(sorted(leaves)) for nic, leaves in sorted(found.items())}

    def rail_optimised(self) -> bool:
        """Whether every leaf that ports reach is reached through one NIC name only."""
        nic_of: dict[str, str] = {}
        for node in self.nodes:
            for port in node.ports:
                if nic_of.setdefault(port.switch, port.nic) != port.nic:
                    return False
        return bool(nic_of) and len(set(nic_of.values())) > 1


def _check_counts(fabric: Fabric) -> None:
    for what, items, limit in (
        ("switches", fabric.switches, MAX_SWITCHES),
        ("nodes", fabric.nodes, MAX_NODES),
        ("blocks", fabric.blocks, MAX_BLOCKS),
        ("block sizes", fabric.block_sizes, MAX_BLOCK_SIZES),
    ):
        if len(items) > limit:
            raise FabricError(f"{len(items):,} {what}: at most {limit:,}")


def _check_switches(switches: tuple[Switch, ...]) -> dict[str, Switch]:
    by_name: dict[str, Switch] = {}
    for switch in switches:
        name = switch.name
        if not is_object_name(name):
            raise FabricError(
                f"switch name {name[:80]!r} is not {OBJECT_NAME_RULE}", "switch", name
            )
        if name in by_name:
            raise FabricError(f"switch {name} is declared twice", "switch", name)
        if not 0 <= switch.level < MAX_LEVELS:
            raise FabricError(
                f"switch {name}: level {switch.level} is not 0-{MAX_LEVELS - 1}", "switch", name
            )
        if switch.switches and switch.nodes:
            raise FabricError(f"switch {name} has both child switches and nodes", "switch", name)
        for value in (switch.uplink_gbps, switch.downlink_gbps):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise FabricError(f"switch {name}: bandwidth {value} is not >= 0", "switch", name)
        if switch.link_speed is not None and switch.link_speed < 0:
            raise FabricError(f"switch {name}: LinkSpeed {switch.link_speed} < 0", "switch", name)
        by_name[name] = switch
    for switch in switches:
        if len(set(switch.switches)) != len(switch.switches):
            raise FabricError(f"switch {switch.name} names a child twice", "switch", switch.name)
        for child in switch.switches:
            below = by_name.get(child)
            if below is None:
                raise FabricError(
                    f"switch {switch.name}: child switch {child[:80]!r} is not declared",
                    "switch",
                    switch.name,
                )
            if below.level >= switch.level:
                raise FabricError(
                    f"switch {switch.name} (level {switch.level}) has child {child} on level "
                    f"{below.level}: children must be on a lower level",
                    "switch",
                    switch.name,
                )
    return by_name


def _check_leaf_nodes(
    switches: tuple[Switch, ...], nodes: tuple[Node, ...]
) -> dict[str, list[str]]:
    """Node -> the leaves listing it; every node named is declared once."""
    declared: set[str] = set()
    for node in nodes:
        if not is_node_name(node.name):
            raise FabricError(
                f"node name {node.name[:80]!r} is not {NODE_NAME_RULE}", "node", node.name
            )
        if node.name in declared:
            raise FabricError(f"node {node.name} is declared twice", "node", node.name)
        declared.add(node.name)
    leaves: dict[str, list[str]] = {}
    for switch in switches:
        if len(set(switch.nodes)) != len(switch.nodes):
            raise FabricError(f"switch {switch.name} names a node twice", "switch", switch.name)
        for name in switch.nodes:
            if name not in declared:
                raise FabricError(
                    f"switch {switch.name}: node {name[:80]!r} is not declared",
                    "switch",
                    switch.name,
                )
            leaves.setdefault(name, []).append(switch.name)
    return leaves


def _check_ports(
    nodes: tuple[Node, ...], switches: Mapping[str, Switch], leaves: Mapping[str, list[str]]
) -> None:
    for node in nodes:
        if not node.ports:  # ports not known: each leaf listing it is one port of it
            continue
        under = leaves.get(node.name, [])
        if len(node.ports) > MAX_PORTS:
            raise FabricError(
                f"node {node.name} has {len(node.ports)} ports: at most {MAX_PORTS}",
                "node",
                node.name,
            )
        nics: set[str] = set()
        for port in node.ports:
            if _NIC_RE.fullmatch(port.nic) is None:
                raise FabricError(
                    f"node {node.name}: NIC {port.nic[:80]!r} is not {NIC_NAME_RULE}",
                    "node",
                    node.name,
                )
            if port.nic in nics:
                raise FabricError(
                    f"node {node.name}: NIC {port.nic} is listed twice", "node", node.name
                )
            nics.add(port.nic)
            if port.switch not in switches:
                raise FabricError(
                    f"node {node.name}: port {port.nic} reaches switch {port.switch[:80]!r}, "
                    "which is not declared",
                    "node",
                    node.name,
                )
            if port.gbps is not None and not (math.isfinite(port.gbps) and port.gbps >= 0):
                raise FabricError(
                    f"node {node.name}: port {port.nic} bandwidth {port.gbps} is not >= 0",
                    "node",
                    node.name,
                )
        reached = {port.switch for port in node.ports}
        if reached != set(under):
            raise FabricError(
                f"node {node.name}: its ports reach {', '.join(sorted(reached))} but it is "
                f"listed under {', '.join(sorted(under)) or 'no switch'}",
                "node",
                node.name,
            )


def _check_blocks(
    blocks: tuple[Block, ...], block_sizes: tuple[int, ...], declared: set[str]
) -> None:
    previous = 0
    for size in block_sizes:
        if size <= 0:
            raise FabricError(f"BlockSizes {size} is not a positive number of nodes", "sizes")
        if previous and (size % previous or (size // previous) & (size // previous - 1)):
            raise FabricError(
                f"BlockSizes {size} is not a power of two times {previous}, the size before it",
                "sizes",
            )
        if previous and size <= previous:
            raise FabricError(f"BlockSizes {size} is not larger than {previous}", "sizes")
        previous = size
    names: set[str] = set()
    owner: dict[str, str] = {}
    for block in blocks:
        if not is_object_name(block.name):
            raise FabricError(
                f"block name {block.name[:80]!r} is not {OBJECT_NAME_RULE}", "block", block.name
            )
        if block.name in names:
            raise FabricError(f"block {block.name} is declared twice", "block", block.name)
        names.add(block.name)
        if block_sizes and len(block.nodes) < block_sizes[0]:
            raise FabricError(
                f"block {block.name} has {len(block.nodes)} nodes, fewer than the base block "
                f"size {block_sizes[0]}",
                "block",
                block.name,
            )
        for name in block.nodes:
            if name not in declared:
                raise FabricError(
                    f"block {block.name}: node {name[:80]!r} is not declared", "block", block.name
                )
            if name in owner:
                raise FabricError(
                    f"block {block.name}: node {name} is in block {owner[name]} already",
                    "block",
                    block.name,
                )
            owner[name] = block.name


def assemble(
    switches: Iterable[Switch],
    blocks: Iterable[Block] = (),
    nodes: Iterable[Node] = (),
    block_sizes: Iterable[int] = (),
) -> Fabric:
    """A :class:`Fabric` whose node list also holds, without ports, every node that a switch
    or block names but ``nodes`` lacks (in the order first named).
    """
    switch_list = tuple(switches)
    block_list = tuple(blocks)
    known: dict[str, Node] = {}
    for node in nodes:
        if node.name in known:
            raise FabricError(f"node {node.name} is declared twice", "node", node.name)
        known[node.name] = node
    for name in (n for s in switch_list for n in s.nodes):
        known.setdefault(name, Node(name))
    for name in (n for b in block_list for n in b.nodes):
        known.setdefault(name, Node(name))
    return Fabric(switch_list, block_list, tuple(known.values()), tuple(block_sizes))


def levels_from_children(children: Mapping[str, tuple[str, ...]]) -> dict[str, int]:
    """Each switch's level as Slurm computes it: 0 without child switches, else one above
    its highest child. A child that is not declared or a cycle is a :class:`FabricError`.
    """
    levels: dict[str, int] = {}
    for start in children:
        if start in levels:
            continue
        # iterative depth-first walk: a deep chain must not exhaust Python's stack
        stack: list[tuple[str, int]] = [(start, 0)]
        on_path: set[str] = {start}
        while stack:
            name, index = stack[-1]
            kids = children[name]
            if index < len(kids):
                stack[-1] = (name, index + 1)
                child = kids[index]
                if child not in children:
                    raise FabricError(
                        f"switch {name}: child switch {child[:80]!r} is not declared",
                        "switch",
                        name,
                    )
                if child in on_path:
                    raise FabricError(
                        f"switch {name}: child switch {child} is above it (a cycle)",
                        "switch",
                        name,
                    )
                if child not in levels:
                    stack.append((child, 0))
                    on_path.add(child)
                continue
            level = 1 + max((levels[k] for k in kids), default=-1)
            if level >= MAX_LEVELS:
                raise FabricError(
                    f"switch {name} is {level + 1} levels deep: at most {MAX_LEVELS}",
                    "switch",
                    name,
                )
            levels[name] = level
            on_path.discard(name)
            stack.pop()
    return levels
