"""``ibnetdiscover`` output (infiniband-diags) read into a fabric.

The format (``ibnetdiscover(8)``, "Topology File Format"): a block per IB node, after its
``vendid=``/``devid=``/``sysimgguid=``/``switchguid=``/``caguid=`` lines, starting
``Switch 65 "S-<guid>" # "<NodeDescription>" enhanced port 0 lid 73 lmc 0`` or
``Ca 1 "H-<guid>" # "<NodeDescription>"`` (``Rt`` for a router), then one line per connected
port: ``[3] "H-<guid>"[1](<portguid>) # "<peer description>" lid 674 4xNDR`` on a switch,
``[1](<portguid>) "S-<guid>"[12] # lid 94 lmc 0 "<peer description>" lid 158 4xNDR`` on a CA.
``#`` lines are comments.

How it becomes a fabric:

* a host channel adapter whose description is ``<host> <device>`` (``a05-p1-dgx-01-c13
  HCA-2``, ``gpu01 mlx5_0``: what the kernel sets) is a port of node ``<host>`` named
  ``<device>``; others (a firmware default such as ``MT4129 ConnectX7 Mellanox
  Technologies``, ``localhost ...``, a switch's SHARP ``Aggregation Node``) name no host and
  are left out of the nodes, though their links still count as bandwidth;
* a switch is named from its description where that is Mellanox's ``MF0;<name>:<model>``
  (``A09-P1-IBLEAF-04-04``) or a valid name, unique; otherwise ``S-<guid>``;
* a switch with a named host is a leaf (level 0); every other switch is one level above the
  nearest leaf, hop by hop, and its children are its neighbours one level below;
* each link's rate is its width times its lane speed (``4xNDR`` is 4 x 100 Gb/s); a switch's
  downlink bandwidth sums its links to CAs and lower switches, its uplink its links to higher
  switches (none on the top level).

Refused, as ``file:line: what``: a line of no known shape, a port line before any node, a
node or port declared twice, a bad port number, a link to a node never declared, a file over
:data:`MAX_BYTES`, and everything the model refuses.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from toposcope.boundedread import read_bounded
from toposcope.fabric.located import Lines, assemble_at
from toposcope.fabric.model import MAX_LEVELS, Fabric, Node, Port, Switch
from toposcope.identity.names import is_node_name, is_object_name

#: the largest ibnetdiscover output read, in bytes (a 10,000-node fabric is tens of MB)
MAX_BYTES = 256 << 20
#: the most ports one IB node may have (switches have up to 129 today)
MAX_IB_PORTS = 1024
#: Gb/s per lane of each InfiniBand speed (signalling rate, as the link is named)
LANE_GBPS = {
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.0,
    "FDR": 14.0625,
    "EDR": 25.0,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}
_GUID = r"[SHR]-[0-9a-fA-F]{1,32}"
_NODE_RE = re.compile(
    rf'^(Switch|Ca|Rt)\s+([0-9]{{1,5}})\s+"({_GUID})"(?:\s*\([0-9a-fA-F]+\))?\s*(?:#\s*"(.*)"(.*))?$'
)
_PORT_RE = re.compile(
    rf'^\[([0-9]{{1,5}})\](?:\([0-9a-fA-F]+\))?\s+"({_GUID})"\[([0-9]{{1,5}})\]'
    r"(?:\([0-9a-fA-F]+\))?\s*(?:#(.*))?$"
)
_HEADER_RE = re.compile(r"^(vendid|devid|sysimgguid|switchguid|caguid|rtrguid)=\S+$")
_RATE_RE = re.compile(r"\b(1|2|4|8|12)x(SDR|DDR|QDR|FDR10|FDR|EDR|HDR|NDR|XDR)\b")
_MELLANOX_RE = re.compile(r"^MF0;([^:]{1,63}):")
_UNNAMED_HOSTS = frozenset({"localhost", "localhost.localdomain"})


@dataclass
class _IbNode:
    """One IB node as declared: its kind, description, line and links by port number."""

    kind: str
    guid_name: str
    description: str
    line: int
    links: dict[int, tuple[str, int, float | None]] = field(default_factory=dict)


def link_gbps(comment: str) -> float | None:
    """The rate of a link from its ``4xNDR`` tag (width x lane speed), ``None`` without one."""
    found = _RATE_RE.findall(comment)
    if not found:
        return None
    width, speed = found[-1]
    return int(width) * LANE_GBPS[speed]


def _parse(text: str, lines: Lines) -> dict[str, _IbNode]:
    nodes: dict[str, _IbNode] = {}
    current: _IbNode | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if _HEADER_RE.match(line):
            current = None
            continue
        header = _NODE_RE.match(line)
        if header:
            kind, ports, guid_name, description = header.group(1, 2, 3, 4)
            if guid_name in nodes:
                first = nodes[guid_name].line
                raise lines.error(number, f"{guid_name} is declared again (first on line {first})")
            if not 0 < int(ports) <= MAX_IB_PORTS:
                raise lines.error(number, f"{guid_name} has {ports} ports: 1-{MAX_IB_PORTS}")
            current = _IbNode(kind, guid_name, (description or "").strip(), number)
            nodes[guid_name] = current
            continue
        port = _PORT_RE.match(line)
        if port is None:
            raise lines.error(number, f"not an ibnetdiscover line: {line[:80]!r}")
        if current is None:
            raise lines.error(number, "a port line before any Switch or Ca line")
        local, peer, peer_port = int(port.group(1)), port.group(2), int(port.group(3))
        if local in current.links:
            raise lines.error(number, f"{current.guid_name} port {local} is listed twice")
        if not 0 < local <= MAX_IB_PORTS or not 0 <= peer_port <= MAX_IB_PORTS:
            raise lines.error(number, f"port number out of 1-{MAX_IB_PORTS}")
        current.links[local] = (peer, peer_port, link_gbps(port.group(4) or ""))
        lines.note("link", f"{current.guid_name}[{local}]", number)
    for node in nodes.values():
        for local, (peer, _, _) in node.links.items():
            if peer not in nodes:
                where = lines.where[("link", f"{node.guid_name}[{local}]")]
                raise lines.error(
                    where, f"{node.guid_name} port {local} links to {peer}, never declared"
                )
    return nodes


def _host_and_nic(description: str) -> tuple[str, str] | None:
    words = description.split()
    if len(words) != 2 or words[0] in _UNNAMED_HOSTS or not is_node_name(words[0]):
        return None
    return words[0], words[1]


def _switch_names(switches: list[_IbNode]) -> dict[str, str]:
    """GUID name -> the name shown: from the description where it is one and unique."""
    wanted: dict[str, str] = {}
    for switch in switches:
        match = _MELLANOX_RE.match(switch.description)
        name = match.group(1) if match else switch.description
        wanted[switch.guid_name] = name if is_object_name(name) else switch.guid_name
    counts: dict[str, int] = {}
    for name in wanted.values():
        counts[name] = counts.get(name, 0) + 1
    return {guid: name if counts[name] == 1 else guid for guid, name in wanted.items()}


def _levels(switches: dict[str, _IbNode], leaves: set[str]) -> dict[str, int]:
    """Hop distance from the nearest leaf (switches no leaf reaches are level 0)."""
    levels = {name: 0 for name in leaves}
    queue = deque(leaves)
    while queue:
        name = queue.popleft()
        for peer, _, _ in switches[name].links.values():
            if peer in switches and peer not in levels:
                levels[peer] = levels[name] + 1
                queue.append(peer)
    for name in switches:
        levels.setdefault(name, 0)
    return levels


def _bandwidth(
    switch: _IbNode, level: int, levels: dict[str, int], switches: dict[str, _IbNode]
) -> tuple[float | None, float | None]:
    """(uplink, downlink) Gb/s of ``switch``; a side with a link of unknown rate is ``None``."""
    up: float | None = 0.0
    down: float | None = 0.0
    for peer, _, gbps in switch.links.values():
        if peer in switches:
            if levels[peer] == level:
                continue
            upward = levels[peer] > level
        else:
            upward = False
        if upward:
            up = None if up is None or gbps is None else up + gbps
        else:
            down = None if down is None or gbps is None else down + gbps
    has_parent = any(
        peer in switches and levels[peer] > level for peer, _, _ in switch.links.values()
    )
    return (up if has_parent else None), down


def parse_ibnetdiscover(text: str, source: str = "ibnetdiscover") -> Fabric:
    """The fabric of ``ibnetdiscover`` output ``text``; ``source`` names it in errors."""
    lines = Lines(source)
    if len(text) > MAX_BYTES:
        raise lines.error(None, f"larger than {MAX_BYTES:,} bytes")
    ib = _parse(text, lines)
    switches = {name: node for name, node in ib.items() if node.kind == "Switch"}
    names = _switch_names(list(switches.values()))
    ports: dict[str, list[Port]] = {}
    leaf_nodes: dict[str, list[str]] = {}
    for ca in (node for node in ib.values() if node.kind == "Ca"):
        named = _host_and_nic(ca.description)
        if named is None:
            continue
        host, nic = named
        lines.note("node", host, ca.line)
        connected = [(p, link) for p, link in sorted(ca.links.items()) if link[0] in switches]
        for port_number, (peer, _, gbps) in connected:
            label = nic if len(connected) == 1 else f"{nic}:{port_number}"
            ports.setdefault(host, []).append(Port(label, names[peer], gbps))
            under = leaf_nodes.setdefault(peer, [])
            if host not in under:
                under.append(host)
    levels = _levels(switches, set(leaf_nodes))
    deepest = max(levels.values(), default=0)
    if deepest >= MAX_LEVELS:
        raise lines.error(None, f"{deepest + 1} levels of switches: at most {MAX_LEVELS}")
    built: list[Switch] = []
    for guid, switch in switches.items():
        lines.note("switch", names[guid], switch.line)
        level = levels[guid]
        children: dict[str, None] = {}
        for peer, _, _ in sorted(switch.links.values(), key=lambda link: names.get(link[0], "")):
            if peer in switches and levels[peer] == level - 1:
                children[names[peer]] = None
        uplink, downlink = _bandwidth(switch, level, levels, switches)
        built.append(
            Switch(
                names[guid],
                level,
                switches=tuple(children) if level else (),
                nodes=tuple(sorted(leaf_nodes.get(guid, ()))) if not level else (),
                uplink_gbps=uplink,
                downlink_gbps=downlink,
            )
        )
    built.sort(key=lambda s: (-s.level, s.name))
    nodes = [Node(host, tuple(host_ports)) for host, host_ports in ports.items()]
    return assemble_at(lines, built, (), nodes)


def read_ibnetdiscover(path: str | Path) -> Fabric:
    """The fabric of the ``ibnetdiscover`` output file at ``path`` (errors name the file)."""
    raw = read_bounded(path, MAX_BYTES, str(path), what="ibnetdiscover output")
    return parse_ibnetdiscover(raw.decode("utf-8", errors="replace"), str(path))
