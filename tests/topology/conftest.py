"""Fixtures of the topology tests: hwloc snapshots unpacked with only what the builder reads.

A full hwloc snapshot holds thousands of files the topology builder never opens (CPU cache
descriptions, memory blocks, device trees). Unpacking only the files below keeps the
agreement test, which unpacks about 30 snapshots, fast on slow disks: creating a file costs
about a millisecond on some CI disks, and ``256ppc-8n8s4t`` alone has 16,000 entries.

The list follows :mod:`toposcope.topology.sysfs` and :mod:`toposcope.topology.sysfs_nics`;
a file they start reading must be added here, or the agreement test will show the difference.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import HWLOC_LINUX, extract_snapshot

#: Archive members (below the snapshot's top directory) that build_from_sysfs reads.
BUILDER_READS = re.compile(
    r"^[^/]+(?:/sys|/proc|/(?:"
    r"proc/meminfo"
    r"|sys/bus/(?:cpu|node|pci)/devices(?:/[^/]+)?"
    r"|sys/devices/system/cpu/online"
    r"|sys/devices/system/cpu/cpu\d+(?:/online|/topology/(?:physical_package_id|core_id))?"
    r"|sys/devices/system/node/online"
    r"|sys/devices/system/node/node\d+(?:/(?:cpulist|cpumap|meminfo|distance))?"
    r"|sys/.*/(?:vendor|device|class|numa_node|local_cpulist|local_cpus)"
    r"|sys/class/(?:net|infiniband)(?:/[^/]+)?"
    r"|sys/.*/net/[^/]+/(?:type|operstate|speed|dev_port)"
    r"|sys/.*/infiniband/[^/]+/ports/\d+/(?:state|rate|link_layer)"
    r"))/?$"
)


@pytest.fixture(scope="session")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Return a function that unpacks ``hwloc/linux/<name>.tar.bz2`` (once) for the builder.

    The returned path holds ``sys/`` and ``proc/`` as ``--root`` expects.
    """
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            dest = tmp_path_factory.mktemp(f"snap-{name[:20]}")
            tarball = HWLOC_LINUX / f"{name}.tar.bz2"
            cache[name] = extract_snapshot(tarball, dest, only=BUILDER_READS)
        return cache[name]

    return get
