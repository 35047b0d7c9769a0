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
