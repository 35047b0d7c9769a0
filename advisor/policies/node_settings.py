"""config: node settings that undo topology work (GPU throttling, gres.conf, NUMA balancing).

Rules.

* Slurm's gres.conf: inside a node Slurm picks a job's GPU indices (and, with
  ``--gres-flags=enforce-binding``, its CPUs) from gres.conf's ``Cores=`` and ``Links=``. Where
  the exporter's ``slurm_gres`` collector says a GPU's line does not match the topology
  (``toposcope_slurm_gres_config_match`` 0), one recommendation per node carries the correct
  lines (``toposcope_slurm_gres_expected_info``, as ``toposcope slurm gres-conf`` prints them)
  for the operator to merge. No action: toposcope never edits Slurm's configuration.

* GPU throttling: a GPU whose clock-event (throttle) reasons in ``reasons`` were active for
  at least ``min_active_share`` of the window (``avg_over_time`` of
  ``toposcope_gpu_clock_event_active``) is reported: cooling, power supply or power cap need a
  look. There is nothing for a resource manager to do, so the recommendation has no actions.
* Automatic NUMA balancing (``kernel.numa_balancing``) moving pages and tasks behind pinned
  workloads' backs: no toposcope metric publishes the setting yet, so the policy says it
  cannot decide instead of guessing.

Gain model. gres.conf: ``GPUs with a wrong Cores= / GPUs of the node x gres_penalty`` (the
share of jobs that may get CPUs across the socket from their GPU, times an assumed 0.1 slowdown
of such a job; links alone count half). Throttling: ``active share x throttle_penalty`` (a
throttled GPU runs with reduced clocks; 0.25 is an assumed mean clock loss while throttled,
not a measurement), taking the worst reason per GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from toposcope.advisor.model import ClusterModel, NodeModel
from toposcope.advisor.policies.base import Evaluation, Policy, PolicySettings, setting
from toposcope.advisor.recommendations import make_recommendation
from toposcope.catalogue import CATALOGUE, spec
from toposcope.report.recommendation import (
    Evidence,
    Note,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
)

THROTTLE_REASONS = ("hw_thermal", "sw_thermal", "hw_power_brake", "hw_slowdown")
#: the metric that would tell whether automatic NUMA balancing is on (not in the catalogue yet)
NUMA_BALANCING_METRIC = "toposcope_numa_balancing_enabled"
GRES_MATCH_METRIC = "toposcope_slurm_gres_config_match"
#: what a gres.conf line from a metric label may hold before it is shown to an operator
_GRES_LINE_RE = re.compile(r"[A-Za-z0-9=/_.,:+ -]{1,500}")


@dataclass(frozen=True)
class NodeSettingsCheckSettings(PolicySettings):
    """Settings of the config policy."""

    reasons: tuple[str, ...] = setting(
        THROTTLE_REASONS,
        choices=(
            "hw_thermal",
            "sw_thermal",
            "hw_power_brake",
            "hw_slowdown",
            "sw_power_cap",
            "sync_boost",
        ),
        help="clock-event reasons that count as throttling",
    )
    min_active_share: float = setting(
        0.5, gt=0, le=1, help="report a GPU throttled for at least this share of the window"
    )
    throttle_penalty: float = setting(
        0.25, gt=0, le=1, help="assumed speed lost while throttled (clock reduction)"
    )
    gres_penalty: float = setting(
        0.1, gt=0, le=1, help="assumed slowdown of a job given CPUs across from its GPU"
    )


class NodeSettingsCheck(Policy[NodeSettingsCheckSettings]):
    """Report long GPU throttling; check NUMA balancing when a metric exists."""

    name = "config"
    description = (
        "GPUs throttled for long; gres.conf Cores=/Links= not matching the topology; "
        "automatic NUMA balancing fighting pinning"
    )
    settings_type = NodeSettingsCheckSettings
    requires = (spec("toposcope_gpu_clock_event_active"),)

    def evaluate(self, model: ClusterModel) -> Evaluation:
        """gres.conf and throttling recommendations (no actions), the NUMA-balancing note."""
        notes: list[Note] = []
        if NUMA_BALANCING_METRIC not in CATALOGUE:
            notes.append(
                self.note(
                    "*",
                    "numa balancing: no metric publishes kernel.numa_balancing; "
                    "check `sysctl kernel.numa_balancing` on hosts with pinned workloads",
                )
            )
        recs = [
            rec
            for _, node in sorted(model.nodes.items())
            if (rec := self._gres_conf(node)) is not None
        ]
        if not model.has("toposcope_gpu_clock_event_active"):
            if any(n.gpus for n in model.nodes.values()):
                notes.append(self.note("*", "no series for toposcope_gpu_clock_event_active"))
            return Evaluation(tuple(recs), tuple(notes))
        s = self.settings
        for name, node in sorted(model.nodes.items()):
            for gpu in node.gpus:
                active = {r: v for r, v in gpu.clock_events.items() if r in s.reasons and v > 0}
                if not active:
                    continue
                reason = max(sorted(active), key=lambda r: active[r])
                share = active[reason]
                if share < s.min_active_share:
                    continue
                recs.append(
                    make_recommendation(
                        kind=RecommendationKind.CONFIG,
                        policy=self.name,
                        target=Target(name, None, (gpu.index,)),
                        summary=(
                            f"GPU {gpu.index} on {name} throttled ({reason}) {share:.0%} of "
                            f"{model.window}: check cooling, power supply and power limit"
                        ),
                        current={
                            "throttle_reasons": {r: round(v, 4) for r, v in sorted(active.items())}
                        },
                        proposed={"throttle_reasons": {}, "check": _advice(reason)},
                        evidence=[
                            Evidence(
                                "toposcope_gpu_clock_event_active",
                                {"node": name, "gpu": str(gpu.index), "reason": r},
                                v,
                            )
                            for r, v in sorted(active.items())
                        ],
                        estimated_gain=share * s.throttle_penalty,
                        gain_model=(
                            f"active share {share:.3f} x assumed throttle penalty "
                            f"{s.throttle_penalty:g}"
                        ),
                        confidence=0.5,
                        risk=Risk.LOW,
                        claims=[f"gpu-config:{name}/{gpu.index}"],
                    )
                )
        return Evaluation(tuple(recs), tuple(notes))

    def _gres_conf(self, node: NodeModel) -> Recommendation | None:
        """The node's gres.conf recommendation when a GPU's line does not match, else None."""
        wrong = {
            gpu.index: sorted(f for f, ok in gpu.gres_match.items() if not ok) for gpu in node.gpus
        }
        wrong = {index: fields for index, fields in wrong.items() if fields}
        if not wrong:
            return None
        lines = [
            gpu.gres_line
            for gpu in sorted(node.gpus, key=lambda g: g.index)
            if _GRES_LINE_RE.fullmatch(gpu.gres_line)
        ]
        weight = sum(1.0 if "cores" in fields else 0.5 for fields in wrong.values())
        share = weight / max(len(node.gpus), 1)
        shown = ", ".join(f"GPU {i} ({'/'.join(f)})" for i, f in sorted(wrong.items()))
        return make_recommendation(
            kind=RecommendationKind.CONFIG,
            policy=self.name,
            target=Target(node.name, None, tuple(sorted(wrong))),
            summary=(
                f"gres.conf on {node.name} does not match the topology for {shown}: inside a "
                "node Slurm picks a job's GPU indices and CPUs from gres.conf's Cores= (and "
                "prefers GPUs by Links=); merge the lines toposcope writes (toposcope slurm "
                "gres-conf) and restart slurmd"
            ),
            current={"mismatched_fields": {str(i): f for i, f in sorted(wrong.items())}},
            proposed={"gres_conf_lines": lines},
            evidence=[
                Evidence(GRES_MATCH_METRIC, {"node": node.name, "gpu": str(i), "field": f}, 0.0)
                for i, fields in sorted(wrong.items())
                for f in fields
            ],
            estimated_gain=share * self.settings.gres_penalty,
            gain_model=(
                f"mismatched GPU share {share:.3f} (links alone count half) x assumed "
                f"cross-socket penalty {self.settings.gres_penalty:g}"
            ),
            confidence=0.8,
            risk=Risk.LOW,
            claims=[f"gres-conf:{node.name}"],
        )


def _advice(reason: str) -> str:
    if reason in ("hw_thermal", "sw_thermal"):
        return "airflow, fans and inlet temperature of the GPU"
    if reason == "hw_power_brake":
        return "power supplies and the BMC's power brake signal"
    if reason == "sw_power_cap":
        return "the GPU power limit (nvidia-smi -q -d POWER)"
    return "GPU clocks and board health (nvidia-smi -q -d PERFORMANCE)"
