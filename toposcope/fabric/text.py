"""The text of ``toposcope fabric show``: the switch tree, nodes per leaf, blocks, rails.

Each switch is shown once in full under its first parent; a later parent (a fat tree's leaf
reaches several spines) says how many of its children were shown above, and which. Long host
lists are cut to :data:`SHOWN_HOSTLIST` characters: ``--format json`` has every name.
"""

from __future__ import annotations

from toposcope.fabric.hostlists import compress_hostlist
from toposcope.fabric.model import Fabric, Switch, level_name

#: the longest host list shown on one line of text
SHOWN_HOSTLIST = 100


def _hosts(names: tuple[str, ...]) -> str:
    text = compress_hostlist(names)
    return text if len(text) <= SHOWN_HOSTLIST else f"{text[:SHOWN_HOSTLIST]}..."


def _ratio(switch: Switch) -> str:
    ratio = switch.oversubscription
    return "-" if ratio is None else f"{ratio:.2f}:1"


def _tree(fabric: Fabric) -> list[str]:
    lines: list[str] = []
    shown: set[str] = set()
    stack: list[tuple[str, int]] = [(root.name, 1) for root in reversed(fabric.roots)]
    while stack:
        name, depth = stack.pop()
        switch = fabric.switch(name)
        label = f"{'  ' * depth}{name} ({level_name(switch.level)})"
        if name in shown:
            continue
        shown.add(name)
        if switch.nodes:
            label += f": {len(switch.nodes)} nodes {_hosts(switch.nodes)}"
        if switch.oversubscription is not None:
            label += f", oversubscription {_ratio(switch)}"
        lines.append(label)
        above = [child for child in switch.switches if child in shown]
        if above:
            lines.append(
                f"{'  ' * (depth + 1)}and {len(above)} shown above: {_hosts(tuple(above))}"
            )
        stack.extend(
            (child, depth + 1) for child in reversed(switch.switches) if child not in shown
        )
    return lines


def _leaves(fabric: Fabric) -> list[str]:
    leaves = [s for s in fabric.switches if s.level == 0]
    if not leaves:
        return []
    width = max(len("LEAF"), *(len(s.name) for s in leaves))
    rows = [f"  {'LEAF':<{width}}  {'NODES':>6}  {'UPLINK GB/S':>11}  OVERSUBSCRIPTION"]
    for leaf in leaves:
        uplink = "-" if leaf.uplink_gbps is None else f"{leaf.uplink_gbps:g}"
        rows.append(f"  {leaf.name:<{width}}  {len(leaf.nodes):>6}  {uplink:>11}  {_ratio(leaf)}")
    return ["nodes per leaf:", *rows]


def _blocks(fabric: Fabric) -> list[str]:
    if not fabric.blocks and not fabric.block_sizes:
        return []
    sizes = ", ".join(str(size) for size in fabric.block_sizes) or "not given"
    lines = [f"blocks (block sizes: {sizes}):"]
    lines.extend(
        f"  {block.name}: {len(block.nodes)} nodes {_hosts(block.nodes)}" for block in fabric.blocks
    )
    return lines


def _rails(fabric: Fabric) -> list[str]:
    rails = fabric.rails()
    if not rails:
        return []
    shape = "rail-optimised" if fabric.rail_optimised() else "not rail-optimised"
    lines = [f"rails ({shape}: each NIC and the leaves it reaches):"]
    lines.extend(f"  {nic}: {len(leaves)} leaves {_hosts(leaves)}" for nic, leaves in rails.items())
    return lines


def fabric_to_text(fabric: Fabric) -> str:
    """What ``toposcope fabric show`` prints for ``fabric``."""
    levels = sorted({s.level for s in fabric.switches})
    named = ", ".join(level_name(level) for level in levels)
    summary = (
        f"fabric: {len(fabric.switches)} switches on {len(levels)} levels"
        + (f" ({named})" if named else "")
        + f", {len(fabric.nodes)} nodes, {len(fabric.blocks)} blocks"
    )
    parts = [summary]
    if fabric.switches:
        parts.extend(["switches:", *_tree(fabric)])
    for section in (_leaves(fabric), _blocks(fabric), _rails(fabric)):
        parts.extend(section)
    return "\n".join(parts)
