"""The lines and ``Key=Value`` words of Slurm's configuration files, as Slurm's one parser
reads every one of them (``slurm.conf(5)``, ``topology.conf(5)``, ``gres.conf(5)``).

``#`` starts a comment to the end of the line and ``\\#`` is a literal ``#``; a line ending
in ``\\`` goes on on the next one; a line is whitespace-separated ``Key=Value`` words whose
keys are in any case and whose values may be double-quoted. Each reader of a file
(:mod:`toposcope.fabric.slurmconf`, :mod:`toposcope.topology.gresconf_file`) decides what
its keys mean; how a line is cut into words is decided here, once.
"""

from __future__ import annotations

import re

_COMMENT = re.compile(r"(?<!\\)#")


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each line of ``text``: comments dropped, lines ending in
    ``\\`` joined with the next.
    """
    joined: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _COMMENT.split(raw, maxsplit=1)[0].replace("\\#", "#")
        if not pending:
            start = number
        stripped = line.rstrip()
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        joined.append((start, pending + line))
        pending = ""
    if pending:
        joined.append((start, pending))
    return joined


def key_values(line: str, where: str) -> dict[str, str]:
    """The ``Key=Value`` words of ``line`` by lower-case key, quotes taken off the values.

    Raises :class:`ValueError` saying ``where`` and what is wrong for a word that is not
    ``Key=Value`` or a key given twice (Slurm keeps the last and logs it; a file a person
    wrote two values into is refused rather than read either way); each reader turns it
    into its own error.
    """
    words: dict[str, str] = {}
    for word in line.split():
        key, equals, value = word.partition("=")
        if not equals or not key:
            raise ValueError(f"{where}: {word[:60]!r} is not Key=Value")
        lowered = key.lower()
        if lowered in words:
            raise ValueError(f"{where}: {key} is given twice")
        words[lowered] = value.strip('"')
    return words
