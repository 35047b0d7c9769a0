"""Fixtures shared by the simulator's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from toposcope.sim.cluster import SimCluster
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.scenarios import build_cluster, load_scenario


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimCluster, SimExporters]]:
    """The built-in demo cluster and its node exporters, one per test module (a module that
    needs other exporters defines its own ``demo``).
    """
    cluster = build_cluster(load_scenario("builtin:demo"))
    exporters = SimExporters(cluster, tmp_path_factory.mktemp("sim-state"), background=False)
    try:
        yield cluster, exporters
    finally:
        exporters.close()
