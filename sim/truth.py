"""Ground truth of a simulated cluster as Prometheus families (``/truth/metrics``).

What no real exporter can publish: each workload's true throughput from the performance
model, the best it could have, the model's slowdown factors, and the cluster's overall
efficiency. The advisor's evaluation compares its estimated gains with these. Families are
the catalogue's ``toposcope_sim_*`` rows (part ``sim``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client.core import Metric

from toposcope.catalogue import nonempty, spec
from toposcope.exporters.exposition import render_families
from toposcope.sim.cluster import SimCluster

#: The model factors published as ``factor`` label values, plus ``total``.
FACTORS = ("numa", "contention", "link", "interference", "input")


def truth_families(cluster: SimCluster) -> Iterator[Metric]:
    """The ``toposcope_sim_*`` families for the cluster's state now."""
    rows = cluster.truth()
    clock = spec("toposcope_sim_time_seconds").family()
    clock.add_metric([], cluster.now)
    nodes = spec("toposcope_sim_node_info").family()
    for name in cluster.node_names():
        nodes.add_metric([name, cluster.template_of(name).name], 1.0)
    info = spec("toposcope_sim_workload_info").family()
    throughput = spec("toposcope_sim_workload_throughput").family()
    best = spec("toposcope_sim_workload_best_throughput").family()
    efficiency = spec("toposcope_sim_workload_efficiency_ratio").family()
    slowdown = spec("toposcope_sim_workload_slowdown_ratio").family()
    progress = spec("toposcope_sim_workload_progress_ratio").family()
    total_true = total_best = 0.0
    for row in rows:
        info.add_metric([row.name, row.node, row.kind, row.state, row.link_class], 1.0)
        throughput.add_metric([row.name, row.node], row.throughput)
        best.add_metric([row.name, row.node], row.best_throughput)
        if row.best_throughput > 0:
            efficiency.add_metric([row.name, row.node], row.throughput / row.best_throughput)
            if row.state == "running":
                total_true += row.throughput
                total_best += row.best_throughput
        if row.state == "running" and not math.isinf(row.slowdown):
            for factor in FACTORS:
                if factor in row.factors:
                    slowdown.add_metric([row.name, row.node, factor], row.factors[factor])
            slowdown.add_metric([row.name, row.node, "total"], row.slowdown)
        if row.progress_ratio is not None:
            progress.add_metric([row.name], row.progress_ratio)
    states = spec("toposcope_sim_workloads").family()
    for state, count in sorted(cluster.counts().items()):
        states.add_metric([state], float(count))
    overall = spec("toposcope_sim_cluster_efficiency_ratio").family()
    if total_best > 0:
        overall.add_metric([], total_true / total_best)
    actions = spec("toposcope_sim_actions_total").family()
    for (kind, result), count in sorted(cluster.action_counts().items()):
        actions.add_metric([kind, result], float(count))
    yield from nonempty(
        [clock, nodes, info, throughput, best, efficiency, slowdown, progress, states, overall]
    )
    yield actions


def render_truth(cluster: SimCluster) -> bytes:
    """``/truth/metrics`` in the Prometheus text format."""
    return render_families(truth_families(cluster))
