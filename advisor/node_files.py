"""Files measured on one machine type and handed to the advisor per node: ``NODE=FILE``.

``--p2p-bandwidth`` (GPU pairs) and ``--memory-bandwidth`` (NUMA node pairs) both take a
node name or glob and a file measured on such a node; the first option whose glob matches a
node applies to it. This module holds what the two share: the glob's check, the option's
parsing and the matching, so that both options accept and refuse the same node patterns,
the guarded reading of a file into its lines, and the attaching of each file to the nodes
it applies to (:func:`with_node_files`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Generic, TypeVar

from toposcope.advisor.model import ClusterModel, NodeModel
from toposcope.errors import UsageError

#: a node glob: the characters of node names, and ``*``, ``?``, ``[``, ``]``
NODE_GLOB = re.compile(r"[A-Za-z0-9._:*?\[\]!-]{1,253}")

F = TypeVar("F")


@dataclass(frozen=True)
class NodeFileOption(Generic[F]):
    """One ``NODE=FILE`` option: a node glob and its file, already read."""

    glob: str
    file: F


def measured_lines(
    path: Path, max_bytes: int, error: type[UsageError]
) -> Iterator[tuple[str, str, str]]:
    """Each line of a measured file as ``(FILE:LINE, the line without its comment and outer
    blanks, the raw line)``; a blank line too (its text ``""``: it ends a matrix). A path that
    is not a file, a file over ``max_bytes`` or one that cannot be read as UTF-8 raises
    ``error`` naming the path.
    """
    try:
        if not path.is_file():
            raise error(f"{path}: not a file")
        if path.stat().st_size > max_bytes:
            raise error(f"{path}: over {max_bytes} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read: {exc}") from exc
    for number, raw in enumerate(text.splitlines(), start=1):
        yield f"{path}:{number}", raw.split("#", 1)[0].strip(), raw


def parse_node_file(flag: str, text: str, read: Callable[[Path], F]) -> NodeFileOption[F]:
    """Parse ``NODE=FILE`` of option ``flag`` and read the file with ``read``
    (:class:`UsageError` for a missing ``=``, a bad glob, or what ``read`` raises).
    """
    glob, found, name = text.partition("=")
    if not found or not name:
        raise UsageError(f"{flag} {text!r} is not NODE=FILE")
    if not NODE_GLOB.fullmatch(glob):
        raise UsageError(f"{flag} {text!r}: {glob!r} is not a node name or glob")
    return NodeFileOption(glob, read(Path(name)))


def first_match(options: Sequence[NodeFileOption[F]], node: str) -> NodeFileOption[F] | None:
    """The first option whose glob matches ``node`` (``None`` when none does)."""
    return next((o for o in options if fnmatch.fnmatchcase(node, o.glob)), None)


def with_node_files(
    model: ClusterModel,
    options: Sequence[NodeFileOption[F]],
    flag: str,
    nodes: str,
    path: Callable[[F], str],
    attach: Callable[[NodeModel, NodeFileOption[F]], NodeModel | None],
) -> ClusterModel:
    """``model`` with each node's file attached by ``attach`` (the first option of ``flag``
    whose glob matches the node; ``attach`` answers ``None`` for a node the file does not
    apply to, and raises for a file that does not fit the node). An option that applied to
    none of the ``nodes`` is a note in the model.
    """
    if not options:
        return model
    found = dict(model.nodes)
    used: set[str] = set()
    for name, node in sorted(model.nodes.items()):
        option = first_match(options, name)
        if option is None:
            continue
        attached = attach(node, option)
        if attached is None:
            continue
        used.add(option.glob)
        found[name] = attached
    notes = unmatched_notes(flag, options, used, path, nodes)
    return replace(model, nodes=found, notes=(*model.notes, *notes))


def unmatched_notes(
    flag: str,
    options: Iterable[NodeFileOption[F]],
    used: set[str],
    path: Callable[[F], str],
    nodes: str,
) -> list[str]:
    """A model note for each option whose glob matched none of the ``nodes`` it applies to
    (``"node with GPUs"``, say).
    """
    return [
        f"{flag} {o.glob}={path(o.file)}: no {nodes} matches {o.glob!r}"
        for o in options
        if o.glob not in used
    ]
