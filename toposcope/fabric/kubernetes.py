"""A fabric from Kubernetes node labels, with the levels of Kueue's ``Topology`` object.

Kueue's topology-aware scheduling describes a data centre by node labels: a ``Topology``
(``kueue.x-k8s.io``, versions ``v1beta2``, ``v1beta1`` and ``v1alpha1``) lists in
``spec.levels[].nodeLabel`` the labels from the highest level to the lowest, the last often
``kubernetes.io/hostname`` (the node itself)::

    apiVersion: kueue.x-k8s.io/v1beta1
    kind: Topology
    metadata: {name: default}
    spec:
      levels:
      - nodeLabel: cloud.provider.com/topology-block
      - nodeLabel: cloud.provider.com/topology-rack
      - nodeLabel: kubernetes.io/hostname

Each distinct value of a level's label under one parent is a switch (a domain) at that
level; the lowest level other than the hostname is the leaf, which the nodes hang under.
Kueue does not assume a value to be unique across the cluster (``rack-1`` of ``block-1`` and
``rack-1`` of ``block-2`` are two racks), so a domain is named by :func:`domain_names`: its
label value where no other domain at any level has that value, else its parent's name, a
dot, and its value (``block-1.rack-1``, ``block-2.rack-1``).

Kueue's rules for the levels are checked (1-16 levels, label keys by Kubernetes' pattern, each
once, ``kubernetes.io/hostname`` only last). A node with none of the levels' labels is not in
the topology (a control-plane node, as for Kueue) and is left out with a warning; a node
with some of them but not all, or a value that is not a valid label value, is refused.

Two ways in: files (:func:`read_kubernetes_files`: a ``Topology``, alone, in a
``List`` or among other documents, and ``kubectl get nodes -o yaml|json`` output), checked
key by key with ``file:line`` errors, and the API server
(:mod:`toposcope.fabric.kubernetes_api`), whose answers go through the same checks.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toposcope.boundedread import read_bounded
from toposcope.fabric.located import Lines, assemble_at
from toposcope.fabric.model import Fabric, FabricError, Node, Switch
from toposcope.yamlnodes import YamlNodes, python_nodes

if TYPE_CHECKING:
    import yaml

LOG = logging.getLogger(__name__)

#: the API group of Kueue and the versions of it whose ``Topology`` is read, newest first
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1", "v1alpha1")
#: the label naming the node itself, allowed only as the lowest level
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: Kueue's bounds on ``spec.levels`` and on one ``nodeLabel``
MAX_TOPOLOGY_LEVELS = 16
MAX_NODE_LABEL = 316
#: the largest Topology file and nodes file read, in bytes (``kubectl get nodes -o yaml`` of
#: thousands of nodes with their images is large)
MAX_TOPOLOGY_BYTES = 4 << 20
MAX_NODES_BYTES = 256 << 20
#: how many left-out node names a warning lists
_SHOWN = 5
# Kueue's nodeLabel pattern (a qualified label key) and Kubernetes' label value rule
_LABEL_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])"
)
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


@dataclass(frozen=True)
class Topology:
    """A Kueue ``Topology``: its name and its levels' node labels, highest level first."""

    name: str
    levels: tuple[str, ...]


@dataclass(frozen=True)
class LabeledNode:
    """A Kubernetes node: its name, its labels and the line that declared it (if known)."""

    name: str
    labels: dict[str, str]
    line: int | None = None


class ObjectReader(YamlNodes):
    """The checks of :class:`~toposcope.yamlnodes.YamlNodes` applied to Kubernetes objects
    (a file's, or an API server's answer made nodes); refusals are ``FabricError``.
    """

    def objects(self, root: yaml.Node, field: str) -> list[tuple[yaml.Node, str]]:
        """The objects of one document: the items of a ``List`` (any ``...List`` kind), else
        the document itself; each with the field path that names it.
        """
        entries = self.mapping(root, field)
        kind = self.text(entries["kind"], f"{field}.kind") if "kind" in entries else ""
        if kind == "List" or (kind.endswith("List") and "items" in entries):
            where = "items" if field == "(top level)" else f"{field}.items"
            items = self.sequence(entries["items"], where) if "items" in entries else []
            return [(item, f"{where}[{index}]") for index, item in enumerate(items)]
        return [(root, field)]

    def kind(self, node: yaml.Node, field: str) -> tuple[str, str]:
        """An object's ``apiVersion`` and ``kind`` (either empty when absent)."""
        entries = self.mapping(node, field)
        api_version, kind = (
            self.text(entries[key], f"{field}.{key}") if key in entries else ""
            for key in ("apiVersion", "kind")
        )
        return api_version, kind

    def name(self, node: yaml.Node, field: str) -> str:
        """An object's ``metadata.name``."""
        meta = self.metadata(node, field)
        if "name" not in meta:
            raise self.error(node, f"{field}.metadata", "needs a name")
        return self.text(meta["name"], f"{field}.metadata.name")

    def metadata(self, node: yaml.Node, field: str) -> dict[str, yaml.Node]:
        """An object's ``metadata`` entries (refused when absent)."""
        entries = self.mapping(node, field)
        if "metadata" not in entries:
            raise self.error(node, field, "needs metadata")
        return self.mapping(entries["metadata"], f"{field}.metadata")

    def topology(self, node: yaml.Node, field: str) -> Topology:
        """A ``Topology`` object, checked by Kueue's rules for its levels."""
        api_version, _ = self.kind(node, field)
        group, _, version = api_version.partition("/")
        if group != KUEUE_GROUP or version not in KUEUE_VERSIONS:
            raise self.error(
                self.mapping(node, field).get("apiVersion", node),
                f"{field}.apiVersion",
                f"{api_version!r} is not a Kueue Topology version "
                f"({', '.join(f'{KUEUE_GROUP}/{v}' for v in KUEUE_VERSIONS)})",
            )
        name = self.name(node, field)
        entries = self.mapping(node, field)
        if "spec" not in entries:
            raise self.error(node, field, "needs a spec with levels")
        spec = self.mapping(entries["spec"], f"{field}.spec", ("levels",))
        if "levels" not in spec:
            raise self.error(entries["spec"], f"{field}.spec", "needs levels")
        items = self.sequence(spec["levels"], f"{field}.spec.levels")
        if not 1 <= len(items) <= MAX_TOPOLOGY_LEVELS:
            raise self.error(
                spec["levels"], f"{field}.spec.levels", f"must hold 1-{MAX_TOPOLOGY_LEVELS} levels"
            )
        levels: list[str] = []
        for index, item in enumerate(items):
            where = f"{field}.spec.levels[{index}]"
            level = self.mapping(item, where, ("nodeLabel",))
            if "nodeLabel" not in level:
                raise self.error(item, where, "needs a nodeLabel")
            label = self.text(level["nodeLabel"], f"{where}.nodeLabel")
            if len(label) > MAX_NODE_LABEL or not _LABEL_KEY.fullmatch(label):
                raise self.error(item, f"{where}.nodeLabel", f"{label!r} is not a label key")
            if label in levels:
                raise self.error(item, f"{where}.nodeLabel", f"{label} is already a level")
            if label == HOSTNAME_LABEL and index != len(items) - 1:
                raise self.error(
                    item, f"{where}.nodeLabel", f"{HOSTNAME_LABEL} can only be the lowest level"
                )
            levels.append(label)
        return Topology(name, tuple(levels))

    def node(self, node: yaml.Node, field: str) -> LabeledNode:
        """A ``Node`` object: its name and labels."""
        api_version, kind = self.kind(node, field)
        if kind != "Node" or api_version not in ("v1", ""):
            raise self.error(node, field, f"is a {kind or 'object without kind'}, not a v1 Node")
        name = self.name(node, field)
        meta = self.metadata(node, field)
        where = f"{field}.metadata.labels"
        labels = self.mapping(meta["labels"], where) if "labels" in meta else {}
        return LabeledNode(
            name,
            {key: self.text(value, f"{where}.{key}") for key, value in labels.items()},
            self.line(node) if self.line(node) > 0 else None,
        )


def pick_topology(found: Sequence[Topology], name: str | None, where: str) -> Topology:
    """The Topology called ``name`` among ``found`` (the only one when ``name`` is not given);
    :class:`FabricError` naming ``where`` otherwise.
    """
    if name is not None:
        for topology in found:
            if topology.name == name:
                return topology
        known = ", ".join(t.name for t in found) or "none"
        raise FabricError(f"{where}: no Topology named {name} (found: {known})")
    if len(found) == 1:
        return found[0]
    if not found:
        raise FabricError(f"{where}: no Kueue Topology object")
    names = ", ".join(t.name for t in found)
    message = f"{len(found)} Topology objects ({names}): name one with --kueue-topology-name"
    raise FabricError(f"{where}: {message}")


def domain_names(paths: Iterable[tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """Each domain's switch name, a domain being the label values from the highest level
    down to its own: its value where no other domain has the same value, else its parent's
    name, ``.``, its value (see the module docstring). Paths must come parents first.
    """
    ordered = list(dict.fromkeys(paths))
    count: dict[str, int] = {}
    for path in ordered:
        count[path[-1]] = count.get(path[-1], 0) + 1
    names: dict[tuple[str, ...], str] = {}
    for path in ordered:
        value = path[-1]
        plain = count[value] == 1 or len(path) == 1
        names[path] = value if plain else f"{names[path[:-1]]}.{value}"
    return names


def fabric_from_labels(topology: Topology, nodes: Iterable[LabeledNode], lines: Lines) -> Fabric:
    """The fabric that the labels of ``nodes`` give at the levels of ``topology``.

    Refusals name the line of the node concerned through ``lines``.
    """
    switch_levels = (
        topology.levels[:-1] if topology.levels[-1] == HOSTNAME_LABEL else topology.levels
    )
    paths: list[tuple[str, ...]] = []
    leaves: dict[tuple[str, ...], list[str]] = {}
    kept: list[str] = []
    left_out: list[str] = []
    declared: set[str] = set()
    for node in nodes:
        if node.name in declared:
            raise lines.error(node.line, f"node {node.name} is declared twice")
        declared.add(node.name)
        if node.line is not None:
            lines.note("node", node.name, node.line)
        missing = [label for label in switch_levels if label not in node.labels]
        if switch_levels and len(missing) == len(switch_levels):
            left_out.append(node.name)
            continue
        if missing:
            raise lines.error(
                node.line,
                f"node {node.name} lacks the label {missing[0]} of Topology "
                f"{topology.name} (it has some of its levels' labels, not all)",
            )
        path: tuple[str, ...] = ()
        for label in switch_levels:
            value = node.labels[label]
            if not _LABEL_VALUE.fullmatch(value):
                raise lines.error(
                    node.line, f"node {node.name}: label {label}: {value!r} is not a label value"
                )
            path = (*path, value)
            paths.append(path)
            if node.line is not None:
                lines.note("domain", "/".join(path), node.line)
        leaves.setdefault(path, []).append(node.name)
        kept.append(node.name)
    names = domain_names(paths)
    children: dict[tuple[str, ...], list[str]] = {}
    for path in names:
        if len(path) > 1:
            children.setdefault(path[:-1], []).append(names[path])
    seen: dict[str, tuple[str, ...]] = {}
    switches: list[Switch] = []
    for path, name in names.items():
        line = lines.where.get(("domain", "/".join(path)))
        if name in seen:
            raise lines.error(
                line, f"domains {'/'.join(seen[name])} and {'/'.join(path)} would both be "
                f"named {name}",
            )  # fmt: skip
        seen[name] = path
        if line is not None:
            lines.note("switch", name, line)
        switches.append(
            Switch(
                name,
                level=len(switch_levels) - len(path),
                switches=tuple(children.get(path, ())),
                nodes=tuple(leaves.get(path, ())),
            )
        )
    fabric = assemble_at(lines, switches, nodes=[Node(name) for name in kept])
    if left_out:
        shown = ", ".join(left_out[:_SHOWN]) + (", ..." if len(left_out) > _SHOWN else "")
        LOG.warning(
            "%d nodes have none of the labels of Topology %s's levels and are left out: %s",
            len(left_out),
            topology.name,
            shown,
        )
    return fabric


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's entries; a key given twice fails the fast read (YAML names its line)."""
    entries = dict(pairs)
    if len(entries) != len(pairs):
        raise ValueError("duplicate key")
    return entries


def slim_nodes(value: Any) -> Any:
    """Decoded Node objects (one, or a ``List`` of them) with only what is read of each:
    ``apiVersion``, ``kind``, ``metadata.name`` and ``metadata.labels``. A Node's status
    (its images, conditions) is most of its size, and turning it into nodes to be checked
    would be most of the time.
    """

    def one(item: Any) -> Any:
        if not isinstance(item, dict):
            return item
        kept = {key: item[key] for key in ("apiVersion", "kind", "metadata") if key in item}
        meta = kept.get("metadata")
        if isinstance(meta, dict):
            kept["metadata"] = {key: meta[key] for key in ("name", "labels") if key in meta}
        return kept

    if isinstance(value, dict) and isinstance(value.get("items"), list):
        listed = {key: value[key] for key in ("apiVersion", "kind") if key in value}
        return {**listed, "items": [one(item) for item in value["items"]]}
    return one(value)


def _documents(text: str, lines: Lines, *, fast: bool, nodes: bool = False) -> list[yaml.Node]:
    """The documents of ``text``: as JSON without lines when ``fast`` and it is JSON (only
    what is read of Node objects when ``nodes``), else composed as YAML (several documents
    allowed, separated by ``---``).
    """
    if fast and text.lstrip().startswith("{"):
        try:
            value = json.loads(text, object_pairs_hook=_unique)
        except (ValueError, RecursionError):
            pass  # composed as YAML below, which names the line of what is wrong
        else:
            return [python_nodes(slim_nodes(value) if nodes else value)]
    import yaml  # noqa: PLC0415  (PyYAML only when such a file is read)

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        documents = [d for d in yaml.compose_all(text, Loader=loader) if d is not None]
    except (yaml.YAMLError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        raise lines.error(mark.line + 1 if mark else None, f"not valid YAML: {exc}") from None
    return documents


def _read_text(path: str | Path, limit: int, what: str) -> str:
    raw = read_bounded(path, limit, str(path), what=what)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FabricError(f"{path}: not UTF-8 text") from None


def _topologies(text: str, lines: Lines, fast: bool) -> list[Topology]:
    reader = ObjectReader(lines.error)
    found: list[Topology] = []
    documents = _documents(text, lines, fast=fast)
    for number, document in enumerate(documents):
        field = "(top level)" if len(documents) == 1 else f"(document {number + 1})"
        for item, where in reader.objects(document, field):
            if reader.kind(item, where)[1] == "Topology":
                found.append(reader.topology(item, where))
    return found


def _nodes(text: str, lines: Lines, fast: bool) -> list[LabeledNode]:
    reader = ObjectReader(lines.error)
    documents = _documents(text, lines, fast=fast, nodes=True)
    return [
        reader.node(item, where)
        for number, document in enumerate(documents)
        for item, where in reader.objects(
            document, "(top level)" if len(documents) == 1 else f"(document {number + 1})"
        )
    ]


def read_kubernetes_files(
    nodes_path: str | Path, topology_path: str | Path, topology_name: str | None = None
) -> Fabric:
    """The fabric of a file of Node objects (``kubectl get nodes -o yaml`` or ``-o json``
    output, a ``List``, or Node documents) at the levels of the Kueue ``Topology`` in
    ``topology_path`` (the one called ``topology_name``, or the only one there).

    JSON is read by the fast JSON parser first; only when something in it is refused is
    the text composed as YAML again, for the line of the refusal.
    """
    text = _read_text(topology_path, MAX_TOPOLOGY_BYTES, "a Kueue Topology file")
    try:
        found = _topologies(text, Lines(str(topology_path)), fast=True)
    except FabricError:
        found = _topologies(text, Lines(str(topology_path)), fast=False)
    topology = pick_topology(found, topology_name, str(topology_path))
    text = _read_text(nodes_path, MAX_NODES_BYTES, "a file of Kubernetes nodes")
    try:
        return fabric_from_labels(
            topology, _nodes(text, Lines(str(nodes_path)), True), Lines(str(nodes_path))
        )
    except FabricError:
        lines = Lines(str(nodes_path))
        return fabric_from_labels(topology, _nodes(text, lines, fast=False), lines)
