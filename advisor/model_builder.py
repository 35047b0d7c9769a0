"""From loader results to the advisor's model (:func:`build_model`).

Which node a series belongs to is the core's rule (:class:`toposcope.identity.node.NodeNamer`,
shared with the Dash app): the ``node`` label when present, else the exporter's reported
hostname joined from ``toposcope_exporter_build_info`` by ``(job, instance)``, else the
``instance`` label; ``node_label`` forces one label instead.

Samples arrive query by query, so each NUMA node, GPU and workload is gathered as a *draft*:
the keyword arguments of its frozen class (:class:`~toposcope.advisor.model.NumaNodeState`,
:class:`~toposcope.advisor.model.GpuState`, :class:`~toposcope.advisor.model.WorkloadModel`)
filled in sample by sample, then passed to the class once every query was read. The fields
are declared once, in those classes; the tables here say which query fills which field.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from toposcope.advisor.dra_state import read_dra_devices
from toposcope.advisor.fabric_jobs import read_fabric_jobs
from toposcope.advisor.loaders.base import LoadedData
from toposcope.advisor.model import (
    ClusterModel,
    GpuState,
    NodeModel,
    NumaNodeState,
    PendingWorkload,
    WorkloadModel,
)
from toposcope.advisor.nic_state import read_nic_state
from toposcope.cpulist import parse_cpulist
from toposcope.errors import SourceError
from toposcope.identity.node import AUTO, NodeNamer

LOG = logging.getLogger("toposcope.advisor.model")

#: keyword arguments of a frozen model class, gathered sample by sample
Draft = dict[str, Any]
#: how a sample's value becomes a field's value
Reader = Callable[[float], object]


def _is_up(value: float) -> bool:
    return value >= 1


#: queries whose value is one field of a NUMA node: query -> (field, reader)
NUMA_VALUES: dict[str, tuple[str, Reader]] = {
    "cpus-online": ("cpus_online", int),
    "numa-memory-total": ("memory_total_bytes", float),
    "numa-memory-free": ("memory_free_bytes", float),
}
#: queries whose value is one field of a GPU: query -> (field, reader)
GPU_VALUES: dict[str, tuple[str, Reader]] = {
    "gpu-up": ("up", _is_up),
    "gpu-utilization": ("utilization", float),
    "gpu-utilization-max": ("utilization_max", float),
    "gpu-utilization-samples": ("samples", int),
    "gpu-memory-used": ("memory_used_bytes", float),
    "gpu-memory-total": ("memory_total_bytes", float),
}
#: queries whose value is one NUMA node's entry of a workload's mapping: query -> (field, reader)
WORKLOAD_BY_NUMA: dict[str, tuple[str, Reader]] = {
    "workload-cpu": ("cpu_by_numa", float),
    "workload-threads": ("threads_by_numa", int),
    "workload-memory": ("memory_by_numa", float),
}
#: GPU activity queries: query -> (field, whether series add up). Byte rates add up over
#: directions and links; a ratio in several series (its source changed in the window) is
#: their mean.
GPU_ACTIVITY: dict[str, tuple[str, bool]] = {
    "gpu-pcie-rate": ("pcie_bytes_per_second", True),
    "gpu-nvlink-rate": ("nvlink_bytes_per_second", True),
    "gpu-sm-active": ("sm_active", False),
    "gpu-sm-occupancy": ("sm_occupancy", False),
    "gpu-tensor-active": ("tensor_active", False),
    "gpu-dram-active": ("dram_active", False),
}
#: a workload's activity per GPU it holds: query -> (field, whether series add up)
WORKLOAD_ACTIVITY: dict[str, tuple[str, bool]] = {
    "workload-gpu-pcie-rate": ("gpu_pcie_bytes_per_second", True),
    "workload-gpu-nvlink-rate": ("gpu_nvlink_bytes_per_second", True),
    "workload-gpu-sm-active": ("gpu_sm_active", False),
    "workload-gpu-sm-share": ("gpu_sm_share", False),
}
#: labels of ``toposcope_workload_info`` copied to the workload's fields of the same name
WORKLOAD_IDENTITY = ("pid", "comm", "cgroup", "pod", "namespace", "container")


#: PCIe byte-rate queries whose smaller direction is kept too: query -> field
EACH_WAY: dict[str, str] = {
    "gpu-pcie-rate": "pcie_each_way_bytes_per_second",
    "workload-gpu-pcie-rate": "gpu_pcie_each_way_bytes_per_second",
}


def _each_way(by_direction: Mapping[str, float]) -> float | None:
    """The smaller of the ``tx`` and ``rx`` rates (``None`` unless both are there)."""
    if "tx" not in by_direction or "rx" not in by_direction:
        return None
    return min(by_direction["tx"], by_direction["rx"])


def _combined(values: list[float], add: bool) -> float:
    """Several series' values of one quantity as one: their sum, or their mean."""
    return sum(values) if add else sum(values) / len(values)


def _int(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        return None


class _Builder:
    """Gathers the drafts of every node's NUMA nodes and GPUs, its links, and workloads."""

    def __init__(self, data: LoadedData, node_label: str) -> None:
        self.data = data
        self.namer = NodeNamer((s.labels for s in data.samples("build-info")), node_label)
        self.numa: dict[str, dict[int, Draft]] = defaultdict(dict)
        self.gpus: dict[str, dict[int, Draft]] = defaultdict(dict)
        self.links: dict[str, dict[tuple[int, int], str]] = defaultdict(dict)
        self.workloads: dict[tuple[str, str], Draft] = {}

    def numa_draft(self, labels: Mapping[str, str]) -> Draft | None:
        numa_id = _int(labels.get("numa_node"))
        if numa_id is None:
            return None
        return self.numa[self.namer(labels)].setdefault(numa_id, {})

    def gpu_draft(self, labels: Mapping[str, str]) -> Draft | None:
        index = _int(labels.get("gpu"))
        if index is None:
            return None
        return self.gpus[self.namer(labels)].setdefault(index, {})

    def workload_draft(self, labels: Mapping[str, str]) -> Draft | None:
        name = labels.get("workload")
        if not name:
            return None
        node = self.namer(labels)
        return self.workloads.setdefault((node, name), {"name": name, "node": node})

    def topology(self) -> None:
        for s in self.data.samples("numa-nodes"):
            draft = self.numa_draft(s.labels)
            if draft is None:
                continue
            draft["package"] = _int(s.labels.get("package"))
            try:
                draft["cpus"] = parse_cpulist(s.labels.get("cpus", ""))
            except (ValueError, SourceError):
                LOG.debug("unusable cpulist %r", s.labels.get("cpus"))
        for query, (name, read) in NUMA_VALUES.items():
            for s in self.data.samples(query):
                if (draft := self.numa_draft(s.labels)) is not None:
                    draft[name] = read(s.value)
        for s in self.data.samples("numa-distance"):
            peer = _int(s.labels.get("peer_node"))
            if (draft := self.numa_draft(s.labels)) is not None and peer is not None:
                draft.setdefault("distances", {})[peer] = int(s.value)

    def gpu_state(self) -> None:
        for s in self.data.samples("gpu-locality"):
            if (draft := self.gpu_draft(s.labels)) is not None:
                draft["numa_node"] = _int(s.labels.get("numa_node"))
                draft["pci_bus_id"] = s.labels.get("pci_bus_id", "")
        for s in self.data.samples("gpu-info"):
            if s.labels.get("GPU_I_ID"):
                continue  # MIG instances share their parent's locality; placement is per GPU
            if (draft := self.gpu_draft(s.labels)) is None:
                continue
            if draft.get("numa_node") is None:  # sysfs wins over NVML, as in the exporter
                draft["numa_node"] = _int(s.labels.get("numa_node"))
            draft["uuid"] = s.labels.get("UUID", "")
            draft["model"] = s.labels.get("modelName", "")
            draft["pci_bus_id"] = s.labels.get("pci_bus_id", "") or draft.get("pci_bus_id", "")
        for query, (name, read) in GPU_VALUES.items():
            for s in self.data.samples(query):
                if (draft := self.gpu_draft(s.labels)) is not None:
                    draft[name] = read(s.value)
        for series in self.data.series("gpu-utilization-history"):
            if (draft := self.gpu_draft(series.labels)) is not None and series.points:
                draft["covered_seconds"] = series.points[-1][0] - series.points[0][0]
                draft["utilization_last"] = series.points[-1][1]
        for s in self.data.samples("gpu-clock-events"):
            reason = s.labels.get("reason", "")
            if (draft := self.gpu_draft(s.labels)) is not None and reason:
                draft.setdefault("clock_events", {})[reason] = s.value
        for s in self.data.samples("slurm-gres-match"):
            gres_field = s.labels.get("field", "")
            if (draft := self.gpu_draft(s.labels)) is not None and gres_field:
                draft.setdefault("gres_match", {})[gres_field] = s.value >= 0.5
        for s in self.data.samples("slurm-gres-expected"):
            if (draft := self.gpu_draft(s.labels)) is not None:
                draft["gres_line"] = s.labels.get("line", "")
        self.pcie_links()
        for s in self.data.samples("gpu-links"):
            a, b = _int(s.labels.get("gpu")), _int(s.labels.get("peer_gpu"))
            if a is not None and b is not None and a != b:
                self.links[self.namer(s.labels)][(a, b)] = s.labels.get("link", "")

    def pcie_links(self) -> None:
        """Each GPU's PCIe link: the most speed it can do (GT/s), and the widest its link
        ran now or over the window (the current width; the maximum where none).
        """
        widths: dict[tuple[str, int], dict[str, int]] = defaultdict(dict)
        for s in self.data.samples("gpu-pcie-speed"):
            draft = self.gpu_draft(s.labels)
            if draft is not None and s.labels.get("state") == "max" and s.value > 0:
                draft["pcie_gts"] = s.value / 1e9
        for s in self.data.samples("gpu-pcie-width"):
            index, state = _int(s.labels.get("gpu")), s.labels.get("state", "")
            if index is not None and state in ("max", "current") and 0 < s.value <= 64:
                widths[(self.namer(s.labels), index)][state] = int(s.value)
        for (node, index), found in widths.items():
            lanes = found.get("current", found.get("max"))
            self.gpus[node].setdefault(index, {})["pcie_lanes"] = lanes

    def _usable(self, query: str) -> bool:
        """Whether ``query``'s answer can fill a per-second figure: not counter totals
        (a scrape answers a rate query with each counter's total since it started).
        """
        result = self.data.results.get(query)
        return result is not None and not result.cumulative

    def activity_gpu(
        self, labels: Mapping[str, str], known: Mapping[str, tuple[str, int]]
    ) -> tuple[str, int] | None:
        """The known GPU an activity series is about: by ``UUID`` when it has one, else by
        ``Hostname`` and ``pci_bus_id`` (dcgm-exporter's join keys) when it has both, else
        by node and ``gpu`` index; ``None`` for a MIG instance's series or a GPU no topology
        series named.
        """
        if labels.get("GPU_I_ID"):
            return None
        if uuid := labels.get("UUID", ""):
            return known.get(uuid)
        host, bus = labels.get("Hostname", ""), labels.get("pci_bus_id", "").lower()
        if host and bus:
            return known.get(f"{host}/{bus}")
        node, index = self.namer(labels), _int(labels.get("gpu"))
        if index is not None and index in self.gpus.get(node, {}):
            return node, index
        return None

    def gpu_activity(self) -> None:
        """Traffic and activity onto the GPUs the topology series named (series of other
        GPUs, such as dcgm-exporter's for a GPU outside the run's selector, are left out).
        """
        known: dict[str, tuple[str, int]] = {}
        for node, drafts in self.gpus.items():
            for index, draft in drafts.items():
                if draft.get("uuid"):
                    known[draft["uuid"]] = (node, index)
                if draft.get("pci_bus_id"):
                    known[f"{node}/{str(draft['pci_bus_id']).lower()}"] = (node, index)
        for query, (name, add) in GPU_ACTIVITY.items():
            if not self._usable(query):
                continue
            values: dict[tuple[str, int], list[float]] = defaultdict(list)
            ways: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
            for s in self.data.samples(query):
                if (gpu := self.activity_gpu(s.labels, known)) is not None:
                    values[gpu].append(s.value)
                    way = s.labels.get("direction", "")
                    ways[gpu][way] = ways[gpu].get(way, 0.0) + s.value
            for (node, index), found in values.items():
                self.gpus[node][index][name] = _combined(found, add)
                if query in EACH_WAY and (each := _each_way(ways[(node, index)])) is not None:
                    self.gpus[node][index][EACH_WAY[query]] = each

    def workload_activity(self) -> None:
        """Each workload's GPUs' traffic and activity, and whether another holds them too."""
        for query, (name, add) in WORKLOAD_ACTIVITY.items():
            if not self._usable(query):
                continue
            values: dict[tuple[str, str, int], list[float]] = defaultdict(list)
            ways: dict[tuple[str, str, int], dict[str, float]] = defaultdict(dict)
            for s in self.data.samples(query):
                gpu = _int(s.labels.get("gpu"))
                if (draft := self.workload_draft(s.labels)) is None or gpu is None:
                    continue
                key = (draft["node"], draft["name"], gpu)
                values[key].append(s.value)
                way = s.labels.get("direction", "")
                ways[key][way] = ways[key].get(way, 0.0) + s.value
                if s.labels.get("shared") == "true":
                    draft["gpus_shared"] = True
            for (node, workload, gpu), found in values.items():
                draft = self.workloads[(node, workload)]
                draft.setdefault(name, {})[gpu] = _combined(found, add)
                each = _each_way(ways[(node, workload, gpu)])
                if query in EACH_WAY and each is not None:
                    draft.setdefault(EACH_WAY[query], {})[gpu] = each

    def workload_state(self) -> None:
        for s in self.data.samples("workload-info"):
            if (draft := self.workload_draft(s.labels)) is not None:
                for key in WORKLOAD_IDENTITY:
                    draft[key] = s.labels.get(key, "")
        for query, (name, read) in WORKLOAD_BY_NUMA.items():
            for s in self.data.samples(query):
                numa_id = _int(s.labels.get("numa_node"))
                if (draft := self.workload_draft(s.labels)) is not None and numa_id is not None:
                    draft.setdefault(name, {})[numa_id] = read(s.value)
        for s in self.data.samples("workload-locality"):
            resource = s.labels.get("resource", "")
            if (draft := self.workload_draft(s.labels)) is not None and resource:
                draft.setdefault("locality", {})[resource] = s.value
        for s in self.data.samples("workload-gpus"):
            gpu = _int(s.labels.get("gpu"))
            if (draft := self.workload_draft(s.labels)) is not None and gpu is not None:
                draft.setdefault("gpus", set()).add(gpu)
        for s in self.data.samples("workload-gpu-memory"):
            gpu = _int(s.labels.get("gpu"))
            if (draft := self.workload_draft(s.labels)) is not None and gpu is not None:
                draft.setdefault("gpus", set()).add(gpu)
                draft.setdefault("gpu_memory_bytes", {})[gpu] = s.value

    def workload_memory_traffic(self) -> None:
        """Each workload's memory traffic per second by locality (``local``, ``remote``),
        summed over the NUMA nodes its threads ran on.
        """
        if not self._usable("workload-memory-traffic"):
            return
        for s in self.data.samples("workload-memory-traffic"):
            where = s.labels.get("locality", "")
            if (draft := self.workload_draft(s.labels)) is not None and where:
                found = draft.setdefault("memory_bytes_per_second", {})
                found[where] = found.get(where, 0.0) + max(0.0, s.value)

    def time_left(self) -> None:
        """Each job's time left, from the scheduler's series, onto the job's workload on
        every node it runs on (the series names the job, not a node; the shortest wins).
        """
        left: dict[str, float] = {}
        for s in self.data.samples("workload-time-left"):
            name = s.labels.get("workload", "")
            if name:
                left[name] = min(s.value, left.get(name, s.value))
        for (_, name), draft in self.workloads.items():
            if name in left:
                draft["time_left_seconds"] = max(0.0, left[name])

    def node_models(self) -> dict[str, NodeModel]:
        names = set(self.numa) | set(self.gpus) | set(self.links)
        names |= {node for node, _ in self.workloads}
        nodes = {}
        for name in sorted(names):
            numa_states = tuple(
                NumaNodeState(id=numa_id, **draft)
                for numa_id, draft in sorted(self.numa.get(name, {}).items())
            )
            gpu_states = tuple(
                GpuState(index=index, **draft)
                for index, draft in sorted(self.gpus.get(name, {}).items())
            )
            nodes[name] = NodeModel(name, numa_states, gpu_states, dict(self.links.get(name, {})))
        return nodes

    def workload_models(self) -> tuple[WorkloadModel, ...]:
        result = self.data.results.get("workload-cpu")
        cumulative = bool(result and result.cumulative)
        return tuple(
            WorkloadModel(
                **{**draft, "gpus": tuple(sorted(draft.get("gpus", ())))},
                cpu_cumulative=cumulative,
            )
            for _, draft in sorted(self.workloads.items())
        )


def build_model(
    data: LoadedData,
    *,
    node_label: str = AUTO,
    pending: Iterable[PendingWorkload] = (),
) -> ClusterModel:
    """Turn loader results into a :class:`~toposcope.advisor.model.ClusterModel`.

    Samples with unusable labels (a ``numa_node`` that is not a number) are skipped; a node
    appears as soon as any topology, GPU or workload series names it.
    """
    builder = _Builder(data, node_label)
    builder.topology()
    builder.gpu_state()
    builder.gpu_activity()
    builder.workload_state()
    builder.workload_activity()
    builder.workload_memory_traffic()
    builder.time_left()
    return ClusterModel(
        nodes=builder.node_models(),
        workloads=builder.workload_models(),
        window=data.window.text,
        window_seconds=data.window.seconds,
        source=data.source,
        present=data.present_metrics(),
        dra_devices=read_dra_devices(data, builder.namer),
        nics=read_nic_state(data, builder.namer),
        fabric_jobs=read_fabric_jobs(data, builder.namer),
        notes=data.notes,
        pending=tuple(pending),
        dropped_series=data.dropped_series,
        gpu_activity_source=_activity_source(data),
    )


def _activity_source(data: LoadedData) -> str:
    """``dcgm`` when the GPU activity answers came from dcgm-exporter's fields."""
    dcgm = any(
        result.metric.startswith("DCGM_")
        for query, result in data.results.items()
        if query in GPU_ACTIVITY
    )
    return "dcgm" if dcgm else "toposcope"
