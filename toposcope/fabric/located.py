"""Turning a refused fabric into a ``file:line`` error: where each thing was declared.

Every reader records the line that declared each switch, block and node while it reads, then
builds the :class:`~toposcope.fabric.model.Fabric` through :func:`assemble_at`: a
:class:`~toposcope.fabric.model.FabricError` about one of them becomes a
:class:`LocatedFabricError` saying ``source:line: ...``, so the rules live once, in the model.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from toposcope.fabric.model import Block, Fabric, FabricError, Node, Switch, assemble


class LocatedFabricError(FabricError):
    """A :class:`FabricError` whose message starts with ``source:line:``."""


@dataclass
class Lines:
    """The line that declared each switch, block and node of one source."""

    source: str
    where: dict[tuple[str, str], int] = field(default_factory=dict)

    def note(self, kind: str, name: str, line: int) -> None:
        """Remember ``line`` for ``kind`` ``name`` unless an earlier line declared it."""
        self.where.setdefault((kind, name), line)

    def at(self, line: int | None) -> str:
        """``source:line`` (or just ``source`` without a line)."""
        return f"{self.source}:{line}" if line is not None else self.source

    def error(self, line: int | None, message: str) -> LocatedFabricError:
        """A refusal of what ``line`` of the source says."""
        return LocatedFabricError(f"{self.at(line)}: {message}")

    def locate(self, error: FabricError) -> LocatedFabricError:
        """``error`` with the line of what it is about in front (the source alone if none)."""
        if isinstance(error, LocatedFabricError):
            return error
        line = self.where.get((error.kind, error.name)) if error.kind else None
        return LocatedFabricError(f"{self.at(line)}: {error}", error.kind, error.name)


def assemble_at(
    lines: Lines,
    switches: Iterable[Switch],
    blocks: Iterable[Block] = (),
    nodes: Iterable[Node] = (),
    block_sizes: Iterable[int] = (),
) -> Fabric:
    """:func:`~toposcope.fabric.model.assemble`, with refusals located by ``lines``."""
    try:
        return assemble(switches, blocks, nodes, block_sizes)
    except FabricError as exc:
        raise lines.locate(exc) from None
