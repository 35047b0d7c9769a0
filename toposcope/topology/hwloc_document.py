"""Reading an hwloc XML document: its ``<object>`` tree and its NUMA distance matrices.

:func:`parse_document` loads the file; :func:`object_tree` turns the ``<object>`` elements
into :class:`HwObj` nodes with the attributes the builder uses, without recursion and at
most :data:`MAX_OBJECT_DEPTH` deep; :func:`numa_distances` reads the latency matrix of the
v2 ``distances2`` or the v1 ``distances`` elements. Every malformed attribute (an
``os_index`` beyond :data:`OS_INDEX_LIMITS` included) raises
:class:`Malformed`, which the builder turns into a :class:`~toposcope.errors.ConfigError`
naming the file.
"""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from toposcope.cpulist import CPU_LIMIT, parse_cpumask
from toposcope.errors import ConfigError
from toposcope.topology.model import MAX_PACKAGE_ID, check_distance, check_id, parse_distance

LOG = logging.getLogger("toposcope.topology.hwloc_xml")

#: How deeply ``<object>`` elements may nest. A real machine needs about 15 levels (machine,
#: package, die, caches, core, PU, and a chain of PCI bridges); deeper is refused.
MAX_OBJECT_DEPTH = 256
#: The longest integer attribute read, in characters (a 64-bit number fits in 20 digits).
_MAX_INT_TEXT = 24

#: The largest ``os_index`` of the object types the builder keys on: a PU is a CPU and a
#: NUMANode a node (below CPU_LIMIT, as in cpusets), a Package or Core the kernel's id.
OS_INDEX_LIMITS = {
    "PU": CPU_LIMIT - 1,
    "NUMANode": CPU_LIMIT - 1,
    "Package": MAX_PACKAGE_ID,
    "Core": MAX_PACKAGE_ID,
}

# hwloc writes an infinite bitmap (e.g. an allowed set) with a leading "0xf...f," word.
_INFINITE_PREFIX = "0xf...f"


class Malformed(Exception):
    """A problem in the document, turned into ConfigError with the file name."""


@dataclass(eq=False)
class HwObj:
    """One ``<object>`` element with the attributes the builder uses."""

    type: str
    os_index: int | None
    subtype: str
    cpuset: frozenset[int] | None
    online_cpuset: frozenset[int] | None
    nodeset: frozenset[int] | None
    local_memory: int | None
    element: ET.Element
    parent: HwObj | None = None
    children: list[HwObj] = field(default_factory=list)

    def descendants(self) -> list[HwObj]:
        """All objects below this one, depth first in document order (no recursion)."""
        out: list[HwObj] = []
        stack = list(reversed(self.children))
        while stack:
            obj = stack.pop()
            out.append(obj)
            stack.extend(reversed(obj.children))
        return out

    def pus(self) -> list[HwObj]:
        """The PU objects below this one."""
        return [o for o in self.descendants() if o.type == "PU"]

    def info(self, name: str) -> str | None:
        """The value of this object's ``<info name=...>`` child, if any."""
        for item in self.element.findall("info"):
            if item.get("name") == name:
                return item.get("value")
        return None


def what_of(element: ET.Element) -> str:
    """How errors name an element: its type attribute (cut short), else its tag."""
    return element.get("type", element.tag)[:32]


def int_attr(element: ET.Element, name: str) -> int | None:
    """An integer attribute (any base Python reads), ``None`` when absent."""
    value = element.get(name)
    if value is None:
        return None
    what = what_of(element)
    if len(value) > _MAX_INT_TEXT:
        raise Malformed(f"{what} has a {name} longer than {_MAX_INT_TEXT} characters")
    try:
        return int(value, 0)
    except ValueError:
        raise Malformed(f"{what} has a non-integer {name}={value!r}") from None


def set_attr(element: ET.Element, name: str) -> frozenset[int] | None:
    """A cpuset or nodeset attribute (hwloc's hex mask), ``None`` when absent."""
    value = element.get(name)
    if value is None:
        return None
    text = value.strip()
    if text.startswith(_INFINITE_PREFIX):
        # Only the finite words matter: the infinite tail names CPUs that do not exist.
        text = text[len(_INFINITE_PREFIX) :].lstrip(",")
    try:
        return frozenset(parse_cpumask(text))
    except ValueError as exc:
        raise Malformed(
            f"{what_of(element)} has a malformed {name}={value[:64]!r}: {exc}"
        ) from None


def hw_object(element: ET.Element, parent: HwObj | None) -> HwObj:
    """One ``<object>`` element's attributes, without its children."""
    obj_type = element.get("type")
    if not obj_type:
        raise Malformed("an <object> has no type attribute")
    if obj_type == "Socket":  # hwloc 1.x name of a package
        obj_type = "Package"
    os_index = int_attr(element, "os_index")
    limit = OS_INDEX_LIMITS.get(obj_type)
    if os_index is not None and limit is not None:
        try:
            check_id(os_index, f"{what_of(element)} os_index", limit)
        except ValueError as exc:
            raise Malformed(str(exc)) from None
    return HwObj(
        type=obj_type,
        os_index=os_index,
        subtype=element.get("subtype", ""),
        cpuset=set_attr(element, "cpuset"),
        online_cpuset=set_attr(element, "online_cpuset"),
        nodeset=set_attr(element, "nodeset"),
        local_memory=int_attr(element, "local_memory"),
        element=element,
        parent=parent,
    )


def object_tree(top: ET.Element) -> HwObj:
    """The object tree under ``top``, built without recursion and at most MAX_OBJECT_DEPTH deep."""
    root = hw_object(top, None)
    stack = [(root, 1)]
    while stack:
        obj, depth = stack.pop()
        children = obj.element.findall("object")
        if children and depth >= MAX_OBJECT_DEPTH:
            raise Malformed(
                f"<object> elements nested deeper than {MAX_OBJECT_DEPTH} levels "
                f"(below a {what_of(obj.element)}); not an hwloc topology"
            )
        obj.children = [hw_object(child, obj) for child in children]
        stack.extend((child, depth + 1) for child in reversed(obj.children))
    return root


def parse_document(path: Path) -> ET.Element:
    """The ``<topology>`` root element of the file (``ConfigError`` naming what is wrong)."""
    try:
        tree = ET.parse(path)
    except FileNotFoundError as exc:
        raise ConfigError(f"hwloc XML file {path} does not exist") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read hwloc XML file {path}: {exc.strerror or exc}") from exc
    except ET.ParseError as exc:
        raise ConfigError(f"{path} is not well-formed XML: {exc}") from exc
    root = tree.getroot()
    if root.tag != "topology":
        raise ConfigError(f"{path} is not an hwloc topology: root element is <{root.tag}>")
    return root


def element_words(elements: list[ET.Element]) -> list[str]:
    """The whitespace-separated words of several elements' text, in order."""
    return " ".join(e.text or "" for e in elements).split()


def numa_distances(
    document: ET.Element, root: HwObj, node_objs: dict[int, HwObj]
) -> dict[int, dict[int, int]]:
    """The NUMA latency matrix by OS index (v2 ``distances2`` or v1 ``distances``)."""
    gp_to_os = {
        obj.element.get("gp_index"): node_id
        for node_id, obj in node_objs.items()
        if obj.element.get("gp_index") is not None
    }
    for matrix in document.findall("distances2"):
        if matrix.get("type") != "NUMANode":
            continue
        kind = int_attr(matrix, "kind") or 0
        if kind & 8 and not kind & 4:  # a bandwidth matrix, not latencies
            continue
        nbobjs = int_attr(matrix, "nbobjs") or 0
        indexes = element_words(matrix.findall("indexes"))
        values = element_words(matrix.findall("u64values"))
        if len(indexes) != nbobjs or len(values) != nbobjs * nbobjs:
            raise Malformed(
                f"distances2 {(matrix.get('name') or '')[:64]} has {len(indexes)} indexes and "
                f"{len(values)} values for nbobjs={nbobjs}"
            )
        try:
            if matrix.get("indexing") == "gp":
                ids = [gp_to_os[i] for i in indexes]
            else:
                ids = [whole_number(i) for i in indexes]
            numbers = [parse_distance(v) for v in values]
        except KeyError as exc:
            raise Malformed(
                f"distances2 names gp_index {str(exc.args[0])[:_MAX_INT_TEXT]!r}, "
                "which is no NUMANode"
            ) from None
        except ValueError as exc:
            raise Malformed(f"distances2 has a bad index or value: {exc}") from None
        return _matrix(ids, numbers)
    for holder in [root, *root.descendants()]:
        matrices = holder.element.findall("distances")
        members = [o for o in holder.descendants() if o.type == "NUMANode"] if matrices else []
        for matrix in matrices:
            nbobjs = int_attr(matrix, "nbobjs") or 0
            if len(members) != nbobjs or any(m.os_index is None for m in members):
                LOG.debug("ignoring v1 distances over %d non-NUMA objects", nbobjs)
                continue
            try:
                base = _latency(matrix.get("latency_base", "1"))
                latencies = [_latency(e.get("value", "")) for e in matrix.findall("latency")]
                scaled = [check_distance(value * base) for value in latencies]
            except ValueError as exc:
                raise Malformed(f"distances has a bad latency value: {exc}") from None
            if len(latencies) != nbobjs * nbobjs:
                raise Malformed(f"distances has {len(latencies)} values for nbobjs={nbobjs}")
            ids = [m.os_index for m in members if m.os_index is not None]
            return _matrix(ids, scaled)
    return {}


def whole_number(text: str) -> int:
    """An index or value written in a ``distances2`` element (``ValueError`` unless digits).

    At most 24 ASCII digits are accepted, so a garbled file costs time linear in its size.
    """
    if not (text.isascii() and text.isdigit()) or len(text) > _MAX_INT_TEXT:
        raise ValueError(f"index {text[:_MAX_INT_TEXT]!r} is not a whole number")
    return int(text)


def _latency(text: str) -> float:
    """A v1 latency or latency base: a finite, non-negative float (``ValueError`` otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text[:_MAX_INT_TEXT]!r} is not a number") from None
    check_distance(value)
    return value


def _matrix(ids: list[int], values: list[int]) -> dict[int, dict[int, int]]:
    size = len(ids)
    return {
        ids[row]: {ids[col]: values[row * size + col] for col in range(size)} for row in range(size)
    }
