"""idle-release: give back GPUs that a workload holds but has not used for the window.

Rule (:mod:`toposcope.advisor.idleness`, the one definition of idle by which the moving
and pinning policies also leave a workload alone). A workload whose every GPU stayed below
``max_utilization`` for the whole window (the peak, ``max_over_time``, not the mean: one
busy minute means it is not idle) is asked to release them. The data must cover the window:
at least ``min_samples`` samples per GPU and, when the range query answered, samples
spanning at least ``min_coverage`` of the window; less than that is "cannot decide", never
"idle". Workloads with some busy GPUs keep all of them (jobs rarely survive losing part of
their GPUs). GPU utilization alone cannot tell a forgotten workload from a working one whose
GPUs wait: a multi-GPU job stalled on slow links (or on its input pipeline) can keep every
GPU under 5 % while its process keeps cores busy feeding them. So a workload that kept more
than ``max_cpu_cores`` busy over the window is working, never idle; a forgotten notebook
keeps a few hundredths of a core. Choose the window with ``--window``: an hour catches
forgotten notebooks; a data-loading phase can look idle for minutes.

Gain model. Not a speed-up: the gain is the share of the node's GPUs returned to the pool,
``released / GPUs on the node``, so that freeing 2 of 8 GPUs ranks like a 25 % gain.
"""

from __future__ import annotations

from dataclasses import dataclass

from toposcope.advisor.idleness import (
    MAX_CPU_CORES,
    MAX_UTILIZATION,
    MIN_COVERAGE,
    MIN_SAMPLES,
    IdleRule,
    Verdict,
)
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.policies.base import Evaluation, Policy, PolicySettings, setting
from toposcope.advisor.recommendations import make_recommendation
from toposcope.catalogue import spec
from toposcope.report.recommendation import (
    Note,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
)
from toposcope.rm import ActionKind, ActionRequest


@dataclass(frozen=True)
class IdleReleaseSettings(PolicySettings):
    """Settings of the idle-release policy."""

    max_utilization: float = setting(
        MAX_UTILIZATION, ge=0, lt=1, help="a GPU whose peak utilization stays below this is idle"
    )
    min_samples: int = setting(MIN_SAMPLES, ge=1, help="fewer utilization samples: cannot decide")
    min_coverage: float = setting(
        MIN_COVERAGE, ge=0, le=1, help="share of the window the samples must span (when known)"
    )
    max_cpu_cores: float = setting(
        MAX_CPU_CORES,
        ge=0,
        help="a workload keeping more cores busy than this is working, not idle",
    )


class IdleRelease(Policy[IdleReleaseSettings]):
    """Release GPUs held by workloads that left them idle for the whole window."""

    name = "idle-release"
    description = "release GPUs a workload holds but left idle for the whole window"
    settings_type = IdleReleaseSettings
    requires = (spec("toposcope_workload_gpu_info"), spec("toposcope_gpu_utilization_ratio"))

    def rule(self) -> IdleRule:
        """The idleness rule with this policy's thresholds."""
        s = self.settings
        return IdleRule(s.max_utilization, s.min_samples, s.min_coverage, s.max_cpu_cores)

    def evaluate(self, model: ClusterModel) -> Evaluation:
        """One ``release-idle`` recommendation per workload whose GPUs all stayed idle."""
        s = self.settings
        holders = [w for w in model.workloads if w.gpus]
        if not holders:
            return Evaluation()
        if not model.has("toposcope_gpu_utilization_ratio"):
            return Evaluation(
                undecided=(self.note("*", "no series for toposcope_gpu_utilization_ratio"),)
            )
        recs: list[Recommendation] = []
        notes: list[Note] = []
        rule = self.rule()
        for workload in holders:
            node = model.node(workload.node)
            if node is None:
                continue
            found = rule.judge(model, workload)
            if found.verdict == Verdict.WORKING:
                notes.append(
                    self.note(
                        workload.key,
                        f"GPUs below {s.max_utilization:g} but {found.cores or 0.0:.2f} cores "
                        f"busy (> {s.max_cpu_cores:g}): working (waiting on links or input), "
                        "not idle",
                    )
                )
                continue
            if found.verdict == Verdict.BUSY:
                continue
            if not found.idle:
                notes.append(
                    self.note(workload.key, "cannot tell if idle: " + "; ".join(found.problems))
                )
                continue
            evidence = found.evidence
            total = len(node.gpus) or len(workload.gpus)
            gain = len(workload.gpus) / total
            peak = found.peak or 0.0
            recs.append(
                make_recommendation(
                    kind=RecommendationKind.RELEASE_IDLE,
                    policy=self.name,
                    target=Target(workload.node, workload.name, tuple(workload.gpus)),
                    summary=(
                        f"release GPUs {list(workload.gpus)} of {workload.name} on "
                        f"{workload.node}: peak utilization {peak:.1%} over {model.window}"
                    ),
                    current={"gpus": list(workload.gpus), "peak_utilization": round(peak, 4)},
                    proposed={"gpus": [], "released": list(workload.gpus)},
                    evidence=evidence,
                    estimated_gain=gain,
                    gain_model=(
                        f"share of the node's GPUs returned: {len(workload.gpus)}/{total} "
                        f"(idle: peak < {s.max_utilization:g} for {model.window})"
                    ),
                    confidence=0.8,
                    risk=Risk.MEDIUM,
                    actions=[
                        ActionRequest(
                            "",
                            ActionKind.RELEASE,
                            workload.name,
                            workload.node,
                            gpus=list(workload.gpus),
                        )
                    ],
                    claims=[
                        *(f"gpu:{workload.node}/{g}" for g in workload.gpus),
                        f"workload:{workload.key}",
                    ],
                )
            )
        return Evaluation(tuple(recs), tuple(notes))
