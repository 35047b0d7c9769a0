"""What became of the advisor service's recommendations: when each was first seen and, for
the ones it applied, whether the change helped.

Both are kept in the audit log's SQLite file, beside its ``actions`` table, so that a
restarted service carries on: ages keep counting from the first sighting, and applied
changes still waiting for a verdict are still checked.

Verification rule (also in docs/policies.md, "Verifying applied recommendations"). Every
kind but ``config`` is verified. At apply time the service records a *baseline*:

* for a ``pin`` or ``migrate-memory``, the remote share the recommendation was made from
  (its ``current`` shares on the target NUMA node: ``1 - c*m`` for a pin, ``1 - m`` for a
  memory migration);
* the CPU cores the workload kept busy and the mean utilization of its GPUs, from the
  analysis the recommendation came from (throughput proxies: a CPU-starved or input-starved
  job uses fewer cores or less GPU);
* for a ``migrate-job``, also its progress signals: the mean share of SMs busy and the PCIe
  and NVLink bytes per second of its GPUs (the model's per-workload figures, else its GPUs')
  and, where a ``--progress-metric`` applies, the job's own progress rate
  (:mod:`toposcope.advisor.progress_probe`);
* for every kind but a placement and a release, the job's progress rate where a
  ``--progress-metric`` applies (a pin's verdict does not rest on it, but calibration
  measures every kind's gain by it: :mod:`toposcope.advisor.calibration`);
* nothing for a ``place`` (the job was pending) or a ``release-idle``.

A moved or placed job is measured through its parts (:func:`parts_of`): a multi-node job,
which a gang move targets by its name, by the workloads that hold its GPUs on each node,
found by the job wherever each runs at the time, their figures combined as one job's
(:func:`measure`); a single-node job is the one-part case, and so is the workload a pin or
memory migration changed on its node (one part of a multi-node job alone). A recommendation made for
another job (``proposed.for``: a clearing that moves other jobs out of that job's way) is
judged on the jobs it moved and on whether that job took the GPUs it freed
(:mod:`toposcope.advisor.clearing_verification`). A recommendation that changes several
jobs (an exchange, a joint move, a defragmentation) is judged on each job it changes, their
gains combined as its estimate combines them (:mod:`toposcope.advisor.joint_verification`).

From ``verify_after`` seconds after applying (default: the analysis window, so that the
window holds only samples taken after the change), every analysis measures the same figures
(a moved or placed job where it went) and decides, with ``h`` the harm threshold (0.10) and
``e`` the paid share (0.5):

* ``pin``, ``migrate-memory``: **harmful** when the cores used fell below ``(1 - h)`` of the
  baseline (baseline at least ``min_cores``), or the GPU utilization fell below ``(1 - h)``
  of it (baseline at least 0.05), or the remote share rose by more than ``h``; **paid**
  when the remote share fell to ``(1 - e)`` of the baseline or less; **neutral**
  otherwise (the change stays; the policy's model was too optimistic). Where the job's
  progress metric was read before and after, its change is the measured gain (said in the
  detail; :func:`judge_locality`), which calibration learns from.
* ``migrate-job``: the progress signal is the job's progress metric when one applies, else
  the SM-active share, else the GPU utilization; its relative change is the *measured gain*.
  **harmful** when it fell by more than ``h`` (only then is the move undone: undoing it is
  another checkpoint and restart); **paid** when the gain is positive and at least ``e``
  of the estimated gain; **neutral** otherwise. Link traffic that fell by more than ``h``
  is said in the detail but is no harm on its own: it also falls while a restarted job warms
  up, and when a job's traffic moves off the links a counter sees.
* ``place``: **paid** once the job runs where it was placed and advances (progress
  above zero, or SMs or GPU busy at least 5%); **neutral** when it runs idle.
* ``release-idle``: **paid** when the released GPUs are free of the workload and
  another workload holds one of them; **neutral** when they are free but nobody took one
  within ``reuse_window`` seconds after ``verify_after``; never harmful (a release cannot
  slow the job that was idle); pending while the workload still holds them.
* **pending** while the workload has no series yet; **undetermined** when it still has none
  (or a release is still unsettled) ``give_up`` seconds after applying (the workload ended,
  or is no longer exported);
* **reverted** when a person reverted the change before a verdict.

Verdicts stored under the names of earlier releases (``effective``, ``ineffective``,
``unverifiable``) are renamed in place when the log is opened
(:data:`~toposcope.report.advisor_api.LEGACY_VERDICTS`).

A harmful change is reverted by the service when its kind can be undone (pin, memory
migration, job move, placement) and its resource manager did not call it irreversible; the
others keep the verdict, with the reason they were not reverted.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from toposcope.advisor.calibration_cells import Cell, cell_of, gross_prior
from toposcope.advisor.fabric_jobs import workload_parts
from toposcope.advisor.locality import remote_share
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.progress_probe import ProgressProbe
from toposcope.advisor.sqlite import SqliteStore
from toposcope.errors import ConfigError
from toposcope.report.advisor_api import (
    LEGACY_VERDICTS,
    JobOutcome,
    Measurement,
    Verdict,
    Verification,
)
from toposcope.report.recommendation import Recommendation, RecommendationKind

SCHEMA = """
CREATE TABLE IF NOT EXISTS recommendation_seen (
    recommendation_id TEXT PRIMARY KEY,
    first_seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS verifications (
    recommendation_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    node TEXT NOT NULL,
    workload TEXT NOT NULL,
    target_numa INTEGER NOT NULL,
    applied_at REAL NOT NULL,
    baseline_json TEXT NOT NULL,
    verdict TEXT NOT NULL,
    measured_json TEXT,
    verified_at REAL,
    detail TEXT NOT NULL DEFAULT '',
    estimated_gain REAL
);
"""
#: columns added after the first release, with their type (added to older files on open)
ADDED_COLUMNS = {
    "estimated_gain": "REAL",
    "target_node": "TEXT NOT NULL DEFAULT ''",
    "gpus_json": "TEXT NOT NULL DEFAULT '[]'",
    "measured_gain": "REAL",
    "policy": "TEXT NOT NULL DEFAULT ''",
    "node_type": "TEXT NOT NULL DEFAULT ''",
    "link_tier": "TEXT NOT NULL DEFAULT ''",
    "prior_gain": "REAL",
    "jobs_json": "TEXT NOT NULL DEFAULT '[]'",
    "made_for": "TEXT NOT NULL DEFAULT ''",
}
#: ``target_numa`` of a kind that moves no memory (the column is NOT NULL)
NO_NUMA = -1

#: recommendation kinds whose effect the service measures after applying them
VERIFIED_KINDS = frozenset(k for k in RecommendationKind if k != RecommendationKind.CONFIG)
#: kinds judged by the workload's locality on a target NUMA node
NUMA_KINDS = frozenset({RecommendationKind.PIN, RecommendationKind.MIGRATE_MEMORY})
#: kinds that put a job on other GPUs, judged by its progress where it went
JOB_KINDS = frozenset({RecommendationKind.MIGRATE_JOB, RecommendationKind.PLACE})
#: kinds the service can undo when judged harmful (a release gave its GPUs back to the pool)
REVERSIBLE_KINDS = frozenset({*NUMA_KINDS, *JOB_KINDS})

#: GPU utilization below which a fall says nothing about a slow-down
MIN_GPU_UTILIZATION = 0.05


@dataclass(frozen=True)
class VerificationRule:
    """The thresholds of the verification rule (see the module docstring)."""

    verify_after_seconds: float
    harm_threshold: float = 0.10
    paid_share: float = 0.5
    min_cores: float = 0.05
    give_up_seconds: float = 86400.0
    reuse_window_seconds: float = 3600.0

    def __post_init__(self) -> None:
        problems = []
        if self.verify_after_seconds < 0:
            problems.append("verify-after must be >= 0")
        if not 0 < self.harm_threshold < 1:
            problems.append("harm threshold must be between 0 and 1")
        if not 0 < self.paid_share <= 1:
            problems.append("paid share must be in (0, 1]")
        if self.min_cores < 0:
            problems.append("min cores must be >= 0")
        if self.reuse_window_seconds < 0:
            problems.append("reuse window must be >= 0")
        if self.give_up_seconds < self.verify_after_seconds:
            problems.append("give-up time must not be shorter than verify-after")
        if problems:
            raise ConfigError("; ".join(problems))


def target_numa(rec: Recommendation) -> int | None:
    """The NUMA node a pin or memory migration moves the workload to (``proposed.mems``)."""
    mems = rec.proposed.get("mems")
    if isinstance(mems, list | tuple) and mems:
        return int(mems[0])
    numa = rec.proposed.get("numa_node")
    return int(numa) if numa is not None else None


def destination(rec: Recommendation) -> tuple[str, tuple[int, ...]]:
    """Where ``rec`` puts its workload (node and GPUs: a move's or placement's ``proposed``),
    or, for a release, the node and the GPUs it gives back.
    """
    if rec.kind in JOB_KINDS:
        node = rec.proposed.get("node") or rec.target.node
        gpus = rec.proposed.get("gpus", rec.target.gpus)
    elif rec.kind == RecommendationKind.RELEASE_IDLE:
        node, gpus = rec.target.node, rec.proposed.get("released") or rec.target.gpus
    else:
        node, gpus = rec.target.node, rec.target.gpus
    return str(node), tuple(int(g) for g in gpus) if isinstance(gpus, list | tuple) else ()


def start_gain(rec: Recommendation) -> float:
    """What ``rec``'s estimate counts for the pending jobs whose start its move makes
    possible (``proposed.starts``, each with its ``gain``): the moved job's own progress,
    which verifies the move, does not show it, so verdicts and calibration leave it out.
    """
    starts = rec.proposed.get("starts")
    if not isinstance(starts, list | tuple):
        return 0.0
    return sum(float(s.get("gain", 0.0) or 0.0) for s in starts if isinstance(s, Mapping))


def made_for(rec: Recommendation) -> str | None:
    """The job ``rec`` makes room for without moving it (its ``proposed.for``: a leaf or NIC
    clearing moving other jobs out of that job's way), or ``None``.
    """
    job = rec.proposed.get("for")
    return job if isinstance(job, str) and job else None


def _shares(data: Any) -> dict[int, float]:
    if not isinstance(data, Mapping):
        return {}
    return {int(k): float(v) for k, v in data.items()}


def _remote(
    kind: str, cpu: Mapping[int, float], memory: Mapping[int, float], numa: int
) -> float | None:
    if kind == RecommendationKind.MIGRATE_MEMORY:
        return 1.0 - memory.get(numa, 0.0) if memory else None
    if not cpu and not memory:
        return None
    return remote_share(cpu, memory, numa)


def parts_of(model: ClusterModel, kind: str, node: str, name: str) -> list[WorkloadModel]:
    """The workloads a verification of a ``kind`` change to workload ``name`` measures: for
    a job move or placement the whole job, every part wherever it runs now (a multi-node job
    moves whole); for another kind the workload on ``node`` it changed (a pin of one part of a
    multi-node job changes that part alone).
    """
    return workload_parts(model, node, name, whole_job=kind in JOB_KINDS)


def measure(
    model: ClusterModel,
    kind: str,
    parts: Sequence[WorkloadModel],
    numa: int | None,
    probe: ProgressProbe | None = None,
) -> Measurement:
    """The figures of a job made of the workloads ``parts`` in ``model`` (see
    :class:`Measurement`; one part for a single-node job, every part of a multi-node job:
    :func:`~toposcope.advisor.fabric_jobs.workload_parts`), with its progress metric read by
    ``probe`` (every kind: calibration compares gains by it); for a job move or placement also
    its GPUs' activity and traffic. The parts combine as one job: cores and link bytes
    summed, utilization and SM activity the mean over all their GPUs, the remote share the
    parts' mean, and the progress rate the mean of the parts' rates (a multi-node job's parts
    advance in step, so each part's counter measures the same rate with its own timer noise;
    the mean averages that noise out where the slowest part would pick its lowest draw).
    """
    utilizations: list[float] = []
    sm_active: list[float] = []
    links: list[float] = []
    remote: list[float] = []
    cores: list[float] = []
    for workload in parts:
        node = model.node(workload.node)
        for index in workload.gpus:
            gpu = node.gpu(index) if node is not None else None
            if gpu is not None and gpu.utilization is not None:
                utilizations.append(gpu.utilization)
            sm = workload.gpu_sm_active.get(index, gpu.sm_active if gpu is not None else None)
            if sm is not None:
                sm_active.append(sm)
            pcie = workload.gpu_pcie_bytes_per_second.get(
                index, gpu.pcie_bytes_per_second if gpu is not None else None
            )
            nvlink = workload.gpu_nvlink_bytes_per_second.get(
                index, gpu.nvlink_bytes_per_second if gpu is not None else None
            )
            if pcie is not None or nvlink is not None:
                links.append((pcie or 0.0) + (nvlink or 0.0))
        share = (
            _remote(kind, workload.cpu_shares(), workload.memory_shares(), numa)
            if numa is not None
            else None
        )
        if share is not None:
            remote.append(share)
        used = workload.cores_used()
        if used is not None:
            cores.append(used)
    figures = Measurement(
        remote_share=_mean(remote),
        cores=sum(cores) if cores else None,
        gpu_utilization=_mean(utilizations),
        progress=_progress(probe, parts),
    )
    if kind not in JOB_KINDS:
        return figures
    return replace(
        figures,
        sm_active=_mean(sm_active),
        link_bytes_per_second=sum(links) if links else None,
    )


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _progress(probe: ProgressProbe | None, parts: Sequence[WorkloadModel]) -> float | None:
    """The mean progress rate of the parts' names (a name on several nodes read once)."""
    if probe is None:
        return None
    rates = [probe.progress(name) for name in sorted({w.name for w in parts})]
    return _mean([r for r in rates if r is not None])


def measure_release(
    model: ClusterModel, node: str, workload: str, gpus: Sequence[int]
) -> Measurement | None:
    """How many of the released ``gpus`` of ``node`` are free of ``workload`` and how many
    another workload holds (``None``: the model has none of those GPUs).
    """
    state = model.node(node)
    known = [g for g in gpus if state is not None and state.gpu(g) is not None]
    if not known:
        return None
    holders = model.gpu_holders(node)
    free = sum(1 for g in known if workload not in holders.get(g, []))
    reused = sum(1 for g in known if any(h != workload for h in holders.get(g, [])))
    return Measurement(gpus_free=float(free), gpus_reused=float(reused))


def baseline(
    rec: Recommendation, model: ClusterModel | None, probe: ProgressProbe | None = None
) -> Measurement:
    """The figures before applying ``rec``: its own shares, and the model's cores and GPUs
    (a job move's progress signals too, read by ``probe``; nothing for a placement or a
    release).
    """
    if rec.kind in (RecommendationKind.PLACE, RecommendationKind.RELEASE_IDLE):
        return Measurement()
    numa = target_numa(rec) if rec.kind in NUMA_KINDS else None
    cpu = _shares(rec.current.get("cpu_share_by_numa"))
    memory = _shares(rec.current.get("memory_share_by_numa"))
    remote = _remote(str(rec.kind), cpu, memory, numa) if numa is not None else None
    parts = (
        parts_of(model, str(rec.kind), rec.target.node, rec.target.workload)
        if model is not None and rec.target.workload
        else []
    )
    if not parts or model is None or (numa is None and rec.kind in NUMA_KINDS):
        return Measurement(remote_share=remote)
    now = measure(model, str(rec.kind), parts, numa, probe)
    return replace(now, remote_share=remote)


def judge(rule: VerificationRule, before: Measurement, after: Measurement) -> tuple[Verdict, str]:
    """The verdict on a change from its baseline and a later measurement, with the reason."""
    h = rule.harm_threshold
    harms = []
    if (
        before.cores is not None
        and before.cores >= rule.min_cores
        and after.cores is not None
        and after.cores < before.cores * (1 - h)
    ):
        harms.append(f"CPU cores used fell from {before.cores:.2f} to {after.cores:.2f}")
    if (
        before.gpu_utilization is not None
        and before.gpu_utilization >= MIN_GPU_UTILIZATION
        and after.gpu_utilization is not None
        and after.gpu_utilization < before.gpu_utilization * (1 - h)
    ):
        harms.append(
            f"GPU utilization fell from {before.gpu_utilization:.0%} to {after.gpu_utilization:.0%}"
        )
    if (
        before.remote_share is not None
        and after.remote_share is not None
        and after.remote_share > before.remote_share + h
    ):
        harms.append(
            f"remote share rose from {before.remote_share:.0%} to {after.remote_share:.0%}"
        )
    if harms:
        return Verdict.HARMFUL, "; ".join(harms)
    if before.remote_share is None or after.remote_share is None:
        return Verdict.PENDING, "no locality figure to compare yet"
    change = f"remote share {before.remote_share:.0%} -> {after.remote_share:.0%}"
    if after.remote_share <= before.remote_share * (1 - rule.paid_share):
        return Verdict.PAID, change
    return Verdict.NEUTRAL, f"{change}: less than {rule.paid_share:.0%} of it removed"


#: a judgement: the verdict, why, and the measured gain it rests on (``None``: none)
Judgement = tuple[Verdict, str, float | None]


def judge_locality(rule: VerificationRule, before: Measurement, after: Measurement) -> Judgement:
    """:func:`judge` for a pin or memory migration, with the change of the job's progress
    metric as its measured gain where one was read before and after (said in the detail;
    the verdict still rests on locality and the proxies).
    """
    verdict, detail = judge(rule, before, after)
    if before.progress is None or after.progress is None or before.progress <= 0:
        return verdict, detail, None
    gain = after.progress / before.progress - 1.0
    shown = f"progress metric {_shown('progress metric', before.progress)} -> "
    shown += f"{_shown('progress metric', after.progress)} ({gain:+.0%})"
    return verdict, f"{detail}; {shown}", gain


#: the progress signals of a job, most trusted first: (field of Measurement, its name)
PROGRESS_SIGNALS = (
    ("progress", "progress metric"),
    ("sm_active", "SM active"),
    ("gpu_utilization", "GPU utilization"),
)


def _signal(before: Measurement, after: Measurement) -> tuple[str, float, float] | None:
    """The most trusted progress signal measured both times (before it above zero)."""
    for name, label in PROGRESS_SIGNALS:
        old, new = getattr(before, name), getattr(after, name)
        if old is not None and new is not None and old > 0:
            return label, old, new
    return None


def _shown(label: str, value: float) -> str:
    return f"{value:.3g}/s" if label == "progress metric" else f"{value:.0%}"


def move_change(
    rule: VerificationRule, before: Measurement, after: Measurement
) -> tuple[float, str] | None:
    """The change of a moved job's most trusted progress signal measured both times: its
    relative gain and, in words, the signal before and after (with link traffic that fell by
    more than the harm threshold); ``None`` when no signal was measured both times.
    """
    signal = _signal(before, after)
    if signal is None:
        return None
    label, old, new = signal
    gain = new / old - 1.0
    change = f"{label} {_shown(label, old)} -> {_shown(label, new)} ({gain:+.0%})"
    h = rule.harm_threshold
    links_old, links_new = before.link_bytes_per_second, after.link_bytes_per_second
    if links_old is not None and links_new is not None and links_new < links_old * (1 - h):
        change += f"; link traffic fell from {links_old:.3g} to {links_new:.3g} B/s"
    return gain, change


def judge_move(
    rule: VerificationRule, before: Measurement, after: Measurement, estimated: float | None
) -> Judgement:
    """The verdict on a job move from its progress before and after (module docstring)."""
    found = move_change(rule, before, after)
    if found is None:
        return Verdict.PENDING, "no progress signal measured before and after yet", None
    gain, change = found
    h = rule.harm_threshold
    if gain < -h:
        return Verdict.HARMFUL, change, gain
    wanted = rule.paid_share * max(estimated or 0.0, 0.0)
    if gain > 0 and gain >= wanted:
        return Verdict.PAID, change, gain
    return Verdict.NEUTRAL, f"{change}: less than {wanted:.0%} gained", gain


def judge_placement(after: Measurement) -> Judgement:
    """The verdict on a placement from the placed job's progress (module docstring)."""
    for name, label in PROGRESS_SIGNALS:
        value = getattr(after, name)
        if value is None:
            continue
        floor = 0.0 if name == "progress" else MIN_GPU_UTILIZATION
        shown = f"{label} {_shown(label, value)}"
        if value > floor:
            return Verdict.PAID, f"running where placed: {shown}", None
        return Verdict.NEUTRAL, f"running where placed but idle: {shown}", None
    return Verdict.PENDING, "no progress signal for the placed job yet", None


def judge_release(
    rule: VerificationRule, after: Measurement | None, waited: float, gpus: Sequence[int]
) -> Judgement:
    """The verdict on a release from who holds the released GPUs now (module docstring)."""
    if after is None or after.gpus_free is None:
        return Verdict.PENDING, f"no series for GPUs {list(gpus)} in this analysis", None
    if after.gpus_free < len(gpus):
        return Verdict.PENDING, f"GPUs {list(gpus)} are still held by the workload", None
    if after.gpus_reused:
        reused = int(after.gpus_reused)
        return Verdict.PAID, f"GPUs {list(gpus)} freed; {reused} reused by others", None
    if waited >= rule.verify_after_seconds + rule.reuse_window_seconds:
        return (
            Verdict.NEUTRAL,
            f"GPUs {list(gpus)} freed but not reused within {rule.reuse_window_seconds:g}s",
            None,
        )
    return Verdict.PENDING, f"GPUs {list(gpus)} freed; waiting for another workload", None


class OutcomeLog(SqliteStore):
    """The ``recommendation_seen`` and ``verifications`` tables in the SQLite file ``path``."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, SCHEMA, "the outcome tables in")
        with self._connect() as db:
            have = {row["name"] for row in db.execute("PRAGMA table_info(verifications)")}
            for column, kind in ADDED_COLUMNS.items():
                if column not in have:
                    db.execute(f"ALTER TABLE verifications ADD COLUMN {column} {kind}")
            _rename_legacy_verdicts(db)

    def first_seen(self, ids: Iterable[str], now: float) -> dict[str, float]:
        """Since when each of ``ids`` (the open recommendations) has been open.

        New ids are stored with ``now``; ids no longer open are forgotten, so a
        recommendation that goes away and comes back counts its age afresh.
        """
        wanted = sorted(set(ids))
        with self._connect() as db:
            marks = ",".join("?" for _ in wanted)
            db.execute(
                f"DELETE FROM recommendation_seen WHERE recommendation_id NOT IN ({marks})",
                wanted,
            )
            db.executemany(
                "INSERT OR IGNORE INTO recommendation_seen (recommendation_id, first_seen)"
                " VALUES (?, ?)",
                [(rec_id, now) for rec_id in wanted],
            )
            seen: dict[str, float] = {}
            for rec_id in wanted:
                row = db.execute(
                    "SELECT first_seen FROM recommendation_seen WHERE recommendation_id = ?",
                    (rec_id,),
                ).fetchone()
                seen[rec_id] = float(row["first_seen"])
        return seen

    def start(
        self,
        rec: Recommendation,
        before: Measurement,
        applied_at: float,
        model: ClusterModel | None = None,
        jobs: Sequence[JobOutcome] = (),
    ) -> None:
        """Record that ``rec`` was applied, with its baseline (a verification restarts), its
        calibration cell (node type and link tier from ``model``, the analysis it came from),
        its prior estimate (:mod:`toposcope.advisor.calibration_cells`), the job a clearing
        made room for (``proposed.for``) and, when it changes several jobs, each with its own
        baseline (:func:`~toposcope.advisor.joint_verification.job_baselines`; a clearing's:
        :func:`~toposcope.advisor.clearing_verification.clearing_jobs`).
        """
        numa = target_numa(rec) if rec.kind in NUMA_KINDS else None
        if (numa is None and rec.kind in NUMA_KINDS) or not rec.target.workload:
            raise ConfigError(f"{rec.id}: no target NUMA node or workload to verify")
        node, gpus = destination(rec)
        _, policy, kind_of_node, tier = cell_of(rec, model, node, gpus)
        verdict, detail, verified_at = Verdict.PENDING, "", None
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO verifications (recommendation_id, kind, node, workload,"
                " target_numa, applied_at, baseline_json, verdict, measured_json, verified_at,"
                " detail, estimated_gain, target_node, gpus_json, measured_gain, policy,"
                " node_type, link_tier, prior_gain, jobs_json, made_for)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?)",
                (
                    rec.id,
                    str(rec.kind),
                    rec.target.node,
                    rec.target.workload,
                    NO_NUMA if numa is None else numa,
                    applied_at,
                    json.dumps(before.to_dict(), sort_keys=True),
                    str(verdict),
                    verified_at,
                    detail,
                    rec.estimated_gain - start_gain(rec),
                    node,
                    json.dumps(list(gpus)),
                    policy,
                    kind_of_node,
                    tier,
                    gross_prior(rec) - start_gain(rec),
                    _jobs_json(jobs),
                    made_for(rec) or "",
                ),
            )

    def settle(
        self,
        rec_id: str,
        verdict: Verdict,
        measured: Measurement | None,
        detail: str,
        now: float,
        measured_gain: float | None = None,
        jobs: Sequence[JobOutcome] | None = None,
    ) -> None:
        """Write a verdict (``pending`` too: the latest measurement and why it is pending)
        with the gain it measured, if any, and each changed job's figures (``None``: kept).
        """
        with self._connect() as db:
            db.execute(
                "UPDATE verifications SET verdict = ?, measured_json = ?, verified_at = ?,"
                " detail = ?, measured_gain = ? WHERE recommendation_id = ?",
                (
                    str(verdict),
                    json.dumps(measured.to_dict(), sort_keys=True) if measured else None,
                    now,
                    detail,
                    measured_gain,
                    rec_id,
                ),
            )
            if jobs is not None:
                db.execute(
                    "UPDATE verifications SET jobs_json = ? WHERE recommendation_id = ?",
                    (_jobs_json(jobs), rec_id),
                )

    def get(self, rec_id: str) -> Verification | None:
        """The verification of ``rec_id`` or ``None``."""
        with self._connect() as db:
            row = db.execute(
                "SELECT * FROM verifications WHERE recommendation_id = ?", (rec_id,)
            ).fetchone()
        return _verification(row) if row is not None else None

    def all(self) -> list[Verification]:
        """Every verification, oldest application first."""
        with self._connect() as db:
            rows = db.execute("SELECT * FROM verifications ORDER BY applied_at").fetchall()
        return [_verification(r) for r in rows]

    def cells(self) -> dict[str, tuple[Cell, float | None]]:
        """Each verification's calibration cell and prior estimate (``None``: recorded
        before priors were kept), by recommendation id.
        """
        with self._connect() as db:
            rows = db.execute(
                "SELECT recommendation_id, kind, policy, node_type, link_tier, prior_gain"
                " FROM verifications"
            ).fetchall()
        return {
            str(r["recommendation_id"]): (
                (str(r["kind"]), str(r["policy"]), str(r["node_type"]), str(r["link_tier"])),
                float(r["prior_gain"]) if r["prior_gain"] is not None else None,
            )
            for r in rows
        }

    def pending(self) -> list[Verification]:
        """Verifications without a final verdict."""
        return [v for v in self.all() if v.verdict == Verdict.PENDING]


def _rename_legacy_verdicts(db: sqlite3.Connection) -> None:
    """Store the verdicts an earlier release wrote under their current names (written only
    where there is one, so that a log without any opens without a write).
    """
    old = sorted(LEGACY_VERDICTS)
    marks = ",".join("?" for _ in old)
    found = db.execute(f"SELECT 1 FROM verifications WHERE verdict IN ({marks}) LIMIT 1", old)
    if found.fetchone() is not None:
        db.executemany(
            "UPDATE verifications SET verdict = ? WHERE verdict = ?",
            [(str(LEGACY_VERDICTS[name]), name) for name in old],
        )


def _jobs_json(jobs: Sequence[JobOutcome]) -> str:
    return json.dumps([j.to_dict() for j in jobs], sort_keys=True)


def _verification(row: sqlite3.Row) -> Verification:
    measured = row["measured_json"]
    return Verification(
        recommendation_id=str(row["recommendation_id"]),
        kind=str(row["kind"]),
        node=str(row["node"]),
        workload=str(row["workload"]),
        target_numa=None if int(row["target_numa"]) == NO_NUMA else int(row["target_numa"]),
        applied_at=float(row["applied_at"]),
        baseline=Measurement.from_dict(json.loads(row["baseline_json"])) or Measurement(),
        verdict=Verdict(row["verdict"]),
        measured=Measurement.from_dict(json.loads(measured)) if measured else None,
        verified_at=float(row["verified_at"]) if row["verified_at"] is not None else None,
        detail=str(row["detail"] or ""),
        estimated_gain=(
            float(row["estimated_gain"]) if row["estimated_gain"] is not None else None
        ),
        target_node=str(row["target_node"] or row["node"]),
        gpus=tuple(int(g) for g in json.loads(row["gpus_json"] or "[]")),
        measured_gain=(float(row["measured_gain"]) if row["measured_gain"] is not None else None),
        jobs=tuple(JobOutcome.from_json(j) for j in json.loads(row["jobs_json"] or "[]")),
        made_for=str(row["made_for"] or ""),
    )
