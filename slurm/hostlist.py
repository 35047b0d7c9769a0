"""Slurm's host lists and index lists, with refusals as :class:`SlurmFormatError`.

The parsers are the core's (:mod:`toposcope.hostlist`, which the exporter shares); this
module gives the Slurm part the same functions raising the Slurm part's error type, so that
a malformed list from Slurm is reported like any other malformed Slurm answer.
"""

from __future__ import annotations

from toposcope import hostlist as core
from toposcope.hostlist import MAX_HOSTLIST_TEXT, MAX_HOSTS, HostlistError, shown
from toposcope.slurm.errors import SlurmFormatError

__all__ = [
    "MAX_HOSTLIST_TEXT",
    "MAX_HOSTS",
    "expand_hostlist",
    "parse_indices",
    "shown",
    "split_outside",
]


def parse_indices(text: str, what: str = "index list") -> tuple[int, ...]:
    """:func:`toposcope.hostlist.parse_indices`, raising :class:`SlurmFormatError`."""
    try:
        return core.parse_indices(text, what)
    except HostlistError as exc:
        raise SlurmFormatError(str(exc)) from None


def split_outside(text: str, opening: str, closing: str, what: str) -> list[str]:
    """:func:`toposcope.hostlist.split_outside`, raising :class:`SlurmFormatError`."""
    try:
        return core.split_outside(text, opening, closing, what)
    except HostlistError as exc:
        raise SlurmFormatError(str(exc)) from None


def expand_hostlist(text: str) -> tuple[str, ...]:
    """:func:`toposcope.hostlist.expand_hostlist`, raising :class:`SlurmFormatError`."""
    try:
        return core.expand_hostlist(text)
    except HostlistError as exc:
        raise SlurmFormatError(str(exc)) from None
