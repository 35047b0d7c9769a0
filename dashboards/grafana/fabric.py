"""Network fabric: how far every multi-node job is spread over the fabric against the fewest
domains its size needs, the GPUs held under each leaf and in each block, the jobs' network
traffic, and the ports and NICs under them.

The per-job series (``toposcope_job_fabric_*``) and the fabric's nodes with their leaves and
blocks (``toposcope_fabric_node_info``) come from the cluster-level exporter that knows the
fabric (``toposcope slurm exporter`` with a fabric); GPUs and NICs from the node exporters,
tied to fabric nodes by their exporter's ``hostname``. The Dash app's fabric page draws the
same as a tree; Grafana shows it as tables and time series.
"""

from __future__ import annotations

from typing import Any

from toposcope.dashboards.grafana.common import (
    BUILD_INFO,
    CLUSTER_LABEL,
    INSTANCE,
    any_of_variable,
    dashboard,
    host_variables,
    instant_table,
    merge,
    organize,
    query,
    table_panel,
    timeseries_panel,
    to_json,
)
from toposcope.dashboards.grafana.panels import PanelRow, value_stat, with_rows, with_variables

UID = "toposcope-fabric"
TITLE = "toposcope / Network fabric"

#: Selects the chosen partitions' jobs.
PARTITIONS = 'partition=~"$partition"'
#: The labels that name a multi-node job.
JOB = "scheduler, partition, workload"
#: Each job's network traffic (a recording rule of alerts/fabric.rules.yml), per direction.
TRAFFIC = "workload_direction:toposcope_job_fabric_port_bytes:rate5m"
#: Unhealthy RDMA ports per node (a recording rule of alerts/fabric.rules.yml).
UNHEALTHY = "node:toposcope_nic_ports_unhealthy:count"
#: The nodes of the chosen partitions' running multi-node jobs, one series per node.
JOB_NODES = f"group by (node) (toposcope_job_fabric_node_gpus{{{PARTITIONS}}})"


def _per_job(name: str, extra: str = "") -> str:
    """Each chosen job's ``toposcope_job_fabric_<name>`` (``extra``: more matchers)."""
    matchers = PARTITIONS + (f", {extra}" if extra else "")
    return f"max by ({JOB}) (toposcope_job_fabric_{name}{{{matchers}}})"


def _per_node(gpus: str) -> str:
    """``gpus`` (one series per GPU and target) counted per fabric node (``node`` = the
    exporter's hostname)."""
    hosted = (
        f"count by ({CLUSTER_LABEL}, job, instance, gpu) ({gpus})"
        f" * on ({CLUSTER_LABEL}, job, instance) group_left (hostname) {BUILD_INFO}"
    )
    return f'label_join(count by (hostname) ({hosted}), "node", ",", "hostname")'


#: GPUs held (by some workload) and GPUs up, per fabric node.
HELD = _per_node(f"toposcope_workload_gpu_info{{{INSTANCE}}}")
UP = _per_node(f"toposcope_gpu_up{{{INSTANCE}}} == 1")


def _under(label: str, gpus: str, extra: str = "") -> str:
    """``gpus`` per node summed per ``label`` of the fabric's nodes (``leaf`` or ``block``)."""
    matchers = f"{{{extra}}}" if extra else ""
    nodes = f"group by (node, {label}) (toposcope_fabric_node_info{matchers})"
    return f"sum by ({label}) ({nodes} * on (node) group_left () {gpus})"


def _now_row() -> PanelRow:
    """Single numbers: multi-node jobs, those spread or crossing beyond need, their GPUs."""
    spread = (
        f"toposcope_job_fabric_domains{{{PARTITIONS}}}"
        f" > toposcope_job_fabric_domains_needed{{{PARTITIONS}}}"
    )
    higher = (
        f"toposcope_job_fabric_top_level{{{PARTITIONS}}}"
        f" > toposcope_job_fabric_top_level_needed{{{PARTITIONS}}}"
    )
    return PanelRow(
        "Now",
        (
            value_stat(
                "Multi-node jobs",
                "Running jobs on more than one node in the chosen partitions.",
                f"count({_per_job('nodes')}) or vector(0)",
            ),
            value_stat(
                "Spread beyond need",
                "Multi-node jobs whose nodes span more leaf, spine, core or block domains than "
                "the fewest that could hold them (ToposcopeJobSpreadBeyondNeed after 30 min).",
                f"count(count by ({JOB}) ({spread})) or vector(0)",
            ),
            value_stat(
                "Crossing higher than needed",
                "Multi-node jobs whose traffic must cross a higher switch level than their "
                "node count needs.",
                f"count({higher}) or vector(0)",
            ),
            value_stat(
                "Not rail-aligned",
                "Multi-node jobs whose nodes hold different GPU indices, so local rank k is "
                "not on rail k on every node.",
                f"count(toposcope_job_fabric_rail_aligned{{{PARTITIONS}}} == 0) or vector(0)",
            ),
            value_stat(
                "GPUs in multi-node jobs",
                "GPUs the chosen partitions' multi-node jobs hold.",
                f"sum({_per_job('gpus')}) or vector(0)",
            ),
            value_stat(
                "Unhealthy ports under jobs",
                "RDMA ports down or with link errors in the last 10 minutes on nodes of "
                "running multi-node jobs (ToposcopeJobFabricPortUnhealthy).",
                f"sum({UNHEALTHY} * on (node) group_left () {JOB_NODES}) or vector(0)",
            ),
        ),
    )


def _jobs_row() -> PanelRow:
    """The jobs with their spread against need, and the excess over time."""
    columns = {
        "Value #A": "nodes",
        "Value #B": "GPUs",
        "Value #C": "leaf domains",
        "Value #D": "leaf domains needed",
        "Value #E": "block domains",
        "Value #F": "block domains needed",
        "Value #G": "top level crossed",
        "Value #H": "lowest it could cross",
        "Value #I": "rail-aligned",
    }
    return PanelRow(
        "Multi-node jobs",
        (
            table_panel(
                "Multi-node jobs and their spread",
                "Per running multi-node job: nodes, GPUs, the leaf and block domains its nodes "
                "span against the fewest its node count needs, the highest switch level its "
                "traffic crosses (0 leaf, 1 spine, 2 core) against the lowest it could, and "
                "whether it is rail-aligned (1).",
                [
                    instant_table(_per_job("nodes")),
                    instant_table(_per_job("gpus")),
                    instant_table(_per_job("domains", 'level="leaf"')),
                    instant_table(_per_job("domains_needed", 'level="leaf"')),
                    instant_table(_per_job("domains", 'level="block"')),
                    instant_table(_per_job("domains_needed", 'level="block"')),
                    instant_table(_per_job("top_level")),
                    instant_table(_per_job("top_level_needed")),
                    instant_table(_per_job("rail_aligned")),
                ],
                width=24,
                transformations=[
                    merge(),
                    organize(order=("workload", "partition", *columns), rename=columns),
                ],
            ),
            timeseries_panel(
                "Domains spanned beyond need",
                "Per job and level: domains its nodes span minus the fewest that could hold "
                "them (0 = placed as tight as its size allows).",
                [
                    query(
                        f"toposcope_job_fabric_domains{{{PARTITIONS}}}"
                        f" - toposcope_job_fabric_domains_needed{{{PARTITIONS}}}",
                        "{{workload}} {{level}}",
                    )
                ],
                "none",
                min_value=0,
            ),
            timeseries_panel(
                "Network traffic of multi-node jobs",
                "Bytes per second through the RDMA ports of each job's nodes (all traffic of "
                "those ports while it runs), sent (tx) and received (rx).",
                [
                    query(
                        f"sum by (workload, direction) ({TRAFFIC}{{{PARTITIONS}}})",
                        "{{workload}} {{direction}}",
                    )
                ],
                "Bps",
                min_value=0,
            ),
        ),
    )


def _occupancy_row() -> PanelRow:
    """GPUs held under each leaf and in each block, and NIC-far GPUs of multi-node jobs."""
    by_leaf = {"Value #A": "GPUs held", "Value #B": "GPUs up"}
    return PanelRow(
        "Switches and blocks",
        (
            table_panel(
                "GPUs held under each leaf",
                "Per leaf switch of the fabric: GPUs held by some workload and GPUs up on the "
                "nodes under it (a node of a rail-optimised unit is under each of its rails' "
                "leaves).",
                [instant_table(_under("leaf", HELD)), instant_table(_under("leaf", UP))],
                transformations=[
                    merge(),
                    organize(order=("leaf", *by_leaf), rename=by_leaf),
                ],
            ),
            table_panel(
                "GPUs held in each block",
                "Per block (Slurm topology/block, an NVLink domain): GPUs held and GPUs up on "
                "its nodes.",
                [
                    instant_table(_under("block", HELD, 'block!=""')),
                    instant_table(_under("block", UP, 'block!=""')),
                ],
                transformations=[
                    merge(),
                    organize(order=("block", *by_leaf), rename=by_leaf),
                ],
            ),
            timeseries_panel(
                "NIC-far GPUs of multi-node jobs",
                "GPUs of multi-node jobs whose nearest RDMA NIC is NODE or SYS away: their "
                "traffic crosses the host bridge or the socket link (ToposcopeJobNicFar).",
                [
                    query(
                        f"sum by (workload) (toposcope_workload_nic_far_gpus{{{INSTANCE}}}"
                        " * on (workload) group_left ()"
                        f" group by (workload) (toposcope_job_fabric_nodes{{{PARTITIONS}}}))",
                        "{{workload}}",
                    )
                ],
                "none",
                width=24,
                min_value=0,
            ),
        ),
    )


def build() -> dict[str, Any]:
    """The network fabric dashboard's JSON model."""
    builder = dashboard(
        UID,
        TITLE,
        "How far each multi-node job is spread over the network fabric against what its size "
        "needs, GPUs held under each leaf and in each block, the jobs' network traffic, and "
        "the ports and NICs under them.",
    )
    partition = any_of_variable(
        "partition",
        "Partition",
        "label_values(toposcope_job_fabric_nodes, partition)",
        "Scheduler partitions of the running multi-node jobs.",
    )
    builder = with_variables(builder, [*host_variables(multi=True), partition])
    return to_json(with_rows(builder, [_now_row(), _jobs_row(), _occupancy_row()]))
