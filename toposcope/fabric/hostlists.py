"""Writing names back as Slurm host lists (``dev[0-5]``), in their order.

:func:`toposcope.hostlist.expand_hostlist` reads ``n[1-3,7]``; :func:`compress_hostlist`
writes it, keeping the names' order so that reading the text back gives the same sequence
(a written ``topology.conf`` reads back as the model it came from). Runs of names that share
a prefix and a zero-padding width become one bracket; anything else stays a name of its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_TRAILING_NUMBER = re.compile(r"^(.*?)([0-9]{1,9})$")


def _key(name: str) -> tuple[str, int, int] | None:
    """(prefix, padding width, number) of a name ending in digits; ``None`` otherwise."""
    match = _TRAILING_NUMBER.match(name)
    if match is None or "[" in name or "]" in name:
        return None
    digits = match.group(2)
    width = len(digits) if len(digits) > 1 and digits.startswith("0") else 0
    return match.group(1), width, int(digits)


def _same_width(group: int, width: int, number: int) -> bool:
    """Whether a number written with ``width`` reads back the same in a ``group`` bracket
    (``n10`` joins ``n[08-09]``: 10 padded to 2 digits is still ``10``).
    """
    return group == width or (width == 0 and group > 0 and len(str(number)) == group)


def _ranges(numbers: list[int], width: int) -> str:
    """``1-3,7`` from ``[1, 2, 3, 7]`` (runs kept in order), zero-padded to ``width``."""
    parts: list[str] = []
    start = previous = numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        low, high = str(start).zfill(width), str(previous).zfill(width)
        parts.append(low if start == previous else f"{low}-{high}")
        if number is not None:
            start = previous = number
    return ",".join(parts)


def compress_hostlist(names: Iterable[str]) -> str:
    """The names as one Slurm host list, in order: ``["n1", "n2", "n3", "m"]`` is
    ``n[1-3],m``. Expanding it gives the names back in the same order.
    """
    groups: list[tuple[tuple[str, int] | None, list[int] | str]] = []
    for name in names:
        key = _key(name)
        if key is None:
            groups.append((None, name))
            continue
        prefix, width, number = key
        last = groups[-1] if groups else None
        if (
            last is not None
            and last[0] is not None
            and last[0][0] == prefix
            and _same_width(last[0][1], width, number)
            and isinstance(last[1], list)
            and number > last[1][-1]
        ):
            last[1].append(number)
        else:
            groups.append(((prefix, width), [number]))
    words: list[str] = []
    for group, members in groups:
        if group is None or isinstance(members, str):
            words.append(str(members))
        elif len(members) == 1:
            words.append(f"{group[0]}{str(members[0]).zfill(group[1])}")
        else:
            words.append(f"{group[0]}[{_ranges(members, group[1])}]")
    return ",".join(words)
