"""idle-release: give back GPUs that a workload holds but has not used for the window.

Rule. A workload whose every GPU stayed below ``max_utilization`` for the whole window (the
peak, ``max_over_time``, not the mean: one busy minute means it is not idle) is asked to
release them. The data must cover the window: at least ``min_samples`` samples per GPU and,
when the range query answered, samples spanning at least ``min_coverage`` of the window; less
than that is "cannot decide", never "idle". Workloads with some busy GPUs keep all of them
(jobs rarely survive losing part of their GPUs). GPU utilization alone cannot tell a
forgotten workload from a working one whose GPUs wait: a multi-GPU job stalled on slow links
(or on its input pipeline) can keep every GPU under 5 % while its process keeps cores busy
feeding them. So a workload that kept more than ``max_cpu_cores`` busy over the window is
working, never idle; a forgotten notebook keeps a few hundredths of a core. Choose the
window with ``--window``: an hour catches forgotten notebooks; a data-loading phase can look
idle for minutes.

Gain model. Not a speed-up: the gain is the share of the node's GPUs returned to the pool,
``released / GPUs on the node``, so that freeing 2 of 8 GPUs ranks like a 25 % gain.
"""

from __future__ import annotations

from dataclasses import dataclass

from toposcope.advisor.model import ClusterModel
from toposcope.advisor.policies.base import Evaluation, Policy, PolicySettings, setting
from toposcope.advisor.recommendations import make_recommendation
from toposcope.catalogue import spec
from toposcope.report.recommendation import (
    Evidence,
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
        0.05, ge=0, lt=1, help="a GPU whose peak utilization stays below this is idle"
    )
    min_samples: int = setting(5, ge=1, help="fewer utilization samples: cannot decide")
    min_coverage: float = setting(
        0.9, ge=0, le=1, help="share of the window the samples must span (when known)"
    )
    max_cpu_cores: float = setting(
        0.5, ge=0, help="a workload keeping more cores busy than this is working, not idle"
    )


class IdleRelease(Policy[IdleReleaseSettings]):
    """Release GPUs held by workloads that left them idle for the whole window."""

    name = "idle-release"
    description = "release GPUs a workload holds but left idle for the whole window"
    settings_type = IdleReleaseSettings
    requires = (spec("toposcope_workload_gpu_info"), spec("toposcope_gpu_utilization_ratio"))

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
        for workload in holders:
            node = model.node(workload.node)
            if node is None:
                continue
            problems: list[str] = []
            evidence: list[Evidence] = []
            idle = True
            for index in workload.gpus:
                gpu = node.gpu(index)
                if gpu is None or gpu.utilization_max is None:
                    problems.append(f"GPU {index}: no utilization series")
                    continue
                evidence.append(
                    Evidence(
                        "toposcope_gpu_utilization_ratio",
                        {"node": node.name, "gpu": str(index), "over_time": "max"},
                        gpu.utilization_max,
                    )
                )
                if gpu.utilization_max >= s.max_utilization:
                    idle = False
                    break
                if gpu.samples is None or gpu.samples < s.min_samples:
                    problems.append(
                        f"GPU {index}: {gpu.samples or 0} sample(s), need {s.min_samples}"
                    )
                needed = s.min_coverage * model.window_seconds
                if gpu.covered_seconds is not None and gpu.covered_seconds < needed:
                    problems.append(
                        f"GPU {index}: samples span {gpu.covered_seconds:.0f}s of the "
                        f"{model.window} window, need {needed:.0f}s"
                    )
            cores = workload.cores_used()
            if idle and cores is not None and cores > s.max_cpu_cores:
                notes.append(
                    self.note(
                        workload.key,
                        f"GPUs below {s.max_utilization:g} but {cores:.2f} cores busy "
                        f"(> {s.max_cpu_cores:g}): working (waiting on links or input), not idle",
                    )
                )
                continue
            if not idle:
                continue
            if problems:
                notes.append(self.note(workload.key, "cannot tell if idle: " + "; ".join(problems)))
                continue
            total = len(node.gpus) or len(workload.gpus)
            gain = len(workload.gpus) / total
            peak = max(e.value for e in evidence) if evidence else 0.0
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
