"""What running alone would gain a workload that time-slices a busy GPU, and what says so.

Where several workloads hold one GPU, each runs only while none of the others' kernels do.
Without a measurement the policy assumes each wants all of the GPU: a workload among ``n``
on a GPU ``U`` busy runs ``(n - 1) x U`` faster alone (the prior).

With the exporter's per-process figure (``toposcope_workload_gpu_sm_utilization_ratio``,
NVML's per-process samples summed over the workload's processes) the workload's own share
``u`` of the GPU's time is known. A GPU-bound workload given a share ``u`` of a GPU it would
otherwise have alone runs up to ``1/u - 1`` faster there. That bound is cut by what the GPU's
busy time allows: alone it could run at most in the time the GPU is busy now (its own share
and the time its peers' kernels take), ``min(1, U)``, so the estimate is ``min(1, U) / u - 1``.
A workload that needs little GPU has a small share and a GPU that is idle much of the time;
the cut keeps its estimate from growing with ``1/u`` past what the GPU's busy time shows.
A workload on several shared GPUs runs at the pace of its most slowed one: its gain is the
largest over its shared GPUs with a measured share. A share below
:data:`MIN_MEASURED_SHARE` (a workload paused, or barely running, over the window) prices
nothing: the prior stands.

:func:`share_gain` says which basis priced it (``estimate``: ``measured`` or ``prior``), in
words for the gain model and as the recommendation's ``current.gpu_share`` entry, with the
measured share as evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toposcope.advisor.model import NodeModel, WorkloadModel
from toposcope.report.recommendation import Evidence

#: the smallest measured share of a GPU that prices a move (``1/u`` grows without bound)
MIN_MEASURED_SHARE = 0.02
#: the series a measured share comes from
SHARE_SERIES = "toposcope_workload_gpu_sm_utilization_ratio"


@dataclass(frozen=True)
class ShareGain:
    """A time-slicing workload's gain from running alone, and on what it rests.

    ``estimate`` is ``measured`` (its own share of ``gpu``) or ``prior``; ``share`` its
    measured share (``None`` without one), ``utilization`` the GPU's mean utilization,
    ``holders`` the workloads holding the GPU.
    """

    gain: float
    estimate: str
    gpu: int
    utilization: float
    holders: int
    share: float | None = None
    evidence: tuple[Evidence, ...] = field(default_factory=tuple)

    def text(self) -> str:
        """The gain model's clause for the time-slicing gain."""
        head = (
            f"time-slicing: {self.holders} workloads on GPU {self.gpu} {self.utilization:.0%} busy"
        )
        if self.estimate == "measured" and self.share is not None:
            alone = min(1.0, self.utilization)
            return (
                f"{head}, measured share {self.share:.2f} of it (per-process samples): alone "
                f"up to the GPU's busy time {alone:.2f}, {alone:.2f} / {self.share:.2f} - 1 = "
                f"{self.gain:.2f} faster alone if GPU-bound (estimate from the measured share)"
            )
        why = (
            f"measured share {self.share:.3f} too small to price"
            if self.share is not None
            else "no measured per-process share"
        )
        return (
            f"{head}, each assumed to want all of it: ({self.holders} - 1) x "
            f"{self.utilization:.2f} = {self.gain:.2f} faster alone (estimate from the prior; "
            f"{why})"
        )

    def to_dict(self) -> dict[str, object]:
        """The recommendation's ``current.gpu_share`` entry."""
        return {
            "estimate": self.estimate,
            "gpu": self.gpu,
            "share": None if self.share is None else round(self.share, 4),
            "gpu_utilization": round(self.utilization, 4),
            "workloads": self.holders,
            "gain": round(self.gain, 4),
        }


def share_gain(
    workload: WorkloadModel,
    node: NodeModel,
    gpu: int,
    holders: dict[int, int],
) -> ShareGain:
    """``workload``'s gain from leaving ``gpu`` (busy, held by several): from its measured
    shares of its shared GPUs where present, else the prior (module docstring). ``holders``
    counts the workloads holding each of the node's GPUs.
    """
    state = node.gpu(gpu)
    util = min(1.0, state.utilization or 0.0) if state is not None else 0.0
    prior = ShareGain((holders[gpu] - 1) * util, "prior", gpu, util, holders[gpu])
    best: ShareGain | None = None
    evidence: list[Evidence] = []
    for index in sorted(workload.gpus):
        share = workload.gpu_sm_share.get(index)
        other = node.gpu(index)
        if share is None or holders.get(index, 0) < 2 or other is None:
            continue
        evidence.append(
            Evidence(
                SHARE_SERIES,
                {"node": workload.node, "workload": workload.name, "gpu": str(index)},
                round(share, 6),
            )
        )
        if share < MIN_MEASURED_SHARE or other.utilization is None:
            continue
        busy = min(1.0, other.utilization)
        gain = max(0.0, max(busy, share) / share - 1.0)
        if best is None or gain > best.gain:
            best = ShareGain(gain, "measured", index, busy, holders[index], share)
    if best is None:
        share = workload.gpu_sm_share.get(gpu)
        return ShareGain(
            prior.gain, "prior", gpu, util, holders[gpu], share, evidence=tuple(evidence)
        )
    return ShareGain(
        best.gain,
        "measured",
        best.gpu,
        best.utilization,
        best.holders,
        best.share,
        evidence=tuple(evidence),
    )
