"""The network fabric's metric families: GPU-to-NIC locality per host and workload, and how
far every multi-node job is spread over the fabric.

Two parts publish them:

- the node exporter (``part="exporter"``): which RDMA NIC is nearest to each GPU
  (``toposcope_gpu_nic_link_info``), per workload which NICs its GPUs are nearest to and which
  it uses (NCCL's ``NCCL_IB_HCA`` in its processes' environment, or its cgroup's RDMA
  resource accounting), and whether those are near or far ones;
- a cluster-level exporter that knows the fabric model and where jobs run
  (``part="fabric"``; ``toposcope slurm exporter --fabric-...``): the switches and nodes of
  the fabric, and per multi-node running job its nodes, GPUs, the fabric domains (leaf,
  spine, core, block) it spans against the fewest its size needs, the highest level its
  traffic crosses and whether its ranks are rail-aligned.

The NIC is the ``nic`` label (the topology model's NIC name, the same as the ``device`` label
of ``toposcope_nic_port_*`` for an RDMA device): ``device`` is dcgm-exporter's ``nvidiaN`` on
GPU series. Per-job series carry ``scheduler``, ``partition`` and ``workload``; ``workload`` is
the name the node exporters give the job's processes (``slurm-job-<id>``), so the two join on
it. :data:`LINK_TIERS` are ordered from nearest to farthest; :data:`FAR_TIERS` cross the CPU.
"""

from __future__ import annotations

from toposcope.catalogue.exporter_metrics import WORKLOAD_WHO
from toposcope.catalogue.model import MetricSpec, row

#: GPU-to-NIC PCIe tiers, nearest first (nvidia-smi topo -m's words)
LINK_TIERS: tuple[str, ...] = ("PIX", "PXB", "PHB", "NODE", "SYS")
#: tiers whose traffic leaves the PCIe host bridge (NODE) or the socket (SYS)
FAR_TIERS: frozenset[str] = frozenset({"NODE", "SYS"})
#: the ``source`` values of ``toposcope_workload_nic_used_info``
NIC_USE_SOURCES: tuple[str, ...] = ("nccl_env", "rdma_cgroup", "uverbs")
#: the labels that name a multi-node job on every per-job series
JOB_KEYS: tuple[str, ...] = ("scheduler", "partition", "workload")

_FABRIC = "fabric"

#: per host and per workload: which NICs are near which GPUs, and which a workload uses
NODE_FABRIC_SPECS: tuple[MetricSpec, ...] = (
    row(
        "toposcope_gpu_nic_link_info",
        "info",
        ["gpu", "pci_bus_id", "nic", "link", "nearest"],
        "How a GPU reaches an RDMA NIC (InfiniBand, RoCE) over PCIe, as nvidia-smi topo -m "
        "says it (PIX, PXB, PHB, NODE, SYS); nearest=true when no RDMA NIC of the host is "
        "nearer to that GPU, value 1.",
    ),
    row(
        "toposcope_workload_nic_nearest_gpus",
        "gauge",
        ["workload", *WORKLOAD_WHO, "nic", "link"],
        "How many of a workload's GPUs have this RDMA NIC as their nearest one; link is that "
        "tier (PIX, PXB, PHB, NODE, SYS).",
    ),
    row(
        "toposcope_workload_nic_far_gpus",
        "gauge",
        ["workload", *WORKLOAD_WHO],
        "A workload's GPUs whose nearest RDMA NIC is NODE or SYS away: their network traffic "
        "crosses the CPU's host bridge or the socket link (0 when every GPU has a NIC close).",
    ),
    row(
        "toposcope_workload_nic_used_info",
        "info",
        ["workload", *WORKLOAD_WHO, "nic", "source", "link", "near"],
        "An RDMA NIC a workload uses: for each of its ranks' GPUs the nearest NIC that source "
        "allows (NCCL picks the nearest NIC it may use): nccl_env (NCCL_IB_HCA in its "
        "processes' environment), rdma_cgroup (RDMA handles charged to its cgroup) or uverbs "
        "(the /dev/infiniband/uverbsN its processes hold open). link is "
        "that tier (the farthest where several GPUs use it; empty without GPUs); near=false "
        "when a nearer NIC exists that the source leaves out, value 1.",
    ),
)

#: the fabric model and the spread of each multi-node job, published once per cluster
JOB_FABRIC_SPECS: tuple[MetricSpec, ...] = (
    row(
        "toposcope_fabric_switch_info",
        "info",
        ["switch", "level", "parent"],
        "A switch of the fabric model, its level (leaf, spine, core, level N) and one parent "
        "switch per series (empty for a top switch), value 1.",
        part=_FABRIC,
    ),
    row(
        "toposcope_fabric_node_info",
        "info",
        ["node", "nic", "leaf", "block"],
        "Where a node hangs in the fabric: one series per NIC port and the leaf switch it "
        "reaches (nic empty where the source lists no ports), and its block (empty outside "
        "blocks), value 1.",
        part=_FABRIC,
    ),
    row(
        "toposcope_job_fabric_node_gpus",
        "gauge",
        [*JOB_KEYS, "node"],
        "GPUs a running multi-node job holds on each of its nodes.",
        part=_FABRIC,
    ),
    row(
        "toposcope_job_fabric_nodes",
        "gauge",
        list(JOB_KEYS),
        "Nodes a running multi-node job runs on.",
        part=_FABRIC,
    ),
    row(
        "toposcope_job_fabric_gpus",
        "gauge",
        list(JOB_KEYS),
        "GPUs a running multi-node job holds on all its nodes.",
        part=_FABRIC,
    ),
    row(
        "toposcope_job_fabric_domains",
        "gauge",
        [*JOB_KEYS, "level"],
        "Fabric domains a multi-node job's nodes span at a level (leaf, spine, core, level N, "
        "block). A domain is the set of switches of that level above a node, so the leaves "
        "of one rail-optimised unit count as one.",
        part=_FABRIC,
    ),
    row(
        "toposcope_job_fabric_domains_needed",
        "gauge",
        [*JOB_KEYS, "level"],
        "The fewest domains of a level whose nodes could hold the job's node count (the "
        "largest domains first); more in toposcope_job_fabric_domains means it is spread.",
        part=_FABRIC,
    ),
    row(
        "toposcope_job_fabric_top_level",
        "gauge",
        list(JOB_KEYS),
        "The highest switch level a multi-node job's traffic must cross: 0 when its nodes "
        "share a leaf domain, 1 a spine, 2 a core; the number of levels when no switch joins "
        "its nodes.",
        part=_FABRIC,
    ),
    row(
        "toposcope_job_fabric_top_level_needed",
        "gauge",
        list(JOB_KEYS),
        "The lowest level under which one domain has enough nodes for the job: what "
        "toposcope_job_fabric_top_level could have been.",
        part=_FABRIC,
    ),
    row(
        "toposcope_job_fabric_rail_aligned",
        "gauge",
        list(JOB_KEYS),
        "1 when every node of a multi-node job holds the same GPU indices, so that local "
        "rank k sits on rail k on every node and rank-to-rank traffic stays on its rail's "
        "leaves; 0 when they differ. Absent when the GPU indices are not known.",
        part=_FABRIC,
    ),
)
