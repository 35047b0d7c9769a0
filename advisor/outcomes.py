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

The rule's kinds and thresholds are in :mod:`toposcope.advisor.verification_rule`, the figures
measured in :mod:`toposcope.advisor.verification_figures`, the verdicts in
:mod:`toposcope.advisor.verdicts` and the SQLite tables in :mod:`toposcope.advisor.outcome_log`;
this module names them all, as the service and its callers import them.
"""

from __future__ import annotations

from toposcope.advisor.outcome_log import ADDED_COLUMNS, NO_NUMA, SCHEMA, OutcomeLog
from toposcope.advisor.verdicts import (
    PROGRESS_SIGNALS,
    Judgement,
    judge,
    judge_locality,
    judge_move,
    judge_placement,
    judge_release,
    move_change,
)
from toposcope.advisor.verification_figures import (
    baseline,
    measure,
    measure_release,
    parts_of,
)
from toposcope.advisor.verification_rule import (
    JOB_KINDS,
    MIN_GPU_UTILIZATION,
    NUMA_KINDS,
    REVERSIBLE_KINDS,
    VERIFIED_KINDS,
    VerificationRule,
    destination,
    made_for,
    start_gain,
    target_numa,
)

__all__ = [
    "ADDED_COLUMNS",
    "JOB_KINDS",
    "MIN_GPU_UTILIZATION",
    "NO_NUMA",
    "NUMA_KINDS",
    "PROGRESS_SIGNALS",
    "REVERSIBLE_KINDS",
    "SCHEMA",
    "VERIFIED_KINDS",
    "Judgement",
    "OutcomeLog",
    "VerificationRule",
    "baseline",
    "destination",
    "judge",
    "judge_locality",
    "judge_move",
    "judge_placement",
    "judge_release",
    "made_for",
    "measure",
    "measure_release",
    "move_change",
    "parts_of",
    "start_gain",
    "target_numa",
]
