"""The figures a verification of an applied recommendation measures.

The baseline recorded when a recommendation is applied (:func:`baseline`) and the same
figures measured later (:func:`measure`; a release's by :func:`measure_release`), of the job
made of the workloads it changed (:func:`parts_of`). What the verdicts make of them is in
:mod:`toposcope.advisor.verdicts`; the rule is described in :mod:`toposcope.advisor.outcomes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from toposcope.advisor.fabric_jobs import workload_parts
from toposcope.advisor.locality import remote_share
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.progress_probe import ProgressProbe
from toposcope.advisor.verification_rule import JOB_KINDS, NUMA_KINDS, target_numa
from toposcope.report.advisor_api import Measurement
from toposcope.report.recommendation import Recommendation, RecommendationKind


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
