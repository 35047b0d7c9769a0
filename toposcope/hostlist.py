"""Slurm's compact host lists (``n[1-3,5]``, ``rack[1-2]-gpu[01-04]``) and index lists.

Slurm writes a set of nodes as comma-separated expressions whose bracketed parts are ranges
of numbers: ``n[1-3,5]`` is n1, n2, n3, n5; ``gpu[01-10]`` keeps the width of the first
number (gpu01 ... gpu10); several bracketed parts multiply (``r[1-2]n[1-2]`` is r1n1, r1n2,
r2n1, r2n2). Index lists (``IDX:0-3``, ``S:0-1``, ``CPU_IDs=0,2-3``) are cpulists and are read
by :func:`toposcope.cpulist.parse_cpulist`.

The text comes from Slurm, but job fields in it come from users, so the parser is bounded: a
list expands to at most :data:`MAX_HOSTS` names, each a valid host name
(:func:`toposcope.identity.names.is_node_name`), and the work is linear in the text and the names
produced. Every refusal is a :class:`HostlistError` naming the part.

It lives in the core because Slurm's files name nodes this way too: the Slurm part reads job
and node lists with it, the exporter's ``slurm_gres`` collector finds its own ``NodeName=``
lines of gres.conf with it.
"""

from __future__ import annotations

import re

from toposcope.cpulist import CpuSetError, parse_cpulist
from toposcope.errors import SourceError
from toposcope.identity.names import is_node_name

#: The most host names one host list may expand to (a large cluster has tens of thousands).
MAX_HOSTS = 65_536
#: The longest host list text read, in characters.
MAX_HOSTLIST_TEXT = 1 << 20
#: Slurm's words for "no nodes".
_EMPTY = frozenset({"", "(null)", "None", "N/A"})
_RANGE_RE = re.compile(r"([0-9]{1,9})(?:-([0-9]{1,9}))?")
_SHOWN = 40


class HostlistError(SourceError, ValueError):
    """A host list or index list that is malformed or expands to too much."""


def shown(text: str) -> str:
    """``text`` quoted for an error message, cut short when long."""
    return repr(text) if len(text) <= _SHOWN else f"{text[:_SHOWN]!r}... ({len(text):,} characters)"


def parse_indices(text: str, what: str = "index list") -> tuple[int, ...]:
    """Numbers of an index list such as ``0-3,5`` (``N/A`` and empty text mean none).

    Raises :class:`HostlistError` naming ``what`` when the list is malformed or too large.
    """
    if text.strip() in _EMPTY:
        return ()
    try:
        return parse_cpulist(text)
    except CpuSetError as exc:
        raise HostlistError(f"malformed {what} {shown(text)}: {exc}") from None


def split_outside(text: str, opening: str, closing: str, what: str) -> list[str]:
    """``text`` split at the commas outside ``opening``...``closing`` pairs.

    ``n[1-2],m`` gives ``["n[1-2]", "m"]`` with brackets; the pairs may not nest or be left
    unbalanced (:class:`HostlistError` quoting the text as ``what``).
    """
    items: list[str] = []
    inside = False
    start = 0
    for position, char in enumerate(text):
        if char == opening:
            if inside:
                raise HostlistError(f"{what} {shown(text)} nests {opening}{closing}")
            inside = True
        elif char == closing:
            if not inside:
                raise HostlistError(f"{what} {shown(text)} closes a {closing} it never opened")
            inside = False
        elif char == "," and not inside:
            items.append(text[start:position])
            start = position + 1
    if inside:
        raise HostlistError(f"{what} {shown(text)} leaves a {opening} open")
    items.append(text[start:])
    return items


def _ranges(inside: str, expression: str) -> list[str]:
    """The numbers (as text, zero-padded like their range start) of one bracketed part."""
    numbers: list[str] = []
    for part in inside.split(","):
        match = _RANGE_RE.fullmatch(part.strip())
        if match is None:
            raise HostlistError(f"malformed range {shown(part)} in host list {shown(expression)}")
        lo_text, hi_text = match.group(1), match.group(2) or match.group(1)
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise HostlistError(
                f"range {shown(part)} in host list {shown(expression)} ends before it starts"
            )
        if len(numbers) + hi - lo + 1 > MAX_HOSTS:
            raise HostlistError(
                f"host list {shown(expression)} names more than {MAX_HOSTS:,} hosts"
            )
        width = len(lo_text)
        numbers.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return numbers


def _expand_one(expression: str) -> list[str]:
    """The host names of one expression such as ``r[1-2]n[01-04]``."""
    pieces = re.split(r"\[([^\]]*)\]", expression)
    # pieces alternate: literal text, bracket content, literal text, ...
    names = [pieces[0]]
    for index in range(1, len(pieces), 2):
        numbers = _ranges(pieces[index], expression)
        if len(names) * len(numbers) > MAX_HOSTS:
            raise HostlistError(
                f"host list {shown(expression)} names more than {MAX_HOSTS:,} hosts"
            )
        suffix = pieces[index + 1]
        names = [f"{name}{number}{suffix}" for name in names for number in numbers]
    return names


def expand_hostlist(text: str) -> tuple[str, ...]:
    """The host names of a Slurm host list, in order, without repeats.

    ``"n[1-3,5]"`` gives ``("n1", "n2", "n3", "n5")``; ``""``, ``"(null)"`` and ``"None"``
    give ``()``. Raises :class:`HostlistError` for unbalanced or nested brackets, malformed
    ranges, names that are no host names, and lists of more than :data:`MAX_HOSTS` names.
    """
    text = text.strip()
    if text in _EMPTY:
        return ()
    if len(text) > MAX_HOSTLIST_TEXT:
        raise HostlistError(f"host list of {len(text):,} characters is too long")
    found: dict[str, None] = {}
    produced = 0  # repeats included, so that a list repeating one huge range is refused too
    for item in split_outside(text, "[", "]", "host list"):
        expression = item.strip()
        if not expression:
            raise HostlistError(f"host list {shown(text)} has an empty entry")
        names = _expand_one(expression)
        produced += len(names)
        if produced > MAX_HOSTS:
            raise HostlistError(f"host list {shown(text)} names more than {MAX_HOSTS:,} hosts")
        for name in names:
            if not is_node_name(name):
                raise HostlistError(
                    f"host list {shown(text)} names {shown(name)}, which is no host name"
                )
            found[name] = None
    return tuple(found)
