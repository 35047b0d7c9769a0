"""Slurm's ``topology.conf``: read into a fabric, and written from one.

What is read, as Slurm's own parser reads it (``topology.conf(5)``): parameter names in any
case; ``#`` starts a comment to the end of the line (``\\#`` is a literal ``#``); a line
ending in ``\\`` goes on on the next one; words are ``Key=Value``. Two forms:

* topology/tree: ``SwitchName=NAME`` with ``Switches=`` (child switches) or ``Nodes=`` (child
  nodes), both Slurm host lists (``s[0-2]``, ``tux[0-3,12]``), and an optional
  ``LinkSpeed=`` (a number in arbitrary units). Levels are computed as Slurm does: a switch
  without child switches is a leaf (level 0), any other one level above its highest child;
* topology/block: ``BlockName=NAME Nodes=...`` lines and one ``BlockSizes=`` line (the
  planning base size, then each higher level a power of two times the one before).

Everything else is refused, each time as ``file:line: what is wrong``: an unknown or repeated
key, a key that does not belong to the line's form, a malformed host list, a switch or block
declared twice, a child switch never declared, a cycle, more than
:data:`~toposcope.fabric.model.MAX_LEVELS` levels, a file over :data:`MAX_BYTES`, and
``RingName=`` (topology/ring is not modelled).

:func:`write_topology_conf` writes a fabric back in the same forms, in the model's order, so
that reading the text again gives the same fabric (ports are not part of ``topology.conf``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from toposcope.boundedread import read_bounded
from toposcope.fabric.hostlists import compress_hostlist
from toposcope.fabric.located import Lines, assemble_at
from toposcope.fabric.model import Block, Fabric, FabricError, Switch, levels_from_children
from toposcope.hostlist import HostlistError, expand_hostlist
from toposcope.slurmconf_lines import key_values, logical_lines

#: the largest topology.conf read, in bytes
MAX_BYTES = 16 << 20
#: the keys of each form (lower case), the first one naming the form
_FORMS = {
    "switchname": ("switchname", "switches", "nodes", "linkspeed"),
    "blockname": ("blockname", "nodes"),
    "blocksizes": ("blocksizes",),
}
_NUMBER = re.compile(r"[0-9]{1,12}")


@dataclass
class _Read:
    """What the lines declared so far."""

    lines: Lines
    children: dict[str, tuple[str, ...]] = field(default_factory=dict)
    nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    speeds: dict[str, int | None] = field(default_factory=dict)
    blocks: list[Block] = field(default_factory=list)
    block_sizes: tuple[int, ...] = ()
    sizes_line: int | None = None


def _words(line: str, where: str) -> dict[str, str]:
    try:
        return key_values(line, where)
    except ValueError as exc:
        raise FabricError(str(exc)) from None


def _names(value: str, key: str, where: str) -> tuple[str, ...]:
    try:
        return expand_hostlist(value)
    except HostlistError as exc:
        raise FabricError(f"{where}: {key}: {exc}") from None


def _switch_line(read: _Read, words: dict[str, str], number: int, where: str) -> None:
    name = words["switchname"]
    if name in read.children:
        first = read.lines.where[("switch", name)]
        raise FabricError(f"{where}: switch {name} is declared again (first on line {first})")
    if "switches" in words and "nodes" in words:
        raise FabricError(f"{where}: switch {name} has both Switches= and Nodes=")
    speed = words.get("linkspeed")
    if speed is not None and _NUMBER.fullmatch(speed) is None:
        raise FabricError(f"{where}: LinkSpeed {speed[:40]!r} is not a whole number")
    read.lines.note("switch", name, number)
    read.children[name] = _names(words.get("switches", ""), "Switches", where)
    read.nodes[name] = _names(words.get("nodes", ""), "Nodes", where)
    read.speeds[name] = int(speed) if speed is not None else None
    for node in read.nodes[name]:
        read.lines.note("node", node, number)


def _block_line(read: _Read, words: dict[str, str], number: int, where: str) -> None:
    name = words["blockname"]
    if ("block", name) in read.lines.where:
        first = read.lines.where[("block", name)]
        raise FabricError(f"{where}: block {name} is declared again (first on line {first})")
    read.lines.note("block", name, number)
    nodes = _names(words.get("nodes", ""), "Nodes", where)
    for node in nodes:
        read.lines.note("node", node, number)
    read.blocks.append(Block(name, nodes))


def _sizes_line(read: _Read, words: dict[str, str], number: int, where: str) -> None:
    if read.sizes_line is not None:
        raise FabricError(f"{where}: BlockSizes is given again (first on line {read.sizes_line})")
    cells = words["blocksizes"].split(",")
    if any(_NUMBER.fullmatch(cell) is None for cell in cells):
        raise FabricError(f"{where}: BlockSizes {words['blocksizes'][:60]!r} is not numbers")
    read.block_sizes = tuple(int(cell) for cell in cells)
    read.sizes_line = number


def parse_topology_conf(text: str, source: str = "topology.conf") -> Fabric:
    """The fabric of ``topology.conf`` ``text``; ``source`` names it in errors.

    Raises :class:`~toposcope.fabric.model.FabricError` saying ``source:line: ...`` for
    anything the module docstring says is refused.
    """
    lines = Lines(source)
    if len(text) > MAX_BYTES:
        raise FabricError(f"{source}: larger than {MAX_BYTES:,} bytes")
    read = _Read(lines)
    for number, line in logical_lines(text):
        if not line.strip():
            continue
        where = lines.at(number)
        words = _words(line, where)
        form = next(iter(words))
        if form == "ringname":
            raise FabricError(f"{where}: RingName= (topology/ring) is not modelled")
        known = _FORMS.get(form)
        if known is None:
            raise FabricError(
                f"{where}: a line starts with SwitchName=, BlockName= or BlockSizes=, "
                f"not {line.split('=', 1)[0].strip()[:40]}="
            )
        for key in words:
            if key not in known:
                raise FabricError(f"{where}: {key} does not belong on a {form} line")
        if form == "switchname":
            _switch_line(read, words, number, where)
        elif form == "blockname":
            _block_line(read, words, number, where)
        else:
            _sizes_line(read, words, number, where)
    try:
        levels = levels_from_children(read.children)
    except FabricError as exc:
        raise lines.locate(exc) from None
    switches = [
        Switch(
            name,
            levels[name],
            switches=read.children[name],
            nodes=read.nodes[name],
            link_speed=read.speeds[name],
        )
        for name in read.children
    ]
    if read.sizes_line is not None:
        lines.note("sizes", "", read.sizes_line)
    return assemble_at(lines, switches, read.blocks, (), read.block_sizes)


def read_topology_conf(path: str | Path) -> Fabric:
    """The fabric of the ``topology.conf`` file at ``path`` (errors name the file)."""
    raw = read_bounded(path, MAX_BYTES, str(path), what="a topology.conf")
    return parse_topology_conf(raw.decode("utf-8", errors="replace"), str(path))


def write_topology_conf(fabric: Fabric, note: str = "") -> str:
    """``topology.conf`` text for ``fabric``: its switches (tree form), then its blocks and
    ``BlockSizes`` (block form). ``note`` is written as a comment on top.
    """
    out = [f"# {line}" for line in note.splitlines()]
    for switch in fabric.switches:
        words = [f"SwitchName={switch.name}"]
        if switch.switches:
            words.append(f"Switches={compress_hostlist(switch.switches)}")
        elif switch.nodes:
            words.append(f"Nodes={compress_hostlist(switch.nodes)}")
        if switch.link_speed is not None:
            words.append(f"LinkSpeed={switch.link_speed}")
        out.append(" ".join(words))
    for block in fabric.blocks:
        out.append(f"BlockName={block.name} Nodes={compress_hostlist(block.nodes)}")
    if fabric.block_sizes:
        out.append(f"BlockSizes={','.join(str(size) for size in fabric.block_sizes)}")
    return "\n".join(out) + "\n"
