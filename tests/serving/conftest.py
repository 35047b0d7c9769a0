"""Fixtures shared by the serving tests: an exporter on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from toposcope.config import ExporterConfig, HostPaths
from toposcope.exporters.app import ExporterServer, build_runner
from toposcope.exporters.collectors import default_table


@pytest.fixture(scope="module")
def exporter_port(hwloc_root: Callable[[str], Path]) -> Iterator[int]:
    """The port of an exporter (topology collector only, hostname ``host-a``) on loopback."""
    config = ExporterConfig(paths=HostPaths.under(hwloc_root("16amd64-8n2c")), nvml="off")
    runner = build_runner(config, [e for e in default_table() if e.name == "topology"])
    server = ExporterServer(runner, "host-a", "127.0.0.1:0")
    server.start()
    try:
        yield server.port
    finally:
        server.shutdown()
