"""The PromQL the Dash app sends, built from the metric catalogue.

Metric names come from :mod:`toposcope.catalogue` through :func:`metric`, which fails at
import time for a name the catalogue does not have, so a renamed metric breaks the tests
rather than a page. Every query keeps the ``job``, ``instance`` and ``node`` labels, from
which :mod:`toposcope.dashboards.app.prom_frames` names the node a series belongs to. Per-node
queries take a label selector (:func:`selector`) for that node's scrape target(s).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from toposcope.catalogue import spec
from toposcope.promql.literals import string_literal

#: labels that identify a scrape target (and so a node) in every query answer
TARGET_LABELS = ("job", "instance", "node")
#: range of rate() in the app's queries: four scrapes at Prometheus' default 15 s interval
RATE_WINDOW = "1m"
#: GPU utilization (average over the time range) under which a GPU counts as idle
IDLE_UTILIZATION = 0.05
#: clock event reasons that slow a GPU down (gpu_idle, sync_boost, application clocks do not)
THROTTLE_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")
#: PCI class prefix of network controllers (0x02xx: Ethernet, InfiniBand, ...)
NIC_CLASS_PREFIX = "0x02"


def metric(name: str) -> str:
    """``name`` after checking that the catalogue has it (``KeyError`` otherwise)."""
    return spec(name).name


BUILD_INFO = metric("toposcope_exporter_build_info")
PACKAGE_INFO = metric("toposcope_package_info")
NUMA_INFO = metric("toposcope_numa_node_info")
NUMA_MEM_TOTAL = metric("toposcope_numa_memory_total_bytes")
NUMA_MEM_USED = metric("toposcope_numa_memory_used_bytes")
NUMA_CPU = metric("toposcope_numa_cpu_seconds_total")
CPUS_ONLINE = metric("toposcope_cpus_online")
PCI_INFO = metric("toposcope_pci_device_info")
GPU_LOCALITY = metric("toposcope_gpu_locality_info")
GPU_INFO = metric("toposcope_gpu_info")
GPU_UP = metric("toposcope_gpu_up")
GPU_UTIL = metric("toposcope_gpu_utilization_ratio")
GPU_MEM_USED = metric("toposcope_gpu_memory_used_bytes")
GPU_MEM_TOTAL = metric("toposcope_gpu_memory_total_bytes")
GPU_POWER = metric("toposcope_gpu_power_watts")
GPU_CLOCK_EVENT = metric("toposcope_gpu_clock_event_active")
GPU_LINK = metric("toposcope_gpu_link_info")
WORKLOAD_INFO = metric("toposcope_workload_info")
WORKLOAD_GPU = metric("toposcope_workload_gpu_info")
WORKLOAD_CPU = metric("toposcope_workload_cpu_seconds_total")
WORKLOAD_MEMORY = metric("toposcope_workload_memory_bytes")
WORKLOAD_LOCALITY = metric("toposcope_workload_locality_ratio")

_BY_TARGET = ", ".join(TARGET_LABELS)


def selector(targets: Iterable[tuple[str, str]], extra: Mapping[str, str] | None = None) -> str:
    """Label matchers (without braces) for the scrape targets ``(job, instance)`` of a node.

    One target gives exact matchers; several give anchored regular expressions. ``extra``
    adds exact matchers (``{"workload": "w"}``).
    """
    pairs = sorted(set(targets))
    if not pairs:
        raise ValueError("a node selector needs at least one scrape target")
    if len(pairs) == 1:
        job, instance = pairs[0]
        parts = [f"job={string_literal(job)}", f"instance={string_literal(instance)}"]
    else:
        jobs = "|".join(re.escape(j) for j in sorted({j for j, _ in pairs}))
        instances = "|".join(re.escape(i) for i in sorted({i for _, i in pairs}))
        parts = [f"job=~{string_literal(jobs)}", f"instance=~{string_literal(instances)}"]
    for name, value in sorted((extra or {}).items()):
        parts.append(f"{name}={string_literal(value)}")
    return ", ".join(parts)


def _sel(match: str) -> str:
    return f"{{{match}}}" if match else ""


# -- cluster page ------------------------------------------------------------------------


def gpu_utilization_avg(range_: str) -> str:
    """Each GPU's average utilization over ``range_`` (a PromQL duration)."""
    return f"avg_over_time({GPU_UTIL}[{range_}])"


def gpu_memory_ratio() -> str:
    """Each GPU's framebuffer in use, as a share of its total."""
    return f"{GPU_MEM_USED} / on ({_BY_TARGET}, gpu) ({GPU_MEM_TOTAL} > 0)"


def node_locality() -> str:
    """Per node: the mean locality ratio of its workloads (CPU and memory, 1 = all local)."""
    return f"avg by ({_BY_TARGET}) ({WORKLOAD_LOCALITY})"


# -- node page ---------------------------------------------------------------------------


def numa_cpu_busy(match: str) -> str:
    """Per NUMA node of the selected node: share of its CPUs busy (not idle or iowait)."""
    busy = (
        f"sum by ({_BY_TARGET}, numa_node) "
        f'(rate({NUMA_CPU}{{{match}, mode!~"idle|iowait"}}[{RATE_WINDOW}]))'
    )
    return f"{busy} / on ({_BY_TARGET}, numa_node) ({CPUS_ONLINE}{_sel(match)} > 0)"


def numa_memory_used(match: str) -> str:
    """Per NUMA node of the selected node: memory used, bytes."""
    return f"{NUMA_MEM_USED}{_sel(match)}"


def gpu_throttled(match: str) -> str:
    """Per GPU of the selected node: how many slowing clock event reasons are active."""
    reasons = "|".join(THROTTLE_REASONS)
    return f'sum by ({_BY_TARGET}, gpu) ({GPU_CLOCK_EVENT}{{{match}, reason=~"{reasons}"}})'


def nics(match: str) -> str:
    """Network controllers of the selected node and their NUMA node."""
    return f'{PCI_INFO}{{{match}, class=~"{NIC_CLASS_PREFIX}.*"}}'


def of_node(name: str, match: str) -> str:
    """Every series of metric ``name`` of the selected node."""
    return f"{name}{_sel(match)}"


# -- workload page -----------------------------------------------------------------------


def workload_cores(match: str) -> str:
    """Per NUMA node: cores the workload's threads kept busy there."""
    return f"sum by ({_BY_TARGET}, numa_node) (rate({WORKLOAD_CPU}{{{match}}}[{RATE_WINDOW}]))"
