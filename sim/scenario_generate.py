"""A scenario's ``generate:``: a seeded large cluster of built-in nodes with jobs placed on
them (:mod:`toposcope.sim.scenarios`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from toposcope.rm import Allocation
from toposcope.sim.jobs import (
    MAX_JOBS,
    JobKind,
    JobSpec,
    make_job,
)
from toposcope.sim.scenario_model import MAX_JOBS_PER_NODE, MAX_NODES, JobDecl, NodeDecl
from toposcope.sim.scenario_yaml import ScenarioFields
from toposcope.sim.templates import (
    BUILTIN_TEMPLATES,
    NodeTemplate,
    builtin_template,
)

# -- generated clusters -------------------------------------------------------------------------


def generate_cluster(
    fields: ScenarioFields, default_seed: int, existing: int, override: bool
) -> tuple[list[NodeDecl], list[JobDecl]]:
    """A deterministic synthetic cluster: ``nodes`` per template, ``workloads`` spread evenly,
    each placed on its node with a realistic share of poor placements. The counts are
    checked against the limits before anything is generated.
    """
    raw_nodes = fields.data.get("nodes")
    if not isinstance(raw_nodes, Mapping) or not raw_nodes:
        raise fields.error("nodes", "expected a mapping of template name to node count")
    counts: list[tuple[NodeTemplate, int]] = []
    node_fields = fields.child("nodes", tuple(str(k) for k in raw_nodes))
    assert node_fields is not None
    for key in raw_nodes:
        if str(key) not in BUILTIN_TEMPLATES:
            raise node_fields.error(
                str(key), f"unknown template (built-in: {', '.join(BUILTIN_TEMPLATES)})"
            )
        count = node_fields.integer(str(key), minimum=1, maximum=MAX_NODES)
        if count is None:
            raise node_fields.error(str(key), "expected a node count")
        counts.append((builtin_template(str(key)), count))
    total_nodes = sum(c for _, c in counts)
    if existing + total_nodes > MAX_NODES:
        raise fields.error(
            "nodes",
            f"{total_nodes:,} generated nodes and {existing:,} declared ones: a scenario holds "
            f"at most {MAX_NODES:,} nodes",
        )
    workloads = fields.integer("workloads", total_nodes * 4, minimum=0, maximum=MAX_JOBS) or 0
    if workloads > total_nodes * MAX_JOBS_PER_NODE:
        raise fields.error(
            "workloads",
            f"{workloads:,} workloads on {total_nodes:,} node(s): at most {MAX_JOBS_PER_NODE} "
            "per node",
        )
    own = fields.integer("seed", default_seed) or 0
    rng = random.Random(default_seed if override else own)
    nodes: list[NodeDecl] = []
    for template, count in counts:
        for _ in range(count):
            nodes.append(
                NodeDecl(f"node-{existing + len(nodes) + 1:04d}", template, {"generated": "true"})
            )
    per_node = [workloads // len(nodes) + (1 if i < workloads % len(nodes) else 0)
                for i in range(len(nodes))]  # fmt: skip
    jobs: list[JobDecl] = []
    where = fields.where()
    for node, wanted in zip(nodes, per_node, strict=True):
        jobs.extend(
            JobDecl(spec, alloc, where) for spec, alloc in _node_jobs(node, wanted, rng, len(jobs))
        )
    return nodes, jobs


def _node_jobs(
    node: NodeDecl, wanted: int, rng: random.Random, first: int
) -> list[tuple[JobSpec, Allocation]]:
    """``wanted`` jobs on one generated node: GPU jobs share out its GPUs, CPU jobs its CPUs;
    about a third get a poor placement (GPUs across switches or sockets, memory or threads
    on the wrong NUMA node, no pinning).
    """
    template = node.template
    free = [g.index for g in template.gpus]
    result: list[tuple[JobSpec, Allocation]] = []
    numa_with_cpus = [n.id for n in template.topology.numa_nodes if n.cpus]
    for k in range(wanted):
        name = f"job-{first + k + 1:05d}"
        slots_left = wanted - k
        if free:
            share = max(len(free) // slots_left, 1)
            roll = rng.random()
            if roll < 0.15:
                kind, gpus = JobKind.NOTEBOOK, 1
            elif roll < 0.35:
                kind, gpus = JobKind.INFERENCE, 1
            else:
                kind, gpus = JobKind.GPU_TRAIN, min(share, 2 if share < 4 else 4)
            gpus = min(gpus, len(free))
            spec = make_job(name, kind, gpus=gpus, gpu_total_bytes=template.gpu_memory_bytes)
            poor = rng.random() < 0.35
            chosen = sorted(rng.sample(free, gpus)) if poor else free[:gpus]
            for g in chosen:
                free.remove(g)
            home = template.gpu(chosen[0]).numa_node
            if home is None or poor:
                home = rng.choice(numa_with_cpus)
            pinned = rng.random() < 0.5
            cpus = list(template.node_cpus(home)) if pinned else []
            mems = [home] if pinned else []
            result.append((spec, Allocation(node.name, cpus, mems, chosen)))
            continue
        threads = max(len(template.cpus) // max(wanted, 1) // 2, 1)
        spec = make_job(name, JobKind.CPU_TRAIN, threads=threads, memory_gb=16)
        roll = rng.random()
        home = numa_with_cpus[k % len(numa_with_cpus)]
        if roll < 0.3:
            cpus, mems = [], []
        elif roll < 0.5:
            cpus = list(template.node_cpus(home))
            mems = [numa_with_cpus[(k + 1) % len(numa_with_cpus)]]
        else:
            cpus, mems = list(template.node_cpus(home)), [home]
        result.append((spec, Allocation(node.name, cpus, mems, [])))
    return result
