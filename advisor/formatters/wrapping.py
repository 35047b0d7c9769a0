"""Fitting text to a terminal's columns without splitting names.

:func:`textwrap.wrap` breaks at hyphens and cuts any word longer than the line, so a workload
called ``vit-cross-socket.service`` comes out as ``vit-`` / ``cross-socke`` / ``t.service``.
Names here are whole words: :func:`wrap` breaks lines at spaces only, and a word longer than
a whole line is broken after a ``/``, ``.`` or ``-`` (where a path or a host name has its
own seams); a piece still longer than the line is cut to fit with an ellipsis in its middle
(:func:`shorten`), as ``kubectl`` does with what does not fit.
"""

from __future__ import annotations

import re

#: what stands in for the characters a cell leaves out (ASCII: any terminal encoding shows it)
ELLIPSIS = "..."
#: the narrowest line :func:`wrap` fills; a narrower width gives lines this long
MIN_LINE = 8
#: a zero-width split after each separator a name may be broken at
_SEAMS = re.compile(r"(?<=[/.\-])")


def shorten(text: str, width: int, *, middle: bool = False) -> str:
    """``text`` cut to ``width`` characters with :data:`ELLIPSIS` where the rest was: at the
    end, or in the middle (``middle``) so that both ends of a name stay readable.
    """
    if len(text) <= width:
        return text
    keep = width - len(ELLIPSIS)
    if keep < 2:
        return text[: max(width, 0)]
    if not middle:
        return text[:keep] + ELLIPSIS
    tail = keep // 2
    return text[: keep - tail] + ELLIPSIS + text[-tail:]


def _pieces(word: str, width: int) -> list[str]:
    """``word`` in pieces of at most ``width``, broken only after ``/ . -``."""
    if len(word) <= width:
        return [word]
    pieces: list[str] = []
    current = ""
    for part in (p for p in _SEAMS.split(word) if p):
        if len(current) + len(part) <= width:
            current += part
            continue
        if current:
            pieces.append(current)
        current = shorten(part, width, middle=True)
    if current:
        pieces.append(current)
    return pieces


def wrap(text: str, width: int, indent: str = "") -> list[str]:
    """``text`` in lines of at most ``width`` characters (0: one line), each starting with
    ``indent``, broken at spaces; see the module docstring for words longer than a line.
    """
    words = text.split()
    if width <= 0:
        return [indent + " ".join(words)]
    room = max(MIN_LINE, width - len(indent))
    lines: list[str] = []
    current = ""
    for word in words:
        if current and len(current) + 1 + len(word) <= room:
            current += " " + word
            continue
        if current:
            lines.append(current)
        *whole, current = _pieces(word, room)
        lines += whole
    if current or not lines:
        lines.append(current)
    return [indent + line for line in lines]
