"""Hostile label values, and Prometheus text that carries them: what the advisor's loaders
and formatters are tested against.
"""

from __future__ import annotations

import re

#: a node label that is an address with a path and a query, not a host name
HOSTILE_NODE = "127.0.0.1:19999/stolen?"
#: workload names that a spreadsheet, a Markdown renderer or a browser would interpret
SPREADSHEET = '=HYPERLINK("http://x","y")'
SCRIPT = "<script>alert(1)</script>"
LINK = "[x](javascript:alert(1))"
#: a workload name that would clear a terminal and ring its bell
TERMINAL = "evil\x1b[2J\x07"
#: a workload name that passes the workload rule (no C0 control) but holds a C1 CSI and a
#: right-to-left override
C1_AND_BIDI = "evil\x9b2J\u202e"

_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{)?")


def quoted(value: str) -> str:
    """``value`` as a label value in the Prometheus text format (quotes included)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def with_labels(text: str, **labels: str) -> str:
    """Prometheus ``text`` with ``labels`` added to every sample (comment lines dropped, so
    that the result can follow another scrape's text).
    """
    added = ",".join(f"{name}={quoted(value)}" for name, value in labels.items())
    out = []
    for line in text.splitlines():
        match = _SAMPLE_RE.match(line)
        if line.startswith("#") or match is None:
            continue
        name = match.group(1)
        rest = line[match.end() :]
        out.append(f"{name}{{{added},{rest}" if match.group(2) else f"{name}{{{added}}}{rest}")
    return "\n".join(out) + "\n"


def renamed_workloads(text: str, names: dict[str, str]) -> str:
    """Prometheus ``text`` with the ``workload`` label values in ``names`` replaced."""
    for old, new in names.items():
        text = text.replace(f"workload={quoted(old)}", f"workload={quoted(new)}")
    return text
