"""The simulator's ground truth (served at ``/truth/metrics`` by ``toposcope sim``, never
by a node): what the model knows that no exporter could measure.
"""

from __future__ import annotations

from toposcope.catalogue.model import MetricSpec, row

SIM_SPECS: tuple[MetricSpec, ...] = (
    row(
        "toposcope_sim_time_seconds",
        "gauge",
        [],
        "Simulated time since the scenario started.",
        "seconds",
        part="sim",
    ),
    row(
        "toposcope_sim_node_info",
        "info",
        ["node", "template"],
        "A simulated node and the hardware template it was built from, value 1.",
        part="sim",
    ),
    row(
        "toposcope_sim_workload_info",
        "info",
        ["workload", "node", "kind", "state", "link_class"],
        "A simulated workload: its kind, state (pending, running), node and the worst link "
        "class among its GPUs (empty for fewer than two GPUs), value 1.",
        part="sim",
    ),
    row(
        "toposcope_sim_workload_throughput",
        "gauge",
        ["workload", "node"],
        "True throughput of a workload from the performance model, in its own unit per second "
        "(samples for training, requests for inference); 0 while pending or migrating.",
        part="sim",
    ),
    row(
        "toposcope_sim_workload_best_throughput",
        "gauge",
        ["workload", "node"],
        "Best throughput the workload could have: alone on the best allocation of its node's "
        "hardware (of any node's while pending).",
        part="sim",
    ),
    row(
        "toposcope_sim_workload_efficiency_ratio",
        "gauge",
        ["workload", "node"],
        "True throughput over best throughput (1 = as fast as it can be).",
        "ratio",
        part="sim",
    ),
    row(
        "toposcope_sim_workload_slowdown_ratio",
        "gauge",
        ["workload", "node", "factor"],
        "Slowdown of a running workload by model factor (numa, contention, link, "
        "interference, input) and in total (factor=total), 1 = no slowdown.",
        "ratio",
        part="sim",
    ),
    row(
        "toposcope_sim_workload_progress_ratio",
        "gauge",
        ["workload"],
        "Share of a workload's work done, for workloads with a duration.",
        "ratio",
        part="sim",
    ),
    row(
        "toposcope_sim_workloads",
        "gauge",
        ["state"],
        "Simulated workloads by state (pending, running, done).",
        part="sim",
    ),
    row(
        "toposcope_sim_cluster_efficiency_ratio",
        "gauge",
        [],
        "Sum of running workloads' true throughput over the sum of their best throughput.",
        "ratio",
        part="sim",
    ),
    row(
        "toposcope_sim_job_steps_total",
        "counter",
        ["workload"],
        "Steps a running simulated job has done, as its own step counter would publish them "
        "(served on the simulator's /metrics and /jobs/metrics, not with the truth): one step "
        "is 0.25 s of its work at its base rate, each step's time jittered by 10%.",
        part="sim",
    ),
    row(
        "toposcope_sim_actions_total",
        "counter",
        ["kind", "result"],
        "Resource-manager actions the simulator carried out, by kind and result.",
        part="sim",
    ),
)
