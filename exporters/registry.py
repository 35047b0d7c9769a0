"""The explicit table of collectors the exporter can run.

Like node_exporter's ``registerCollector``, each collector module contributes one entry:
a name (which becomes ``--collector.<name>`` / ``--no-collector.<name>``), whether it is on
by default, and a factory taking the
:class:`~toposcope.exporters.context.CollectorContext`. The table is
a value that tests build fresh; there is no import-time side effect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import Metric

from toposcope.errors import UsageError
from toposcope.exporters.context import CollectorContext


class Collector(Protocol):
    """Anything whose ``collect()`` yields metric families, rebuilt on every scrape. The
    collectors of the table write each family through a
    :class:`~toposcope.exporters.exposition.FamilyWriter` and yield its text.
    """

    def collect(self) -> Iterable[Metric]:
        """Read the sources and yield this scrape's families."""
        ...


CollectorFactory = Callable[[CollectorContext], Collector]


@dataclass(frozen=True)
class CollectorEntry:
    """One registered collector: name, default state, factory and a one-line description."""

    name: str
    default_enabled: bool
    factory: CollectorFactory
    description: str


class CollectorTable:
    """An ordered, explicit mapping of collector names to entries."""

    def __init__(self, entries: Iterable[CollectorEntry] = ()) -> None:
        self._entries: dict[str, CollectorEntry] = {}
        for entry in entries:
            self.register(entry)

    def register(self, entry: CollectorEntry) -> None:
        """Add an entry; a second entry with the same name is a programming error."""
        if entry.name in self._entries:
            raise ValueError(f"collector {entry.name!r} registered twice")
        self._entries[entry.name] = entry

    def __iter__(self) -> Iterator[CollectorEntry]:
        return iter(self._entries.values())

    def names(self) -> list[str]:
        """Registered collector names in registration order."""
        return list(self._entries)

    def get(self, name: str) -> CollectorEntry:
        """The entry for ``name``; :class:`UsageError` lists the known names otherwise."""
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self._entries)
            raise UsageError(f"unknown collector {name!r} (known: {known})") from None

    def select(
        self,
        only: Iterable[str] | None = None,
        enable: Iterable[str] = (),
        disable: Iterable[str] = (),
    ) -> list[CollectorEntry]:
        """Resolve which collectors run.

        ``only`` (``--collectors a,b``) replaces the defaults; otherwise defaults plus
        ``enable`` minus ``disable`` (``--collector.x`` / ``--no-collector.x``). Unknown names
        raise :class:`UsageError`.
        """
        for name in [*(only or ()), *enable, *disable]:
            self.get(name)
        if only is not None:
            chosen = set(only)
        else:
            chosen = {e.name for e in self if e.default_enabled} | set(enable)
        chosen -= set(disable)
        return [e for e in self if e.name in chosen]
