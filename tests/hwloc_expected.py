"""Read hwloc's own expected outputs (``lstopo -v`` text and hwloc XML) for the agreement tests.

This is deliberately a separate, simple reader, not the XML builder in
``toposcope.topology.hwloc_xml``: the tests compare what our builders produce with what this
module says hwloc printed, so the two must not share code. Both formats are first turned into
the same small tree of :class:`HwObj`, and :func:`expectations` derives from that tree what
the checks compare:

* NUMA nodes: OS index, hwloc's cpuset (the PUs below the object a node is attached to),
  local memory with its tolerance (``lstopo -v`` rounds to the printed unit), and the set of
  nodes each PU may belong to in the kernel's view (the nodes attached nearest to it);
* packages: OS index and PUs;
* PCI functions: the one NUMA node their locality covers, when there is exactly one;
* the NUMA latency matrix, by OS index.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

#: console type names (first word of a line) -> hwloc object types as the XML names them
_CONSOLE_TYPES = {
    "HostBridge": "Bridge",
    "PCIBridge": "Bridge",
    "PCI": "PCIDev",
}
_IO_TYPES = {"Bridge", "PCIDev", "OSDev", "Misc"}
_MEMORY_TYPES = {"NUMANode", "MemCache"}
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


@dataclass(eq=False)
class HwObj:
    """One hwloc object: type, OS index, the attributes the checks need, children."""

    type: str
    os_index: int | None = None
    logical_index: int | None = None
    memory: int | None = None
    memory_unit: int = 1
    busid: str | None = None
    nodeset: frozenset[int] | None = None
    children: list[HwObj] = field(default_factory=list)
    parent: HwObj | None = None

    def walk(self) -> list[HwObj]:
        """This object and all its descendants, depth first in document order."""
        out = [self]
        for child in self.children:
            out.extend(child.walk())
        return out

    def pus(self) -> set[int]:
        """OS indexes of the PUs in this subtree."""
        return {o.os_index for o in self.walk() if o.type == "PU" and o.os_index is not None}


@dataclass
class ExpectedNode:
    """What hwloc says about one NUMA node."""

    os_index: int
    cpuset: frozenset[int]
    memory: int | None
    memory_tolerance: int


@dataclass
class Expected:
    """Everything the agreement checks compare, derived from one hwloc output."""

    nodes: dict[int, ExpectedNode]
    pu_nodes: dict[int, frozenset[int]]
    packages: dict[int, frozenset[int]]
    pci_nodes: dict[str, int]
    distances: dict[tuple[int, int], int]


# --------------------------------------------------------------------------- console


_LINE_RE = re.compile(r"^(?P<indent> *)(?P<type>[A-Za-z][A-Za-z0-9]*)(?P<rest>.*)$")


def _strip_quotes(text: str) -> str:
    return re.sub(r'"[^"]*"', '""', text)


def parse_console(text: str) -> tuple[HwObj, dict[tuple[int, int], int]]:
    """Parse ``lstopo -v`` text into a tree and its NUMA latency matrix (by OS index)."""
    # Split on newlines only: DMI strings may hold a carriage return (buggynuma's BIOS version).
    lines = text.split("\n")
    root: HwObj | None = None
    stack: list[tuple[int, HwObj]] = []
    end = len(lines)
    for number, line in enumerate(lines):
        if not line.strip() or re.match(r"^\s*(Special )?depth ", line):
            end = number
            break
        match = _LINE_RE.match(line)
        if match is None:
            raise ValueError(f"line {number + 1}: not an object line: {line!r}")
        depth = len(match.group("indent")) // 2
        type_name = match.group("type")
        rest = _strip_quotes(match.group("rest"))
        obj = HwObj(type=_CONSOLE_TYPES.get(type_name, type_name))
        if type_name.startswith("Group"):
            obj.type = "Group"
        if type_name == "Misc" or rest.startswith("["):
            obj.type = "OSDev" if rest.startswith("[") else "Misc"
        if m := re.search(r"\bL#(\d+)", rest):
            obj.logical_index = int(m.group(1))
        if m := re.search(r"\bP#(\d+)", rest):
            obj.os_index = int(m.group(1))
        if m := re.search(r"\blocal=(\d+)(B|KiB|MiB|GiB|TiB)\b", rest):
            obj.memory_unit = _UNITS[m.group(2)]
            obj.memory = int(m.group(1)) * obj.memory_unit
        elif obj.type == "NUMANode":
            obj.memory = 0  # lstopo prints no local= for a node without memory
        if m := re.search(r"\bbusid=([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+)", rest):
            obj.busid = m.group(1).lower()
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            obj.parent = stack[-1][1]
            obj.parent.children.append(obj)
        elif root is None:
            root = obj
        else:
            raise ValueError(f"line {number + 1}: second root object")
        stack.append((depth, obj))
    if root is None:
        raise ValueError("no object tree found")
    return root, _console_distances(lines[end:], root)


def _console_distances(lines: list[str], root: HwObj) -> dict[tuple[int, int], int]:
    """The first NUMA latency matrix printed after the tree, by OS index."""
    by_logical = {
        o.logical_index: o.os_index
        for o in root.walk()
        if o.type == "NUMANode" and o.logical_index is not None and o.os_index is not None
    }
    for number, line in enumerate(lines):
        if line.startswith("Relative latency matrix") and "NUMANodes" in line:
            header = lines[number + 1].split()
            if header[:1] != ["index"]:
                return {}
            columns = [int(x) for x in header[1:]]
            result: dict[tuple[int, int], int] = {}
            for row_line in lines[number + 2 : number + 2 + len(columns)]:
                cells = [int(x) for x in row_line.split()]
                row = cells[0]
                for col, value in zip(columns, cells[1:], strict=True):
                    result[(by_logical[row], by_logical[col])] = value
            return result
    return {}


# --------------------------------------------------------------------------- XML


def _mask(text: str | None) -> frozenset[int] | None:
    """A hwloc bitmap such as ``0x00000003,0xffffffff`` (32-bit words, high first)."""
    if text is None:
        return None
    digits = "".join(word.strip()[2:].rjust(8, "0") for word in text.split(","))
    value = int(digits or "0", 16)
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)


def parse_xml(path: Path) -> tuple[HwObj, dict[tuple[int, int], int]]:
    """Parse an hwloc v2/v3 XML file into a tree and its NUMA latency matrix (by OS index)."""
    document = ET.parse(path).getroot()
    top = document.find("object")
    if top is None:
        raise ValueError(f"{path}: no object")
    gp_to_os: dict[str, int] = {}

    def convert(element: ET.Element, parent: HwObj | None) -> HwObj:
        type_name = element.get("type", "")
        obj = HwObj(type=type_name, parent=parent)
        if element.get("os_index") is not None:
            obj.os_index = int(element.get("os_index", ""))
        if element.get("local_memory") is not None:
            obj.memory = int(element.get("local_memory", ""))
        obj.busid = element.get("pci_busid")
        obj.nodeset = _mask(element.get("nodeset"))
        if type_name == "NUMANode" and obj.os_index is not None:
            gp_to_os[element.get("gp_index", "")] = obj.os_index
            if obj.memory is None:
                obj.memory = 0
        for child in element.findall("object"):
            obj.children.append(convert(child, obj))
        return obj

    root = convert(top, None)
    distances: dict[tuple[int, int], int] = {}
    for matrix in document.findall("distances2"):
        if matrix.get("type") != "NUMANode" or not int(matrix.get("kind", "0")) & 4:
            continue
        ids = " ".join(e.text or "" for e in matrix.findall("indexes")).split()
        values = " ".join(e.text or "" for e in matrix.findall("u64values")).split()
        if matrix.get("indexing") == "gp":
            nodes = [gp_to_os[i] for i in ids]
        else:
            nodes = [int(i) for i in ids]
        for k, value in enumerate(values):
            distances[(nodes[k // len(nodes)], nodes[k % len(nodes)])] = int(value)
        break
    return root, distances


# --------------------------------------------------------------------------- checks


def _attached_nodes(obj: HwObj) -> list[HwObj]:
    """NUMA nodes attached to ``obj`` as memory children (possibly behind memory caches)."""
    found: list[HwObj] = []
    for child in obj.children:
        if child.type == "NUMANode" and not child.pus():
            found.append(child)
        elif child.type == "MemCache":
            found.extend(_attached_nodes(child))
    return found


def _locality(obj: HwObj) -> HwObj:
    """The nearest ancestor that is neither I/O nor memory: where ``obj`` is attached."""
    current = obj.parent
    while current is not None and (current.type in _IO_TYPES or current.type in _MEMORY_TYPES):
        current = current.parent
    if current is None:
        raise ValueError(f"{obj.type} has no normal ancestor")
    return current


def _local_nodes(obj: HwObj) -> frozenset[int]:
    """The NUMA nodes local to a normal object: those in its subtree, else its ancestors'."""
    current: HwObj | None = obj
    while current is not None:
        nodes = frozenset(
            o.os_index for o in current.walk() if o.type == "NUMANode" and o.os_index is not None
        )
        if nodes:
            return nodes
        current = current.parent
    return frozenset()


def expectations(root: HwObj, distances: dict[tuple[int, int], int]) -> Expected:
    """Derive the compared facts from a parsed hwloc tree."""
    objects = root.walk()
    nodes: dict[int, ExpectedNode] = {}
    for obj in objects:
        if obj.type != "NUMANode" or obj.os_index is None:
            continue
        cpuset = obj.pus() or _locality(obj).pus()
        nodes[obj.os_index] = ExpectedNode(
            os_index=obj.os_index,
            cpuset=frozenset(cpuset),
            memory=obj.memory,
            memory_tolerance=obj.memory_unit if obj.memory_unit > 1 else 0,
        )
    pu_nodes: dict[int, frozenset[int]] = {}
    for pu in objects:
        if pu.type != "PU" or pu.os_index is None:
            continue
        current = pu.parent
        while current is not None:
            # hwloc v1 style: the node is an ancestor; v2: nodes are memory children.
            candidates = [current] if current.type == "NUMANode" else _attached_nodes(current)
            if candidates:
                pu_nodes[pu.os_index] = frozenset(
                    n.os_index for n in candidates if n.os_index is not None
                )
                break
            current = current.parent
    packages = {
        o.os_index: frozenset(o.pus())
        for o in objects
        if o.type in ("Package", "Socket") and o.os_index is not None
    }
    pci_nodes: dict[str, int] = {}
    for obj in objects:
        if obj.busid is None:
            continue
        where = _locality(obj)
        local = where.nodeset if where.nodeset is not None else _local_nodes(where)
        if len(local) == 1:
            pci_nodes[obj.busid] = next(iter(local))
    return Expected(nodes, pu_nodes, packages, pci_nodes, distances)


def load_expected(path: Path) -> Expected:
    """Read a ``.console`` or ``.xml`` expected output and derive what the checks compare."""
    if path.suffix == ".xml":
        root, distances = parse_xml(path)
    else:
        root, distances = parse_console(path.read_bytes().decode("utf-8"))
    return expectations(root, distances)


def read_test_file(path: Path) -> dict[str, list[str]]:
    """Parse an hwloc ``*.test`` description into ``{key: [values]}`` (``env`` may repeat)."""
    result: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if sep:
            result.setdefault(key.strip(), []).append(value.strip())
    return result
