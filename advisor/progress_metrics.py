"""User-supplied progress metrics: which PromQL tells how fast a job class advances.

toposcope sees no job's progress; GPU activity and link traffic are proxies. Where a job
publishes its own (a training step counter, samples per second), ``--progress-metric
'NAME_REGEX=PROMQL'`` tells the advisor service to judge a moved or placed job by it: the
first setting whose regular expression matches the whole workload name applies, and its
PromQL, with every ``{workload}`` replaced by the workload's name, is asked for an instant
value (a rate: higher is faster). The name comes from an exporter, so it is never pasted in
as PromQL: each ``{workload}`` must be the value of a label matcher (``job={workload}``,
``job=~{workload}``) and becomes a quoted PromQL string, regex-escaped after ``=~``/``!~``
(:mod:`toposcope.promql.literals`). Settings are checked strictly when the service starts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from toposcope.errors import ConfigError
from toposcope.promql.literals import regex_literal, string_literal

#: the placeholder a template names the workload with
PLACEHOLDER = "{workload}"
#: the longest template accepted (PromQL a person writes for one job class)
MAX_TEMPLATE = 2000
#: ``{workload}`` with the matcher operator before it (operator, then the placeholder)
_MATCHER = re.compile(r"(=~|!~|!=|=)\s*\{workload\}")
_PAIRS = {")": "(", "]": "[", "}": "{"}


@dataclass(frozen=True)
class ProgressMetric:
    """One ``--progress-metric`` setting: workloads whose name matches ``pattern`` (whole
    name) are judged by the PromQL ``template``.
    """

    pattern: re.Pattern[str]
    template: str

    def matches(self, workload: str) -> bool:
        """Whether this setting applies to ``workload``."""
        return self.pattern.fullmatch(workload) is not None

    def promql(self, workload: str) -> str:
        """The template with ``workload`` written in as a quoted label-matcher value."""

        def literal(match: re.Match[str]) -> str:
            operator = match.group(1)
            quoted = regex_literal(workload) if "~" in operator else string_literal(workload)
            return f"{operator}{quoted}"

        return _MATCHER.sub(literal, self.template)


def _check_template(template: str) -> None:
    """:class:`ConfigError` unless ``template`` is one PromQL expression whose every
    ``{workload}`` is a label-matcher value (brackets balanced, strings closed).
    """
    if not template.strip():
        raise ConfigError("the PromQL after '=' is empty")
    if len(template) > MAX_TEMPLATE:
        raise ConfigError(f"the PromQL is longer than {MAX_TEMPLATE} characters")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in template):
        raise ConfigError("the PromQL holds a control character")
    if PLACEHOLDER not in template:
        raise ConfigError(f"the PromQL names no {PLACEHOLDER} (as a label value: job={{workload}})")
    bare = _MATCHER.sub(lambda m: f'{m.group(1)}""', template)
    if PLACEHOLDER in bare:
        raise ConfigError(
            f"{PLACEHOLDER} must be a label-matcher value (after =, !=, =~ or !~), "
            "never PromQL of its own"
        )
    stack: list[str] = []
    quote = ""
    escaped = False
    for char in bare:
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'`":
            quote = char
        elif char in "([{":
            stack.append(char)
        elif char in _PAIRS and (not stack or stack.pop() != _PAIRS[char]):
            raise ConfigError(f"the PromQL has an unmatched {char!r}")
    if quote:
        raise ConfigError("the PromQL has an unterminated string")
    if stack:
        raise ConfigError(f"the PromQL has an unclosed {stack[-1]!r}")


def parse_progress_metric(text: str) -> ProgressMetric:
    """``NAME_REGEX=PROMQL`` as a :class:`ProgressMetric` (:class:`ConfigError` saying what is
    wrong, naming the setting).
    """
    name, sep, template = text.partition("=")
    shown = f"--progress-metric {text[:200]!r}"
    if not sep or not name.strip():
        raise ConfigError(f"{shown}: expected NAME_REGEX=PROMQL")
    try:
        pattern = re.compile(name.strip())
    except re.error as exc:
        raise ConfigError(f"{shown}: NAME_REGEX is not a regular expression: {exc}") from None
    try:
        _check_template(template.strip())
    except ConfigError as exc:
        raise ConfigError(f"{shown}: {exc}") from None
    return ProgressMetric(pattern, template.strip())


def progress_metric_for(settings: Sequence[ProgressMetric], workload: str) -> ProgressMetric | None:
    """The first setting that applies to ``workload``, or ``None``."""
    return next((s for s in settings if s.matches(workload)), None)
