"""job-migration's first phase: workloads that time-slice a busy GPU, moved apart.

Where several workloads hold one GPU busy at least ``min_shared_utilization``, each runs at a
share of it. :func:`shared_gpus` finds the workloads to move (on each such GPU the one holding
most GPUs stays) and what running alone gains each, from its measured share of the GPU where
the exporter publishes one, else the prior (:mod:`~toposcope.advisor.policies.share_gain`);
:func:`separate` moves each to a free set of its size when running alone, with the link
change of the move, saves more than the checkpoint-restore cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from toposcope.advisor.gpu_sets import gpu_claims, rank_sets
from toposcope.advisor.link_gain import link_gain
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.policies.migration_recommendations import move_recommendation
from toposcope.advisor.policies.migration_run import MigrationRun
from toposcope.advisor.policies.share_gain import ShareGain, share_gain


@dataclass(frozen=True)
class SharedGpu:
    """A workload to move off a GPU it shares: the gain of running alone, the workloads it
    shares with, the GPU's mean utilization and what priced the gain.
    """

    gain: float
    workload: WorkloadModel
    peers: list[str]
    utilization: float
    basis: ShareGain


def shared_gpus(model: ClusterModel, min_utilization: float) -> list[SharedGpu]:
    """Workloads to move off GPUs they share, most gain first.

    On each GPU held by several workloads and busy at least ``min_utilization``, the one
    holding most GPUs (then the first by name) stays and the others move; a workload moves
    once.
    """
    by_node: dict[str, list[WorkloadModel]] = {}
    for w in model.workloads:
        if w.gpus:
            by_node.setdefault(w.node, []).append(w)
    found: dict[str, SharedGpu] = {}
    for name, holders in sorted(by_node.items()):
        node = model.node(name)
        if node is None:
            continue
        per_gpu: dict[int, list[WorkloadModel]] = {}
        for w in holders:
            for g in w.gpus:
                per_gpu.setdefault(g, []).append(w)
        counts = {g: len(ws) for g, ws in per_gpu.items()}
        for index, sharing in sorted(per_gpu.items()):
            gpu = node.gpu(index)
            if len(sharing) < 2 or gpu is None or gpu.utilization is None:
                continue
            util = min(1.0, gpu.utilization)
            if util < min_utilization:
                continue
            ordered = sorted(sharing, key=lambda w: (-len(w.gpus), w.name))
            for w in ordered[1:]:
                if w.key in found or any(w.key == f.workload.key for f in found.values()):
                    continue
                if ordered[0].key in found:
                    continue  # the one that stays is itself moving away
                peers = [o.name for o in sharing if o.key != w.key]
                basis = share_gain(w, node, index, counts)
                found[w.key] = SharedGpu(basis.gain, w, peers, util, basis)
    return sorted(found.values(), key=lambda f: (-f.gain, f.workload.key))


def separate(run: MigrationRun, movers: list[SharedGpu]) -> None:
    """Move each workload off the GPUs it shares, when running alone pays off."""
    s = run.settings
    for mover in movers:
        job, peers = mover.workload, mover.peers
        cells = run.search.node_cells(job.node)
        current = rank_sets(run.model.nodes[job.node], job.gpus, len(job.gpus), cells)[0]
        best = run.assigned_set(job, include_own=False)
        if job.key in run.assigned and best is None:
            continue
        if best is None:
            run.notes.append(
                run.note(
                    job.key,
                    f"shares GPUs {list(job.gpus)} with {', '.join(peers)}; "
                    f"no {len(job.gpus)} free GPU(s) to move it to",
                )
            )
            continue
        link = link_gain(run.share(job), current, best, s.sensitivity)
        link = link.with_locality(*run.unpinned(job, best))
        gain = (1.0 + mover.gain) * (1.0 + link.gain) - 1.0
        saved = s.remaining_seconds * (1.0 - 1.0 / (1.0 + gain)) if gain > 0 else 0.0
        if saved <= s.checkpoint_restore_seconds:
            run.notes.append(
                run.note(
                    job.key,
                    f"separating it from {', '.join(peers)} would save {saved:.0f}s, less "
                    f"than the checkpoint-restore cost {s.checkpoint_restore_seconds:.0f}s",
                )
            )
            continue
        model_text = f"{mover.basis.text()}; link: {link.text}"
        rec = move_recommendation(
            run.model,
            job,
            current,
            best,
            run.terms,
            gain=gain,
            saved=saved,
            model_text=model_text,
            peers=peers,
            estimate=link.source,
            gpu_share=mover.basis.to_dict(),
            extra_evidence=mover.basis.evidence,
        )
        run.take(rec, gpu_claims(best.node, best.gpus), job.key)
