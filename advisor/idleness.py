"""When a workload holding GPUs is idle: the one rule idle-release releases by and the moving
and pinning policies leave alone by.

A workload is *idle* when every GPU it holds stayed below ``max_utilization`` for the whole
window (the peak, ``max_over_time``, not the mean: one busy minute means it is not idle),
the data covers the window (at least ``min_samples`` samples per GPU and, when the range
query answered, samples spanning at least ``min_coverage`` of it) and it kept no more than
``max_cpu_cores`` busy (a job stalled on slow links or on its input keeps its GPUs low but
its cores busy: it is *working*). Too little data is *undecided*, never idle.

idle-release releases an idle workload's GPUs. Moving or pinning one (job-migration,
defragmentation, numa-pinning, memory-migration) would cost a checkpoint-restore or a page
migration for a speed-up of work it does not do, so those policies skip it; they also skip a
workload whose GPUs read idle in every sample there is, when there are too few samples to
release it (:attr:`Idleness.quiet`): a move needs evidence of work, a release evidence of
none.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.report.recommendation import Evidence

#: defaults of the rule (idle-release's settings declare the same values)
MAX_UTILIZATION = 0.05
MIN_SAMPLES = 5
MIN_COVERAGE = 0.9
MAX_CPU_CORES = 0.5


class Verdict(StrEnum):
    """What the rule says about a workload's GPUs over the window."""

    IDLE = "idle"
    BUSY = "busy"
    WORKING = "working"
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class Idleness:
    """The rule's verdict on one workload, with the series it rests on.

    ``peak`` is the highest utilization peak among its GPUs with a series (``None``: none
    had one), ``cores`` the cores it kept busy (``None``: unknown), ``problems`` why the data
    cannot decide, and ``all_read`` whether every GPU it holds had a utilization series.
    """

    verdict: Verdict
    evidence: tuple[Evidence, ...] = ()
    problems: tuple[str, ...] = ()
    peak: float | None = None
    cores: float | None = None
    all_read: bool = False

    @property
    def idle(self) -> bool:
        """Idle by the rule: its GPUs may be released."""
        return self.verdict == Verdict.IDLE

    @property
    def quiet(self) -> bool:
        """Idle, or idle in every sample there is though too few to release it: nothing a
        move or a pin would speed up.
        """
        if self.verdict == Verdict.IDLE:
            return True
        return self.verdict == Verdict.UNDECIDED and self.all_read and self.peak is not None


@dataclass(frozen=True)
class IdleRule:
    """The thresholds of the rule (idle-release's settings; the defaults elsewhere)."""

    max_utilization: float = MAX_UTILIZATION
    min_samples: int = MIN_SAMPLES
    min_coverage: float = MIN_COVERAGE
    max_cpu_cores: float = MAX_CPU_CORES

    def judge(self, model: ClusterModel, workload: WorkloadModel) -> Idleness:
        """The verdict on ``workload``'s GPUs over ``model``'s window (undecided without GPUs
        or without its node).
        """
        node = model.node(workload.node)
        if node is None or not workload.gpus:
            return Idleness(Verdict.UNDECIDED, problems=("no GPUs known",))
        problems: list[str] = []
        evidence: list[Evidence] = []
        all_read = True
        for index in workload.gpus:
            gpu = node.gpu(index)
            if gpu is None or gpu.utilization_max is None:
                problems.append(f"GPU {index}: no utilization series")
                all_read = False
                continue
            evidence.append(
                Evidence(
                    "toposcope_gpu_utilization_ratio",
                    {"node": node.name, "gpu": str(index), "over_time": "max"},
                    gpu.utilization_max,
                )
            )
            if gpu.utilization_max >= self.max_utilization:
                return Idleness(Verdict.BUSY, tuple(evidence), peak=gpu.utilization_max)
            if gpu.samples is None or gpu.samples < self.min_samples:
                problems.append(
                    f"GPU {index}: {gpu.samples or 0} sample(s), need {self.min_samples}"
                )
            needed = self.min_coverage * model.window_seconds
            if gpu.covered_seconds is not None and gpu.covered_seconds < needed:
                problems.append(
                    f"GPU {index}: samples span {gpu.covered_seconds:.0f}s of the "
                    f"{model.window} window, need {needed:.0f}s"
                )
        peak = max((e.value for e in evidence), default=None)
        cores = workload.cores_used()
        if cores is not None and cores > self.max_cpu_cores:
            return Idleness(Verdict.WORKING, tuple(evidence), (), peak, cores, all_read)
        verdict = Verdict.UNDECIDED if problems else Verdict.IDLE
        return Idleness(verdict, tuple(evidence), tuple(problems), peak, cores, all_read)

    def why_left(self, model: ClusterModel, idleness: Idleness) -> str:
        """The note of a policy that leaves a quiet workload alone."""
        peak = idleness.peak or 0.0
        if idleness.idle:
            return (
                f"idle (GPU peak {peak:.1%} < {self.max_utilization:g} over {model.window}): "
                "idle-release's business, not moved or pinned"
            )
        return (
            f"GPUs idle in every sample (peak {peak:.1%} < {self.max_utilization:g}), too few "
            f"to release them ({'; '.join(idleness.problems)}): not moved or pinned"
        )
