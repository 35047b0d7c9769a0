"""Which workloads a report is about: namespaces, a label selector and name globs.

``toposcope advise --namespace``/``--exclude-namespace``/``--workload-selector``/
``--workload`` narrow the report, as krr's options narrow its scan. The policies still see
the whole cluster (a pin must not land on CPUs another workload uses); the filter keeps the
recommendations whose target workload passes and says in a note how many it left out.

A workload's labels are what the metrics carry for it: ``workload``, ``node`` and, where
present, ``namespace``, ``pod``, ``container`` and ``comm``. A recommendation without a
workload (a node's settings) is kept unless a filter asks for particular workloads
(``--namespace``, ``--workload-selector`` or ``--workload``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase

from toposcope.advisor.label_selector import LabelSelector
from toposcope.advisor.model import ClusterModel
from toposcope.report.recommendation import Note, Recommendation, Report

#: the workload fields offered to the selector as labels, when not empty
LABEL_FIELDS = ("namespace", "pod", "container", "comm")


@dataclass(frozen=True)
class WorkloadFilter:
    """The filters of one run; the default keeps everything."""

    namespaces: frozenset[str] = frozenset()
    exclude_namespaces: frozenset[str] = frozenset()
    selector: LabelSelector = field(default_factory=LabelSelector)
    names: tuple[str, ...] = ()

    def narrows(self) -> bool:
        """Whether the filter asks for particular workloads (not only leaves some out)."""
        return bool(self.namespaces or self.selector.requirements or self.names)

    def admits(self, labels: Mapping[str, str]) -> bool:
        """Whether a workload with ``labels`` passes every filter."""
        namespace = labels.get("namespace", "")
        if self.namespaces and namespace not in self.namespaces:
            return False
        if namespace and namespace in self.exclude_namespaces:
            return False
        if self.names and not any(
            fnmatchcase(labels.get(key, ""), glob)
            for glob in self.names
            for key in ("workload", "pod")
        ):
            return False
        return self.selector.matches(labels)


def workload_labels(model: ClusterModel) -> dict[str, dict[str, str]]:
    """Each workload's labels by ``node/workload``."""
    result: dict[str, dict[str, str]] = {}
    for w in model.workloads:
        labels = {"workload": w.name, "node": w.node}
        labels.update({f: getattr(w, f) for f in LABEL_FIELDS if getattr(w, f)})
        result[w.key] = labels
    return result


def _kept(
    rec: Recommendation, chosen: WorkloadFilter, labels: Mapping[str, Mapping[str, str]]
) -> bool:
    if rec.target.workload is None:
        return not chosen.narrows()
    key = f"{rec.target.node}/{rec.target.workload}"
    known = labels.get(key, {"workload": rec.target.workload, "node": rec.target.node})
    return chosen.admits(known)


def filter_report(report: Report, model: ClusterModel, chosen: WorkloadFilter) -> Report:
    """``report`` with only the recommendations ``chosen`` admits, and a note of the rest."""
    if chosen == WorkloadFilter():
        return report
    labels = workload_labels(model)
    kept = tuple(r for r in report.recommendations if _kept(r, chosen, labels))
    left = len(report.recommendations) - len(kept)
    notes: Sequence[Note] = report.notes
    if left:
        reason = f"{left} recommendation(s) left out by the workload filters"
        notes = (*report.notes, Note("filter", "*", reason))
    return replace(report, recommendations=kept, notes=tuple(notes))
