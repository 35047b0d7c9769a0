"""The YAML formatter: the same document as the JSON format, for people and YAML tools.

Like the JSON, it escapes every character outside printable ASCII (``"\\e"``, ``"\\u202E"``)
instead of writing it, so that no text from metrics writes control characters to a terminal.
"""

from __future__ import annotations

import yaml

from toposcope.advisor.formatters.options import DEFAULT_OPTIONS, FormatOptions
from toposcope.report.recommendation import Report


def as_yaml(report: Report, options: FormatOptions = DEFAULT_OPTIONS) -> str:
    """The report's JSON document as block YAML (keys sorted; lists of numbers on one line),
    so that ``yaml.safe_load`` gives what ``json.loads`` gives for ``--format json``.
    """
    text: str = yaml.safe_dump(
        report.to_dict(), sort_keys=True, default_flow_style=None, allow_unicode=False, width=100
    )
    return text
