"""Neutralising text taken from metrics before a formatter prints it.

Workload and node names, summaries and notes come from labels that anyone who can run an
exporter or write a scrape configuration chooses, so every format treats them as hostile:

- :func:`visible` shows control characters as escapes (``\\x1b``, ``\\u202e``) instead of
  writing them: C0 and C1 controls and DEL (an ESC or BEL written to a terminal is a command
  to it), and the Unicode line separators and bidirectional overrides that make text read
  differently from what it is. Every text format applies it to what it prints;
- :func:`csv_cell` keeps a spreadsheet from reading a cell as a formula (OWASP "CSV
  Injection"): a text cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
  return gets a leading ``'``. Only text cells: numbers a formatter writes itself (a gain,
  a confidence, GPU indexes) are left as they are, so that ``-0.05`` stays a number;
- :func:`markdown_text` escapes what Markdown or the HTML inside it would interpret
  (``& < >`` as entities, ``\\ ` * _ [ ] | ~`` with a backslash), so a name can open
  no tag, link, image, emphasis, code span or table cell. The Markdown report writes no
  links of its own;
- :func:`html_text` is :func:`html.escape` (quotes included) of the visible text.

JSON is safe by construction (``json.dumps`` escapes every control character) and YAML is
written with non-ASCII characters escaped for the same reason.
"""

from __future__ import annotations

import html
import re

#: C0 controls, DEL and C1 controls
_CONTROL = r"\x00-\x1f\x7f-\x9f"
#: line and paragraph separators, bidirectional marks, embeddings, overrides and isolates
_FORMATTING = r"\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069"
_HIDDEN_RE = re.compile(f"[{_CONTROL}{_FORMATTING}]")
#: what makes a spreadsheet read a cell as a formula (OWASP)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_MARKDOWN_RE = re.compile(r"[\\`*_\[\]|~]")
_MARKDOWN_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control and bidirectional formatting character written as an
    escape (``\\x1b``, ``\\x07``, ``\\u202e``): what it says, never what it would do.
    """
    return _HIDDEN_RE.sub(_escape, text)


def csv_cell(text: str) -> str:
    """A CSV text cell: :func:`visible`, with a ``'`` before a leading formula character."""
    shown = visible(text)
    return "'" + shown if text.startswith(FORMULA_START) else shown


def markdown_text(text: str) -> str:
    """``text`` as literal Markdown text (see the module docstring); newlines become
    spaces first, so that text stays within its table cell or list item.
    """
    shown = visible(text.replace("\r\n", " ").replace("\n", " ").replace("\r", " "))
    shown = "".join(_MARKDOWN_ENTITIES.get(c, c) for c in shown)
    return _MARKDOWN_RE.sub(lambda m: "\\" + m.group(0), shown)


def html_text(text: str) -> str:
    """``text`` for HTML: :func:`visible`, then :func:`html.escape`."""
    return html.escape(visible(text))
