"""Configured job deadlines (``--job-deadlines FILE``): when a job ends where no scheduler says so.

Slurm publishes each job's time left (``toposcope_queue_job_time_left_seconds``); a job under
Kubernetes, or started by hand, has no such series, yet its owner often knows when it ends
(a training run booked until the morning, an evaluation due at noon). The file names them::

    deadlines:
      - workload: "llm-pretrain*"        # a glob over workload names
        ends_at: 2026-11-28T18:00:00Z     # RFC 3339, with a zone
      - workload: eval-42.service
        node: "dgx-0*"                    # optional glob over node names (default: any)
        ends_at: "2026-11-28T12:00:00+01:00"

Each workload takes the first entry that matches it; its time left is then the sooner of the
deadline (counted from the analysis's end time) and what a scheduler publishes, so the rules
that leave an ending job alone (``min_time_left_seconds`` of job-migration, fabric-placement's
restart arithmetic) read it as they read Slurm's. A deadline already past reads as 0 s left.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.boundedread import read_bounded
from toposcope.errors import ConfigError
from toposcope.yamlnodes import STR, YamlNodes, compose_config, refuse_in

if TYPE_CHECKING:
    import yaml

#: the largest deadline file read, and the most entries it may hold
MAX_BYTES = 1024 * 1024
MAX_ENTRIES = 10_000
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_ENTRY = ("workload", "node", "ends_at")


@dataclass(frozen=True)
class JobDeadline:
    """One entry: the workloads (and nodes) it covers, as globs, and when they end (epoch s)."""

    workload: str
    ends_at: float
    node: str = "*"

    def covers(self, workload: WorkloadModel) -> bool:
        """Whether ``workload`` is one this entry names."""
        return fnmatch.fnmatchcase(workload.name, self.workload) and fnmatch.fnmatchcase(
            workload.node, self.node
        )


def add_deadline_arguments(parser: argparse.ArgumentParser) -> None:
    """``--job-deadlines FILE``: when jobs end where no scheduler publishes it."""
    parser.add_argument(
        "--job-deadlines",
        metavar="FILE",
        help="YAML file of job deadlines ('deadlines:' entries with a workload glob, an "
        "optional node glob and ends_at in RFC 3339); a job is not moved when it ends sooner "
        "than min_time_left_seconds (docs/policies.md)",
    )


def load_deadlines(path: str | None) -> tuple[JobDeadline, ...]:
    """The entries of the deadline file at ``path`` (none without one); a file that cannot be
    read or does not follow the format is a :class:`ConfigError` naming its line and field.
    """
    if not path:
        return ()
    raw = read_bounded(path, MAX_BYTES, f"--job-deadlines {path}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"--job-deadlines {path}: not UTF-8 text") from None
    return parse_deadlines(text, path)


def checked_deadlines_file(path: str | None) -> str:
    """``path`` once its file reads as deadlines (for a service, which reads it again at each
    analysis: a wrong file at start is a usage error, a later bad edit fails that analysis).
    """
    load_deadlines(path)
    return path or ""


def parse_deadlines(text: str, source: str) -> tuple[JobDeadline, ...]:
    """The entries of a deadline file's ``text``; ``source`` names it in errors."""
    root = compose_config(text, source)
    reader = YamlNodes(refuse_in(source), null_mapping_is_empty=True)
    if root is None:
        return ()
    top = reader.mapping(root, "(top level)", ("deadlines",))
    items = reader.sequence(top["deadlines"], "deadlines") if "deadlines" in top else []
    if len(items) > MAX_ENTRIES:
        raise reader.error(top["deadlines"], "deadlines", f"more than {MAX_ENTRIES} entries")
    entries = []
    for index, item in enumerate(items):
        field = f"deadlines[{index}]"
        entry = reader.mapping(item, field, _ENTRY)
        for key in ("workload", "ends_at"):
            if key not in entry:
                raise reader.error(item, f"{field}.{key}", "missing")
        workload = reader.text(entry["workload"], f"{field}.workload")
        node = reader.text(entry["node"], f"{field}.node") if "node" in entry else "*"
        for key, glob in (("workload", workload), ("node", node)):
            if not glob or len(glob) > 253 or not glob.isprintable():
                raise reader.error(entry[key], f"{field}.{key}", "must be 1-253 printable chars")
        entries.append(JobDeadline(workload, _timestamp(reader, entry["ends_at"], field), node))
    return tuple(entries)


def _timestamp(reader: YamlNodes, node: yaml.Node, field: str) -> float:
    import yaml  # noqa: PLC0415 (PyYAML only when such a file is read)

    where = f"{field}.ends_at"
    if not isinstance(node, yaml.ScalarNode) or node.tag not in (STR, _TIMESTAMP):
        raise reader.error(node, where, "must be an RFC 3339 time with a zone")
    try:
        when = datetime.datetime.fromisoformat(str(node.value).replace(" ", "T", 1))
    except ValueError:
        raise reader.error(node, where, "must be an RFC 3339 time with a zone") from None
    if when.tzinfo is None:
        raise reader.error(node, where, "has no zone (add Z or +HH:MM)")
    return when.timestamp()


def with_deadlines(
    model: ClusterModel, deadlines: Sequence[JobDeadline], now: float
) -> ClusterModel:
    """``model`` with each covered workload's time left the sooner of its first matching
    deadline (from ``now``, never below 0) and what its scheduler publishes.
    """
    if not deadlines:
        return model
    return replace(model, workloads=tuple(_ending(w, deadlines, now) for w in model.workloads))


def _ending(workload: WorkloadModel, deadlines: Sequence[JobDeadline], now: float) -> WorkloadModel:
    entry = next((d for d in deadlines if d.covers(workload)), None)
    if entry is None:
        return workload
    left = max(0.0, entry.ends_at - now)
    if workload.time_left_seconds is not None:
        left = min(left, workload.time_left_seconds)
    return replace(workload, time_left_seconds=left)
