"""Screening loaded series for names that break the core's naming rules.

Label values are written by whoever runs an exporter or a scrape configuration, and the
labels that *name* something (a series' ``node``, an exporter's ``hostname``, the label
``--node-label`` forces, a ``workload``) become the nodes and workloads of the advisor's
model, then the targets and actions of its recommendations, which the service's API answers
with a model that checks them by the rules of :mod:`toposcope.identity.names`. So they are checked
here, by those same rules, before anything is built from them: a series with a bad name is
dropped, counted by reason (:data:`DROP_REASONS`, exported by the advisor service as
``toposcope_advisor_series_dropped_total``) and logged once per distinct reason and name in
one load (at most :data:`MAX_LOGGED` lines, then one line with how many more), and the rest
of the analysis goes on.

An ``instance`` is an address (``host:port``), not a name, and is not screened.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace

from toposcope.advisor.loaders.base import QueryResult
from toposcope.identity.names import InvalidNameError, check_node_name, check_workload_name
from toposcope.identity.node import AUTO

LOG = logging.getLogger("toposcope.advisor.loaders")

INVALID_NODE_NAME = "invalid_node_name"
INVALID_WORKLOAD_NAME = "invalid_workload_name"
#: every reason a series is dropped for (the service exports each, even at zero)
DROP_REASONS = (INVALID_NODE_NAME, INVALID_WORKLOAD_NAME)
#: distinct bad names logged per load; the others are summed up in one line
MAX_LOGGED = 10

_Check = tuple[str, Callable[[object], str]]
_NODE: _Check = (INVALID_NODE_NAME, check_node_name)
_WORKLOAD: _Check = (INVALID_WORKLOAD_NAME, check_workload_name)


class NameScreen:
    """The screen of one load: which labels name what, and what was dropped so far.

    ``node_label`` is the ``--node-label`` of the run (:data:`~toposcope.identity.node.AUTO`
    or a label that then names nodes too). :attr:`dropped` counts the dropped series by
    reason.
    """

    def __init__(self, node_label: str = AUTO) -> None:
        self.checks: dict[str, _Check] = {"node": _NODE, "hostname": _NODE, "workload": _WORKLOAD}
        if node_label != AUTO:
            self.checks[node_label] = _NODE
        self.dropped: Counter[str] = Counter()
        self._seen: set[tuple[str, str]] = set()

    def problem(self, labels: Mapping[str, str]) -> tuple[str, str] | None:
        """``(reason, message)`` when a name in ``labels`` breaks its rule, else ``None``."""
        for label, (reason, check) in self.checks.items():
            value = labels.get(label)
            if value is None:
                continue
            try:
                check(value)
            except InvalidNameError as exc:
                return reason, f"{label} label: {exc}"
        return None

    def keeps(self, labels: Mapping[str, str], metric: str) -> bool:
        """Whether a series with ``labels`` may go on; a dropped one is counted and logged."""
        found = self.problem(labels)
        if found is None:
            return True
        reason, message = found
        self.dropped[reason] += 1
        if (reason, message) not in self._seen:
            self._seen.add((reason, message))
            if len(self._seen) <= MAX_LOGGED:
                LOG.warning("dropped series of %s (%s): %s", metric, reason, message)
        return False

    def screened(self, result: QueryResult, metric: str) -> QueryResult:
        """``result`` without the samples and series whose names break their rules."""
        samples = tuple(s for s in result.samples if self.keeps(s.labels, metric))
        series = tuple(s for s in result.series if self.keeps(s.labels, metric))
        if len(samples) == len(result.samples) and len(series) == len(result.series):
            return result
        return replace(result, samples=samples, series=series)

    def notes(self) -> list[str]:
        """One line per reason for the report, and the summary of what was not logged."""
        hidden = len(self._seen) - MAX_LOGGED
        if hidden > 0:
            LOG.warning("dropped series with %d more distinct bad name(s) (not logged)", hidden)
        return [
            f"dropped {count} series whose name label breaks the naming rules ({reason}; "
            "see the log)"
            for reason, count in sorted(self.dropped.items())
        ]
