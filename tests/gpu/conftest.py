"""Fixtures for the GPU tests: a fake clock, fake NVML machines and one-scrape registries."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from tests.exporters.text_registry import parsed
from toposcope.exporters.collectors.gpu import GpuCollector
from toposcope.exporters.gpu_source import GpuSource, open_gpu_source
from toposcope.exporters.runner import NamedCollector, ScrapeRunner
from toposcope.fake_nvml import SPEC_DIR, FakeNvml, ManualClock, load_spec


class Frozen:
    """Serves the families of one scrape, so that get_sample_value does not scrape again."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


class ScrapeRegistry(CollectorRegistry):
    """A registry whose ``get_sample_value`` finds a sample by some of its labels.

    GPU series carry dcgm-exporter's join keys (UUID, pci_bus_id, device, modelName,
    Hostname) besides ``gpu``; tests name the labels they care about, and a lookup that
    matches more than one sample fails rather than picking one.
    """

    def get_sample_value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        wanted = (labels or {}).items()
        found = [
            sample.value
            for family in self.collect()
            for sample in family.samples
            if sample.name == name and wanted <= sample.labels.items()
        ]
        assert len(found) <= 1, f"{name}{labels} matches {len(found)} samples"
        return found[0] if found else None


def scrape(*collectors: tuple[str, Any]) -> ScrapeRegistry:
    """Run the collectors once through the runner and return a fresh registry holding it,
    its samples as a scraper reads them from the text.
    """
    runner = ScrapeRunner([NamedCollector(name, c) for name, c in collectors])
    registry = ScrapeRegistry(auto_describe=False)
    registry.register(Frozen(parsed(runner.collect())))
    return registry


def gpu_series(registry: CollectorRegistry, gpu: str) -> set[str]:
    """Names of every toposcope_gpu_* sample labelled with ``gpu``."""
    return {
        sample.name
        for family in registry.collect()
        for sample in family.samples
        if sample.name.startswith("toposcope_gpu_") and sample.labels.get("gpu") == gpu
    }


@pytest.fixture
def clock() -> ManualClock:
    """A fake monotonic clock shared by the fake NVML and the source."""
    return ManualClock()


@pytest.fixture
def fake_machine(clock: ManualClock) -> Callable[[str], FakeNvml]:
    """Build a fake NVML from a shipped description, without the description's faults."""

    def make(name: str) -> FakeNvml:
        fake = FakeNvml(load_spec(SPEC_DIR / f"{name}.yaml"), clock=clock)
        fake.clear_faults()
        return fake

    return make


@pytest.fixture
def gpu_source(clock: ManualClock) -> Iterator[Callable[..., GpuSource]]:
    """Open GPU sources over a fake; every one is closed (threads stopped) after the test."""
    opened: list[tuple[FakeNvml, GpuSource]] = []

    def make(fake: FakeNvml, **kwargs: Any) -> GpuSource:
        source = open_gpu_source("fake", backend=fake, clock=clock, **kwargs)
        opened.append((fake, source))
        return source

    yield make
    for fake, source in opened:
        fake.release_all()
        source.close()
        for worker in (source.pcie, source.xid):
            assert worker is None or not worker.running


@pytest.fixture
def collector_for(
    fake_machine: Callable[[str], FakeNvml], gpu_source: Callable[..., GpuSource]
) -> Callable[[str], tuple[FakeNvml, GpuSource, GpuCollector]]:
    """A fake machine, its source and a gpu collector without background threads."""

    def make(name: str) -> tuple[FakeNvml, GpuSource, GpuCollector]:
        fake = fake_machine(name)
        source = gpu_source(fake)
        return fake, source, GpuCollector(source)

    return make
