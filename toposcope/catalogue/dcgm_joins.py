"""How toposcope's GPU series join dcgm-exporter's: the label contract and the PromQL joins.

Most GPU clusters already run dcgm-exporter; toposcope adds locality and health to it
rather than replacing it. Every GPU series carries dcgm-exporter's join keys
(:data:`~toposcope.catalogue.gpu_metrics.GPU_KEYS`) with the same values in the same format,
so its ``DCGM_FI_*`` series join toposcope's without relabelling. :data:`DCGM_JOINS` are the
joins ``docs/metrics.md`` shows; the integration tests run these very expressions in a real
Prometheus against series shaped like dcgm-exporter's documented output.
"""

from __future__ import annotations

from dataclasses import dataclass

from toposcope.catalogue.gpu_metrics import GPU_KEYS


@dataclass(frozen=True)
class Join:
    """One documented join: what it answers, its PromQL and how to read it."""

    title: str
    promql: str
    note: str


#: The joins users write between dcgm-exporter's series and toposcope's.
DCGM_JOINS: tuple[Join, ...] = (
    Join(
        "GPU utilisation from dcgm-exporter with its NUMA locality from toposcope",
        "DCGM_FI_DEV_GPU_UTIL\n"
        "  * on (UUID, GPU_I_ID) group_left (numa_node, cpu_affinity)\n"
        "  toposcope_gpu_info",
        "`UUID` is unique across the fleet, so the two jobs' different `job` and `instance` "
        "labels do not matter; `GPU_I_ID` (empty for a whole GPU) keeps a MIG instance's row "
        "apart from its parent's.",
    ),
    Join(
        "The same join by node and PCI address",
        "DCGM_FI_DEV_GPU_UTIL\n"
        "  * on (Hostname, pci_bus_id) group_left (numa_node)\n"
        '  toposcope_gpu_info{GPU_I_ID=""}',
        "`pci_bus_id` is NVML's `00000000:07:00.0` on both sides and `Hostname` the node "
        "name (`--hostname`, like dcgm-exporter's `NODE_NAME`).",
    ),
    Join(
        "GPU utilisation per NUMA node of each host",
        "avg by (Hostname, numa_node) (\n"
        "  DCGM_FI_DEV_GPU_UTIL\n"
        '  * on (UUID) group_left (numa_node) toposcope_gpu_info{GPU_I_ID=""}\n'
        ")",
        "Shows whether the busy GPUs crowd one socket.",
    ),
    Join(
        "Pods on a GPU that waits for a reset to apply a row remap",
        'DCGM_FI_DEV_GPU_UTIL{pod!=""}\n  and on (UUID) (toposcope_gpu_row_remap_pending == 1)',
        "Value series join directly: toposcope's health signals carry the same keys as "
        "dcgm-exporter's per-pod series.",
    ),
)


@dataclass(frozen=True)
class Equivalent:
    """A dcgm-exporter field and the PromQL over toposcope's series giving the same quantity
    in the same unit; ``metric`` is the catalogue family it reads.
    """

    dcgm: str
    promql: str
    metric: str


#: dcgm-exporter's throughput and activity fields (``DCGM_FI_PROF_*``) and toposcope's
#: equivalents. dcgm-exporter's ``*_BYTES`` fields are rates in bytes per second despite
#: their names; toposcope publishes counters, so a ``rate()`` gives the same figure.
DCGM_EQUIVALENTS: tuple[Equivalent, ...] = (
    Equivalent(
        "DCGM_FI_PROF_SM_ACTIVE", "toposcope_gpu_sm_active_ratio", "toposcope_gpu_sm_active_ratio"
    ),
    Equivalent(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "toposcope_gpu_sm_occupancy_ratio",
        "toposcope_gpu_sm_occupancy_ratio",
    ),
    Equivalent(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "toposcope_gpu_tensor_active_ratio",
        "toposcope_gpu_tensor_active_ratio",
    ),
    Equivalent(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "toposcope_gpu_dram_active_ratio",
        "toposcope_gpu_dram_active_ratio",
    ),
    Equivalent(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        'rate(toposcope_gpu_pcie_bytes_total{direction="tx"}[1m])',
        "toposcope_gpu_pcie_bytes_total",
    ),
    Equivalent(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        'rate(toposcope_gpu_pcie_bytes_total{direction="rx"}[1m])',
        "toposcope_gpu_pcie_bytes_total",
    ),
    Equivalent(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        'sum without (link) (rate(toposcope_gpu_nvlink_bytes_total{direction="tx"}[1m]))',
        "toposcope_gpu_nvlink_bytes_total",
    ),
    Equivalent(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        'sum without (link) (rate(toposcope_gpu_nvlink_bytes_total{direction="rx"}[1m]))',
        "toposcope_gpu_nvlink_bytes_total",
    ),
    Equivalent(
        "DCGM_FI_PROF_NVLINK_L<n>_TX_BYTES",
        'rate(toposcope_gpu_nvlink_bytes_total{link="<n>",direction="tx"}[1m])',
        "toposcope_gpu_nvlink_bytes_total",
    ),
    Equivalent(
        "DCGM_FI_PROF_NVLINK_L<n>_RX_BYTES",
        'rate(toposcope_gpu_nvlink_bytes_total{link="<n>",direction="rx"}[1m])',
        "toposcope_gpu_nvlink_bytes_total",
    ),
)


def equivalents_markdown() -> list[str]:
    """The ``docs/metrics.md`` section mapping dcgm-exporter's throughput and activity fields."""
    lines = [
        "## dcgm-exporter's throughput and activity fields",
        "",
        "toposcope reads these through NVML, from the best source each GPU supports: GPM "
        "(Hopper and later: every quantity), NVML field values (NVLink and, from driver r550, "
        "PCIe byte counters) or the sampled PCIe throughput (older parts); the `source` label "
        "says which, and `toposcope_gpu_activity_source_info` says `none` where a GPU has no "
        "source for a quantity (which then has no series). The ratios are 0..1 on both sides. "
        "dcgm-exporter's `*_BYTES` fields are rates (bytes per second) despite their names; "
        "toposcope's are counters (`_bytes_total`), so a `rate()` gives the same figure. "
        "`sum without (link)` also covers a GPU whose source gives only the total over its "
        "links (`link` empty). The `toposcope_workload_gpu_*` families of the same names give "
        'each workload its GPUs\' figures, with `shared="true"` where several workloads '
        "hold a GPU.",
        "",
        "| dcgm-exporter field | toposcope PromQL |",
        "|---|---|",
    ]
    lines += [f"| `{e.dcgm}` | `{e.promql}` |" for e in DCGM_EQUIVALENTS]
    return [*lines, ""]


def labels_markdown() -> list[str]:
    """The paragraph of ``docs/metrics.md`` that states the label contract."""
    keys = ", ".join(f"`{key}`" for key in GPU_KEYS)
    return [
        "Identity lives on `_info` series (value 1) and is joined in PromQL. Every GPU series "
        f"carries dcgm-exporter's join keys {keys} with dcgm-exporter's values and formats: "
        "`gpu` is the NVML index, `device` `nvidia<gpu>`, `pci_bus_id` NVML's "
        "`00000000:07:00.0` (the sysfs-side `toposcope_gpu_locality_info` and "
        "`toposcope_pci_device_info` keep sysfs's `0000:07:00.0`), `modelName` NVML's product "
        "name and `Hostname` the node name. `GPU_I_ID`, `GPU_I_PROFILE`, `pod`, `namespace` "
        "and `container` mean what they mean on dcgm-exporter's series.",
        "",
    ]


def joins_markdown() -> list[str]:
    """The ``docs/metrics.md`` section listing :data:`DCGM_JOINS`."""
    lines = [
        "## Joining dcgm-exporter",
        "",
        "Scrape both exporters; no relabelling is needed.",
        "",
    ]
    for join in DCGM_JOINS:
        lines += [f"**{join.title}.** {join.note}", "", "```promql", join.promql, "```", ""]
    return lines
