"""gpu-placement: choose the best set of N free GPUs for a job, and place pending jobs.

Rule. For N GPUs on a node, every candidate set is ranked by (1) its worst pairwise link,
NVLink > same PCIe switch (PIX, then PXB) > same socket (PHB, NODE) > across sockets (SYS);
(2) the sum of its pairwise link ranks; (3) fragmentation, buddy-cell style as in HiveD:
the GPUs of a node form cells (a PCIe switch or NVLink island, then a socket, then the
node), and a set that breaks fewer fully free cells, and then leaves fewer free GPUs
stranded in the cells it touches, keeps larger well-connected blocks for later jobs; (4)
the GPU indexes (deterministic). The ranking lives in :mod:`toposcope.advisor.gpu_sets`,
whose :func:`~toposcope.advisor.gpu_sets.place` also backs ``toposcope place --gpus N``.
The policy places the resource manager's pending jobs, largest first, so they never ask for
the same GPUs.

Gain model. A multi-GPU job's step time scales with its dearest pair's link price
(:mod:`toposcope.advisor.link_prices`: the pair's bandwidth from the topology or a
measurement, else the tier's ``LINK_FACTOR``), anchored to Gandiva's measurements of 2-GPU
jobs (same PCIe switch = 1.0, across switches 1.4x slower, across nodes up to 5x); PXB and SYS
are interpolated. The gain model text names each price's source. The gain of a placement is
first-fit's factor over ours, minus 1: what
this choice saves against what a placement-blind scheduler (lowest free GPU indexes on the
first node that fits) would do.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from toposcope.advisor.gpu_sets import Placement, first_fit, gpu_claims, place
from toposcope.advisor.link_prices import price_text
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.policies.base import Evaluation, Policy, PolicySettings, setting
from toposcope.advisor.recommendations import make_recommendation
from toposcope.catalogue import spec
from toposcope.cpulist import format_cpulist
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
class GpuPlacementSettings(PolicySettings):
    """Settings of the gpu-placement policy."""

    sensitivity: float = setting(
        1.0,
        ge=0,
        le=2,
        help="how communication-bound jobs are (scales the link slowdown; 0 = not at all)",
    )
    pin_to_gpu_numa: bool = setting(
        True, help="also restrict a placed job's CPUs and memory to its GPUs' NUMA nodes"
    )
    top: int = setting(3, ge=1, le=50, help="alternatives kept in each recommendation")


class GpuPlacement(Policy[GpuPlacementSettings]):
    """Place pending multi-GPU jobs on the best-connected, least fragmenting GPU sets."""

    name = "gpu-placement"
    description = (
        "place pending GPU jobs on the best-connected free GPU set (NVLink > switch > socket)"
    )
    settings_type = GpuPlacementSettings
    requires = (spec("toposcope_gpu_info"), spec("toposcope_gpu_link_info"))

    def evaluate(self, model: ClusterModel) -> Evaluation:
        """One ``place`` recommendation per pending job that fits somewhere."""
        if not model.pending:
            return Evaluation(
                undecided=(
                    self.note(
                        "*",
                        "no pending GPU jobs known (give the resource manager with --rm-url "
                        "to read them); use `toposcope place --gpus N` for a one-off choice",
                    ),
                )
            )
        missing = self.missing_note(model)
        recs: list[Recommendation] = []
        notes: list[Note] = [missing] if missing else []
        taken: list[str] = []
        for job in sorted(model.pending, key=lambda j: (-j.gpus_requested, j.name)):
            if job.nodes_requested > 1:
                notes.append(
                    self.note(
                        job.name,
                        f"asks for {job.nodes_requested} nodes: fabric-placement places "
                        "multi-node jobs",
                    )
                )
                continue
            options = place(model, job.gpus_requested, taken=taken, top=self.settings.top)
            if not options:
                notes.append(self.note(job.name, f"no node has {job.gpus_requested} free GPU(s)"))
                continue
            best = options[0]
            baseline = first_fit(model, job.gpus_requested, taken) or best
            recs.append(self._recommend(model, job.name, best, baseline, options[1:]))
            taken.extend(gpu_claims(best.node, best.gpus))
        return Evaluation(tuple(recs), tuple(notes))

    def _recommend(
        self,
        model: ClusterModel,
        job: str,
        best: Placement,
        baseline: Placement,
        alternatives: Sequence[Placement],
    ) -> Recommendation:
        s = self.settings.sensitivity
        gain = baseline.factor(s) / best.factor(s) - 1.0
        node = model.nodes[best.node]
        cpus: list[int] = []
        mems: list[int] = []
        if self.settings.pin_to_gpu_numa and best.numa_nodes:
            mems = list(best.numa_nodes)
            cpus = sorted(c for n in node.numa_nodes if n.id in mems for c in n.cpus)
        worst = str(best.worst_link) if best.worst_link else "single GPU"
        evidence = [
            Evidence(
                "toposcope_gpu_link_info",
                {
                    "node": best.node,
                    "gpu": str(a),
                    "peer_gpu": str(b),
                    "link": str(node.link(a, b)),
                },
                1.0,
            )
            for a, b in itertools.combinations(best.gpus, 2)
        ]
        return make_recommendation(
            kind=RecommendationKind.PLACE,
            policy=self.name,
            target=Target(best.node, job, best.gpus),
            summary=(
                f"place {job} on {best.node} GPUs {','.join(map(str, best.gpus))} "
                f"(worst link {worst})"
            ),
            current={
                "state": "pending",
                "first_fit": baseline.to_dict(),
            },
            proposed={
                "node": best.node,
                "gpus": list(best.gpus),
                "cpus": format_cpulist(cpus),
                "mems": mems,
                "worst_link": worst,
                "link_price": best.price.to_dict(),
                "alternatives": [a.to_dict() for a in alternatives],
            },
            evidence=evidence,
            estimated_gain=gain,
            gain_model=(
                f"first-fit link factor {baseline.factor(s):.2f} / ours "
                f"{best.factor(s):.2f} - 1 (Gandiva-anchored; sensitivity {s:g}); "
                f"{price_text(('first-fit', baseline.price), ('ours', best.price))}"
            ),
            confidence=0.7 if node.links else 0.4,
            risk=Risk.LOW,
            actions=[
                ActionRequest("", ActionKind.PLACE, job, best.node, cpus, mems, list(best.gpus))
            ],
            claims=[*gpu_claims(best.node, best.gpus), f"workload:pending/{job}"],
        )
