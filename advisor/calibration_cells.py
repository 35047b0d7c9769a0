"""The cells calibration is learned in: a recommendation's kind, policy, node type and link
tier, and the prior estimate it made before any calibration.

A pin on a PCIe box and a pin on an NVSwitch machine, or a job move onto an ``NV12`` pair
and one onto a ``SYS`` pair, miss their priors by different amounts, so
:mod:`toposcope.advisor.calibration` learns a factor per :data:`Cell` (shrunk toward the
coarser cells while evidence is thin). The cell of a change is fixed when it is applied
(:meth:`~toposcope.advisor.outcomes.OutcomeLog.start`) from the analysis it came from:

* **node type**: the GPU model and count of the node the change puts the workload on
  (``NVIDIA A100-SXM4-80GB x8``), ``cpu-only`` for a node without GPUs, ``unknown`` when
  the model does not have the node;
* **link tier**: the link label (``NV12``, ``PIX``, ``SYS``...) of the dearest pair, by its
  link price (:mod:`~toposcope.advisor.link_prices`), of the GPUs the workload holds
  after the change; ``single`` for one GPU, ``none`` for none.

The policy part of a cell also names how the policy estimated the gain where its
recommendation says so (:func:`estimate_basis`): a job move estimated from the job's
measured link traffic (``job-migration (measured estimate)``) misses by another amount than
one priced by the prior's sensitivity (``job-migration (prior estimate)``), even onto the
same GPUs, so the two are learned apart; so are pins priced by a workload's measured memory
traffic and by numa-pinning's prior. A move off a time-sliced GPU priced by the workload's
measured share of it (``current.gpu_share``, ``estimate`` ``measured``) is learned in its own
``measured-share`` cell; one priced by the prior keeps its communication share's basis.

A calibrated recommendation carries its prior estimate as evidence
(:data:`PRIOR_SERIES`, labelled with its id), so that its outcome is compared with what the
policy estimated (:func:`gross_prior`), not with an estimate already scaled by the outcomes
before it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from toposcope.advisor.model import ClusterModel
from toposcope.advisor.recommendations import HORIZON_S, cost_seconds
from toposcope.report.recommendation import Evidence, Recommendation, RecommendationKind

#: (kind, policy, node type, link tier)
Cell = tuple[str, str, str, str]
#: the evidence series a calibrated recommendation's prior estimate is kept in
PRIOR_SERIES = "toposcope_advisor_estimated_gain_ratio"


def node_type(model: ClusterModel | None, node: str) -> str:
    """``node``'s type in ``model`` (module docstring)."""
    state = model.node(node) if model is not None else None
    if state is None:
        return "unknown"
    if not state.gpus:
        return "cpu-only"
    models = sorted({g.model or "unknown GPU" for g in state.gpus})
    return f"{'/'.join(models)} x{len(state.gpus)}"


def link_tier(model: ClusterModel | None, node: str, gpus: Sequence[int]) -> str:
    """The link label of the dearest pair of ``gpus`` on ``node`` (module docstring)."""
    if not gpus:
        return "none"
    if len(gpus) == 1:
        return "single"
    state = model.node(node) if model is not None else None
    if state is None:
        return "unknown"
    a, b = max(
        itertools.combinations(sorted(gpus), 2),
        key=lambda pair: state.prices.pair(*pair).factor,
    )
    return state.links.get((a, b)) or state.links.get((b, a)) or "unknown"


#: the ways of estimating a recommendation names in ``current.communication_share`` (or, for a
#: pin, ``current.numa_sensitivity``), and ``measured-share`` for a move off a time-sliced GPU
#: priced by the workload's measured share of it (``current.gpu_share``)
ESTIMATE_BASES = frozenset({"measured", "prior", "measured-share"})


def estimate_basis(rec: Recommendation) -> str:
    """How ``rec``'s gain was estimated, where its ``current.communication_share`` (a pin's
    ``current.numa_sensitivity``) says so (``estimate``, or ``source`` for an exchange of GPUs:
    ``measured`` or ``prior``); ``measured-share`` where ``current.gpu_share`` says a
    measured share priced it; empty otherwise, and for any other value.
    """
    gpu_share = rec.current.get("gpu_share")
    if isinstance(gpu_share, Mapping) and gpu_share.get("estimate") == "measured":
        return "measured-share"
    share = rec.current.get("communication_share", rec.current.get("numa_sensitivity"))
    if not isinstance(share, Mapping):
        return ""
    basis = share.get("estimate", share.get("source"))
    return basis if isinstance(basis, str) and basis in ESTIMATE_BASES else ""


def cell_of(
    rec: Recommendation, model: ClusterModel | None, node: str, gpus: Sequence[int]
) -> Cell:
    """The cell of ``rec`` putting its workload on ``gpus`` of ``node`` (for a change that
    moves no GPUs, the workload's own GPUs in ``model`` when ``gpus`` is empty); its policy
    part with the estimate's basis where ``rec`` names one (:func:`estimate_basis`).
    """
    held = list(gpus)
    if not held and model is not None and rec.target.workload:
        found = next(
            (w for w in model.workloads if w.node == node and w.name == rec.target.workload),
            None,
        )
        held = list(found.gpus) if found is not None else []
    basis = estimate_basis(rec)
    policy = f"{rec.policy} ({basis} estimate)" if basis else rec.policy
    return (str(rec.kind), policy, node_type(model, node), link_tier(model, node, held))


def prior_evidence(rec: Recommendation, prior: float) -> Evidence:
    """The evidence that keeps ``rec``'s prior estimate ``prior``."""
    labels = {
        "recommendation": rec.id,
        "kind": str(rec.kind),
        "workload": rec.target.workload or "",
    }
    return Evidence(PRIOR_SERIES, labels, round(prior, 6))


def prior_gain(rec: Recommendation) -> float:
    """The estimate ``rec`` made before calibration: its prior evidence, else its estimate."""
    for item in rec.evidence:
        if item.series == PRIOR_SERIES and item.labels.get("recommendation") == rec.id:
            return float(item.value)
    return rec.estimated_gain


def gross_prior(rec: Recommendation) -> float:
    """:func:`prior_gain`, for a job move before its checkpoint-restores are paid (what a
    calibration factor scales: :func:`~toposcope.advisor.calibration.calibrated_gain`).
    """
    prior = prior_gain(rec)
    if rec.kind != RecommendationKind.MIGRATE_JOB:
        return prior
    return prior + cost_seconds(rec.kind, rec.proposed, rec.actions) / HORIZON_S
