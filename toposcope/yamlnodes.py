"""Checking a YAML document node by node, so that every refusal names its line and field.

Configuration files from outside (the web configuration, a fabric description) are composed
with PyYAML's safe loader into nodes, not loaded into Python values, so that a wrong type,
an unknown or duplicate key (which ``yaml.safe_load`` silently keeps the last of) is refused
as ``source:line: field: problem``. :class:`YamlNodes` holds the checks every such reader
shares; a reader adds the fields of its own schema.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from toposcope.errors import ConfigError

if TYPE_CHECKING:
    import yaml

NULL = "tag:yaml.org,2002:null"
STR = "tag:yaml.org,2002:str"
INT = "tag:yaml.org,2002:int"
FLOAT = "tag:yaml.org,2002:float"
BOOL = "tag:yaml.org,2002:bool"
_TRUE = frozenset({"true", "yes", "on"})
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"

#: builds the exception for a refusal: (line, "field: problem") -> exception
Refuse = Callable[[int, str], Exception]


def compose_config(text: str, source: str) -> yaml.Node | None:
    """A configuration file's YAML ``text`` composed with the safe loader (``None`` when it
    holds no document); YAML that does not parse is a :class:`ConfigError` naming ``source``
    and, where PyYAML knows it, the line.
    """
    import yaml  # noqa: PLC0415 (PyYAML only when such a file is read)

    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{source}{at}: not valid YAML: {exc}") from exc


def refuse_in(source: str) -> Refuse:
    """Refusals as ``source:line: field: problem`` :class:`ConfigError` s."""
    return lambda line, problem: ConfigError(f"{source}:{line}: {problem}")


class YamlNodes:
    """The checks of composed YAML nodes; each failure is ``refuse(line, "field: problem")``.

    ``null_mapping_is_empty``: whether a null where a mapping is expected reads as an empty
    mapping (``basic_auth_users:`` with nothing under it) or is refused.
    """

    def __init__(self, refuse: Refuse, *, null_mapping_is_empty: bool = False) -> None:
        import yaml  # noqa: PLC0415 (PyYAML only when such a file is read)

        self.refuse = refuse
        self.null_mapping_is_empty = null_mapping_is_empty
        self._scalar = yaml.ScalarNode
        self._mapping = yaml.MappingNode
        self._sequence = yaml.SequenceNode

    def line(self, node: yaml.Node) -> int:
        """The 1-based line ``node`` starts on."""
        return int(node.start_mark.line) + 1

    def error(self, node: yaml.Node, field: str, problem: str) -> Exception:
        """The refusal of ``field`` at ``node``'s line."""
        return self.refuse(self.line(node), f"{field}: {problem}")

    def empty(self, node: yaml.Node) -> bool:
        """Whether ``node`` is null or an empty mapping or sequence."""
        if isinstance(node, self._scalar):
            return node.tag == NULL
        return isinstance(node, self._mapping | self._sequence) and not node.value

    def mapping(
        self, node: yaml.Node, field: str, known: tuple[str, ...] | None = None
    ) -> dict[str, yaml.Node]:
        """The entries of a mapping node by key: string keys, each once, among ``known``."""
        if self.null_mapping_is_empty and isinstance(node, self._scalar) and node.tag == NULL:
            return {}
        if not isinstance(node, self._mapping):
            raise self.error(node, field, "must be a mapping")
        entries: dict[str, yaml.Node] = {}
        for key_node, value in node.value:
            if not isinstance(key_node, self._scalar) or key_node.tag != STR:
                raise self.error(key_node, field, "keys must be strings")
            key = str(key_node.value)
            where = key if field == "(top level)" else f"{field}.{key}"
            if known is not None and key not in known:
                raise self.error(key_node, where, f"unknown key (known: {', '.join(known)})")
            if key in entries:
                raise self.error(key_node, where, "duplicate key")
            entries[key] = value
        return entries

    def sequence(self, node: yaml.Node, field: str) -> list[yaml.Node]:
        """The items of a sequence node (a null node is an empty list)."""
        if isinstance(node, self._scalar) and node.tag == NULL:
            return []
        if not isinstance(node, self._sequence):
            raise self.error(node, field, "must be a list")
        return list(node.value)

    def text(self, node: yaml.Node, field: str) -> str:
        """A string scalar's value."""
        if not isinstance(node, self._scalar) or node.tag != STR:
            raise self.error(node, field, "must be a string")
        return str(node.value)

    def boolean(self, node: yaml.Node, field: str) -> bool:
        """A boolean scalar's value."""
        if not isinstance(node, self._scalar) or node.tag != BOOL:
            raise self.error(node, field, "must be true or false")
        return str(node.value).lower() in _TRUE

    def whole(self, node: yaml.Node, field: str) -> int:
        """An integer scalar's value."""
        if not isinstance(node, self._scalar) or node.tag != INT:
            raise self.error(node, field, "must be a whole number")
        try:
            return int(str(node.value), 0)
        except ValueError:
            raise self.error(node, field, "must be a whole number") from None

    def number(self, node: yaml.Node, field: str) -> float:
        """An integer or float scalar's value."""
        if not isinstance(node, self._scalar) or node.tag not in (INT, FLOAT):
            raise self.error(node, field, "must be a number")
        try:
            return float(str(node.value).replace("_", ""))
        except ValueError:
            raise self.error(node, field, "must be a number") from None


def json_nodes(text: str) -> yaml.Node | None:
    """The JSON object ``text`` as the YAML nodes composing it would give, without line
    numbers (``None`` when it is not a JSON object). :func:`json.loads` is some fifty times
    faster than composing, so a reader checks JSON this way first and composes the text as
    YAML again only when something is refused, for the line of the refusal.
    """
    if not text.lstrip().startswith("{"):
        return None
    maker = _NodeMaker()
    try:
        # duplicate keys are kept, so the reader refuses them as it does in YAML
        return maker.node(json.loads(text, object_pairs_hook=maker.mapping))
    except (ValueError, RecursionError):
        return None


def python_nodes(value: Any) -> yaml.Node:
    """Decoded JSON ``value`` (an API server's answer) as YAML nodes without line numbers,
    so that the checks of :class:`YamlNodes` serve it as they serve a file.
    """
    return _NodeMaker().node(value)


class _NodeMaker:
    """Builds YAML nodes from JSON values; one node serves every repeat of a scalar (the
    readers only read nodes).
    """

    def __init__(self) -> None:
        import yaml  # noqa: PLC0415 (PyYAML only when such a document is read)

        self._yaml = yaml
        self._nowhere = yaml.Mark("json", 0, -1, -1, None, 0)
        self._scalars: dict[tuple[str, str], yaml.Node] = {}

    def scalar(self, tag: str, text: str) -> yaml.Node:
        """The scalar node of ``text`` tagged ``tag`` (``str``, ``int``...)."""
        found = self._scalars.get((tag, text))
        if found is None:
            found = self._yaml.ScalarNode(
                f"tag:yaml.org,2002:{tag}", text, self._nowhere, self._nowhere
            )
            self._scalars[(tag, text)] = found
        return found

    def mapping(self, pairs: Iterable[tuple[object, Any]]) -> yaml.Node:
        """The mapping node of a JSON object's entries, in order."""
        entries = [(self.scalar("str", str(key)), self.node(value)) for key, value in pairs]
        return self._yaml.MappingNode(_MAP, entries, self._nowhere, self._nowhere)

    def node(self, value: Any) -> yaml.Node:
        """The node of one decoded JSON value (a node already made is kept)."""
        if isinstance(value, self._yaml.Node):
            return value
        if isinstance(value, dict):
            return self.mapping(value.items())
        if isinstance(value, list):
            items = [self.node(item) for item in value]
            return self._yaml.SequenceNode(_SEQ, items, self._nowhere, self._nowhere)
        if value is None:
            return self.scalar("null", "null")
        if isinstance(value, bool):
            return self.scalar("bool", "true" if value else "false")
        if isinstance(value, int):
            return self.scalar("int", str(value))
        if isinstance(value, float):
            return self.scalar("float", repr(value))
        return self.scalar("str", str(value))
