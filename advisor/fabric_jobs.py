"""Which workloads are the parts of one running multi-node job, from the fabric exporter.

On Slurm a multi-node job is one workload name (``slurm-job-<id>``) on each of its nodes;
elsewhere (a JobSet's pods, the simulator's gang parts) each node's part is a workload of its
own. The fabric exporter's ``toposcope_job_fabric_node_gpus{workload=JOB, node=N}`` (the
Slurm exporter's ``--fabric-*`` options, the simulator's own ``/metrics``) says how many GPUs
job ``JOB`` holds on node ``N``; :func:`job_parts` joins it to the workloads the node
metrics show: on each node, the workload named ``JOB`` if there is one, else the only
workload holding exactly that many GPUs, else the only one of those whose name starts with
``JOB-``. A job whose part on some node cannot be told apart that way is left out (its parts
stay separate jobs to the policies), never guessed. :func:`workload_parts` finds the parts of
a job by its name wherever they run now: what the verification of a multi-node job's move
measures (:mod:`toposcope.advisor.outcomes`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from toposcope.advisor.loaders.base import LoadedData
from toposcope.advisor.model import ClusterModel, WorkloadModel

#: what names a series' node (the model builder's NodeNamer)
Namer = Callable[[Mapping[str, str]], str]


def read_fabric_jobs(data: LoadedData, namer: Namer) -> dict[str, dict[str, int]]:
    """Job -> node -> GPUs held there, from ``toposcope_job_fabric_node_gpus``."""
    jobs: dict[str, dict[str, int]] = {}
    for s in data.samples("job-fabric-node-gpus"):
        job = s.labels.get("workload", "")
        if job and s.value >= 1:
            jobs.setdefault(job, {})[namer(s.labels)] = int(s.value)
    return jobs


def job_parts(
    fabric_jobs: Mapping[str, Mapping[str, int]],
    held: Iterable[tuple[str, str, int]],
) -> dict[str, str]:
    """``node/workload`` -> the multi-node job it is part of (see the module docstring);
    ``held`` is each workload's (node, name, GPUs held).
    """
    by_node: dict[str, list[tuple[str, int]]] = {}
    for node, workload, count in held:
        by_node.setdefault(node, []).append((workload, count))
    out: dict[str, str] = {}
    for job, nodes in sorted(fabric_jobs.items()):
        found: dict[str, str] = {}
        for node, gpus in nodes.items():
            name = _part(job, gpus, by_node.get(node, []))
            if name is None:
                break
            found[f"{node}/{name}"] = job
        else:
            if len(found) >= 2:
                out.update(found)
    return out


def _part(job: str, gpus: int, here: list[tuple[str, int]]) -> str | None:
    """The one workload of ``here`` that is ``job``'s part holding ``gpus`` GPUs, or ``None``."""
    if any(name == job for name, _ in here):
        return job
    same = [name for name, count in here if count == gpus]
    if len(same) > 1:
        same = [name for name in same if name.startswith(f"{job}-")]
    return same[0] if len(same) == 1 else None


def workload_parts(
    model: ClusterModel, node: str, name: str, whole_job: bool = True
) -> list[WorkloadModel]:
    """The workloads that make up job ``name`` in ``model``: when it holds GPUs on several
    nodes (one name on each, or the parts :func:`job_parts` joins) and ``whole_job``, every
    part of it wherever it runs now, ``node`` aside (a moved job's parts are found by the job,
    not where it was); else the workload ``name`` on ``node``, the one part of a single-node
    job or the part a change on that node alone touched (none: empty).
    """
    here = [w for w in model.workloads if w.node == node and w.name == name]
    if not whole_job:
        return here
    held = [(w.node, w.name, len(w.gpus)) for w in model.workloads if w.gpus]
    part_of = job_parts(model.fabric_jobs, held)
    parts = [w for w in model.workloads if w.gpus and part_of.get(w.key, w.name) == name]
    if len({w.node for w in parts}) >= 2:
        return sorted(parts, key=lambda w: w.key)
    return here


__all__ = ["job_parts", "read_fabric_jobs", "workload_parts"]
