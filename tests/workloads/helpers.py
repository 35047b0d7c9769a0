"""Helpers for the workload tests: fixture roots, copies to mutate, one-shot scrapes."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from tests.exporters.text_registry import parsed
from tests.helpers import FIXTURES
from toposcope.config import ExporterConfig, HostPaths, WorkloadSettings
from toposcope.exporters.collectors import workloads
from toposcope.exporters.context import CollectorContext
from toposcope.exporters.gpu_source import GpuSource, install_gpu_source
from toposcope.exporters.registry import Collector
from toposcope.host.nvml.records import GpuProcess

WORKLOAD_FIXTURES = FIXTURES / "workloads"
V2HOST = WORKLOAD_FIXTURES / "v2host"
V1HOST = WORKLOAD_FIXTURES / "v1host"

POD_A = "1a2b3c4d-5e6f-4a5b-8c7d-0123456789ab"
WL_A = f"{POD_A}/a1b2c3d4e5f6"
WL_B = "9f8e7d6c-5b4a-4c3d-9e2f-fedcba987654/b0b1b2b3b4b5"
WL_SERVICE = "foo.service"
WL_DOCKER = "c0ffee000000"
WL_SLURM = "slurm-job-42"
WL_SSHD = "sshd.service"


class FakeGpuProcesses:
    """Stands in for NVML's per-process list (an external system), as GpuProcessSource."""

    def __init__(self, processes: Iterable[GpuProcess]) -> None:
        self.processes = list(processes)

    def gpu_processes(self) -> list[GpuProcess]:
        return list(self.processes)


class _Frozen:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def scrape(collector: Collector) -> CollectorRegistry:
    """Collect once and return a registry serving that one result.

    ``get_sample_value`` runs ``collect()`` on every call; freezing keeps a test's reads
    on a single scrape (the collector keeps counters across scrapes). The samples are read
    from the text, as a scraper reads them.
    """
    registry = CollectorRegistry()
    registry.register(_Frozen(parsed(collector.collect())))
    return registry


def build(
    root: Path,
    settings: WorkloadSettings | None = None,
    gpu_processes: FakeGpuProcesses | None = None,
) -> Collector:
    """The workloads collector, built from its registry entry, on a fixture root."""
    config = ExporterConfig(paths=HostPaths.under(root), workloads=settings or WorkloadSettings())
    ctx = CollectorContext(config, gpu_processes=gpu_processes)
    return workloads.ENTRY.factory(ctx)


#: the identity labels of every per-workload series, empty for a workload with no pod names
#: and no Slurm job
NO_POD = {
    "namespace": "",
    "pod": "",
    "container": "",
    "slurm_job_id": "",
    "slurm_user": "",
    "slurm_account": "",
    "slurm_partition": "",
}


def workload_value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    """A per-workload sample's value; ``namespace``/``pod``/``container`` default to empty."""
    return registry.get_sample_value(name, {**NO_POD, **labels})


def info_labels(registry: CollectorRegistry, workload: str) -> dict[str, str]:
    """Every label of one workload's ``toposcope_workload_info`` sample (empty if absent)."""
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "toposcope_workload_info" and sample.labels["workload"] == workload:
                return dict(sample.labels)
    return {}


def info_value(registry: CollectorRegistry, **labels: str) -> float | None:
    """The value of the ``toposcope_workload_info`` sample carrying at least ``labels``
    (the identity labels not named are not compared).
    """
    found = info_labels(registry, labels["workload"])
    if not found or any(found.get(k) != v for k, v in labels.items()):
        return None
    return 1.0


def copy_host(source: Path, dest: Path) -> Path:
    """A writable copy of a fixture host (symlinks kept as symlinks)."""
    target = dest / source.name
    shutil.copytree(source, target, symlinks=True)
    return target


def workload_names(registry: CollectorRegistry) -> set[str]:
    """The ``workload`` label of every ``toposcope_workload_info`` sample."""
    names = set()
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "toposcope_workload_info":
                names.add(sample.labels["workload"])
    return names


def gpu_workloads(source: GpuSource) -> Collector:
    """The workloads collector over the v2 host fixture, reading its GPUs from ``source``."""
    ctx = CollectorContext(ExporterConfig(paths=HostPaths.under(V2HOST)))
    install_gpu_source(ctx, source)
    return workloads.ENTRY.factory(ctx)
