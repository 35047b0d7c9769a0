"""The fabric and the spread of multi-node jobs as the catalogue's ``fabric`` families.

Any cluster-level exporter that knows a fabric and where jobs run publishes these (the Slurm
exporter with ``--fabric-...``): the fabric's switches and nodes once, and per multi-node
job its nodes, GPUs, domains spanned and needed per level, the highest level crossed and rail
alignment (:mod:`toposcope.fabric.spread`). The fabric's own series depend on the fabric only,
so :func:`fabric_families` is computed once and served again on every scrape; per-job series
follow the running multi-node jobs, as ``toposcope_queue_job_time_left_seconds`` does.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from toposcope.catalogue import families, nonempty
from toposcope.fabric.model import Fabric, level_name
from toposcope.fabric.spread import JobSpread

FABRIC_FAMILIES = ("toposcope_fabric_switch_info", "toposcope_fabric_node_info")
JOB_FAMILIES = (
    "toposcope_job_fabric_node_gpus",
    "toposcope_job_fabric_nodes",
    "toposcope_job_fabric_gpus",
    "toposcope_job_fabric_domains",
    "toposcope_job_fabric_domains_needed",
    "toposcope_job_fabric_top_level",
    "toposcope_job_fabric_top_level_needed",
    "toposcope_job_fabric_rail_aligned",
)


def fabric_families(fabric: Fabric) -> list[Metric]:
    """``toposcope_fabric_switch_info`` and ``toposcope_fabric_node_info`` of ``fabric``."""
    out = families(FABRIC_FAMILIES)
    switch_info = out["toposcope_fabric_switch_info"]
    parents: dict[str, list[str]] = {}
    for switch in fabric.switches:
        for child in switch.switches:
            parents.setdefault(child, []).append(switch.name)
    leaves: dict[str, list[str]] = {}
    for switch in fabric.switches:
        for parent in parents.get(switch.name) or [""]:
            switch_info.add_metric([switch.name, level_name(switch.level), parent], 1.0)
        for name in switch.nodes:
            leaves.setdefault(name, []).append(switch.name)
    block_of = {name: block.name for block in fabric.blocks for name in block.nodes}
    node_info = out["toposcope_fabric_node_info"]
    for node in fabric.nodes:
        block = block_of.get(node.name, "")
        if node.ports:
            for port in node.ports:
                node_info.add_metric([node.name, port.nic, port.switch, block], 1.0)
            continue
        for leaf in leaves.get(node.name) or [""]:
            node_info.add_metric([node.name, "", leaf, block], 1.0)
    return nonempty(out.values())


def job_families(spreads: Iterable[JobSpread]) -> list[Metric]:
    """The per-job families of ``spreads`` (empty families left out)."""
    out = families(JOB_FAMILIES)
    for spread in spreads:
        job = spread.job
        key = [job.scheduler, job.partition, job.workload]
        gpus_on: dict[str, int] = {}
        for share in job.shares:
            gpus_on[share.node] = gpus_on.get(share.node, 0) + share.gpus
        for node, gpus in gpus_on.items():
            out["toposcope_job_fabric_node_gpus"].add_metric([*key, node], float(gpus))
        out["toposcope_job_fabric_nodes"].add_metric(key, float(spread.nodes))
        out["toposcope_job_fabric_gpus"].add_metric(key, float(spread.gpus))
        for level, count in spread.domains.items():
            out["toposcope_job_fabric_domains"].add_metric([*key, level], float(count))
        for level, count in spread.needed.items():
            out["toposcope_job_fabric_domains_needed"].add_metric([*key, level], float(count))
        if spread.top_level is not None:
            out["toposcope_job_fabric_top_level"].add_metric(key, float(spread.top_level))
        if spread.top_level_needed is not None:
            out["toposcope_job_fabric_top_level_needed"].add_metric(
                key, float(spread.top_level_needed)
            )
        if spread.rail_aligned is not None:
            out["toposcope_job_fabric_rail_aligned"].add_metric(
                key, 1.0 if spread.rail_aligned else 0.0
            )
    return nonempty(out.values())
