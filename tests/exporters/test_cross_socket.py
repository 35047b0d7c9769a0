"""The cross_socket collector and its sources: uncore PMUs, resctrl MBM, Intel PCM, estimate.

The uncore tests overlay small PMU trees (tests/fixtures/perf/) on real machines' sysfs
snapshots and pass a fake kernel counter interface (the perf_event_open boundary, like a
fake NVML); resctrl reads fixture trees (tests/fixtures/resctrl/); PCM is served by a
local HTTP server on a free loopback port.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.exporters.text_registry import parsed, text_registry
from tests.helpers import FIXTURES
from toposcope.config import ExporterConfig, HostPaths
from toposcope.devtools.procs import free_port
from toposcope.errors import ConfigError, NoDataError, SourceError
from toposcope.exporters.collectors.cross_socket import (
    ENTRY,
    CrossSocketCollector,
    NumastatCrossSocketEstimate,
    build_cross_socket,
    node_packages,
)
from toposcope.exporters.context import CollectorContext
from toposcope.host.pcm import (
    PcmClient,
    PcmLinkTraffic,
    parse_pcm_incoming,
    pcm_metrics_url,
)
from toposcope.host.perf_uncore import CounterEvent, PerfEventOpen, UncoreLinkCounters
from toposcope.host.resctrl import MbmDomain, ResctrlMbm, resctrl_mount
from toposcope.host.sysfs import SysfsNodes
from toposcope.host.uncore_pmus import (
    detect_uncore_pmus,
    encode_config,
    parse_format,
    read_cpu_model,
)
from toposcope.topology.sysfs import build_from_sysfs

PAGE = 4096
BYTES = "toposcope_cross_socket_bytes_total"
INFO = "toposcope_cross_socket_source_info"
BANDWIDTH = "toposcope_numa_memory_bandwidth_bytes_total"
PERF = FIXTURES / "perf"
RESCTRL = FIXTURES / "resctrl"
UPI_CONFIG = 0x0F02  # event=0x02 umask=0x0f
QPI_CONFIG = 0x0200  # event=0x00 umask=0x02


# ----------------------------------------------------------------------------- helpers


class FakeKernel:
    """The perf_event_open boundary: a counter value per (PMU type, config, CPU), or an errno."""

    def __init__(
        self,
        counts: Mapping[tuple[int, int, int], int],
        error: int | None = None,
        fail_at: int | None = None,
    ) -> None:
        self.counts = dict(counts)
        self.error = error
        self.fail_at = fail_at
        self.opened: dict[int, tuple[int, int, int]] = {}
        self.events: list[CounterEvent] = []
        self.closed: list[int] = []

    def open(self, event: CounterEvent) -> int:
        if self.error is not None and (self.fail_at is None or len(self.events) >= self.fail_at):
            raise OSError(self.error, os.strerror(self.error))
        key = (event.pmu_type, event.config, event.cpu)
        if key not in self.counts:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        self.events.append(event)
        handle = 100 + len(self.events)
        self.opened[handle] = key
        return handle

    def read(self, handle: int) -> int:
        return self.counts[self.opened[handle]]

    def close(self, handle: int) -> None:
        self.closed.append(handle)


def _merge(sources: list[Path], dest: Path) -> None:
    """Make ``dest`` show the union of ``sources`` (later ones win), linking what is not shared.

    Only directories present in several sources are created; everything else is a symlink
    into its source, so a snapshot of thousands of files is not copied for every test.
    """
    dest.mkdir(parents=True, exist_ok=True)
    names: dict[str, list[Path]] = {}
    for source in sources:
        for entry in sorted(source.iterdir()):
            names.setdefault(entry.name, []).append(entry)
    for name, entries in names.items():
        dirs = [e for e in entries if e.is_dir()]
        if len(dirs) > 1 and len(dirs) == len(entries):
            _merge(dirs, dest / name)
        else:
            (dest / name).symlink_to(entries[-1])


def overlay(tmp_path: Path, root: Path, *layers: str) -> Path:
    """A snapshot root with fixture trees from tests/fixtures/perf laid over it."""
    dest = tmp_path / "host"
    _merge([root, *(PERF / layer for layer in layers)], dest)
    return dest


def context(
    root: Path, source: str = "auto", rootfs: Path | None = None, pcm: str = ""
) -> CollectorContext:
    paths = HostPaths(sysfs=root / "sys", procfs=root / "proc", rootfs=rootfs or root)
    return CollectorContext(
        ExporterConfig(paths=paths, cross_socket_source=source, pcm_url=pcm or None)
    )


def registry_of(collector: CrossSocketCollector) -> CollectorRegistry:
    return text_registry(collector)


def pair(package: int, peer: int, source: str) -> dict[str, str]:
    return {"package": str(package), "peer_package": str(peer), "source": source}


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# ----------------------------------------------------------------------------- selection


def test_entry_factory_builds_the_collector(hwloc_root: Callable[[str], Path]) -> None:
    collector = ENTRY.factory(context(hwloc_root("32intel64-2p8co2t+8ve")))
    registry = text_registry(collector)
    assert registry.get_sample_value(INFO, {"source": "estimate", "measured": "false"}) == 1.0


def test_unknown_source_is_a_config_error(hwloc_root: Callable[[str], Path]) -> None:
    with pytest.raises(ConfigError, match="cross-socket source"):
        build_cross_socket(context(hwloc_root("32intel64-2p8co2t+8ve"), "magic"))


def test_off_publishes_nothing(hwloc_root: Callable[[str], Path]) -> None:
    collector = build_cross_socket(context(hwloc_root("32intel64-2p8co2t+8ve"), "off"))
    with pytest.raises(NoDataError, match="off"):
        list(collector.collect())


def test_auto_without_any_source_is_no_data(hwloc_root: Callable[[str], Path]) -> None:
    collector = build_cross_socket(context(hwloc_root("4fake-4gr1nu1pu")))
    assert collector.sources == []
    with pytest.raises(NoDataError, match="numastat"):
        list(collector.collect())


@pytest.mark.parametrize("source", ["uncore", "resctrl", "pcm", "estimate"])
def test_a_named_source_that_is_missing_fails_loudly(
    hwloc_root: Callable[[str], Path], source: str
) -> None:
    with pytest.raises(SourceError):
        build_cross_socket(context(hwloc_root("4fake-4gr1nu1pu"), source))


# ----------------------------------------------------------------------------- estimate


def test_estimate_on_a_2_socket_xeon(hwloc_root: Callable[[str], Path]) -> None:
    collector = build_cross_socket(context(hwloc_root("32intel64-2p8co2t+8ve")), page_bytes=PAGE)
    registry = registry_of(collector)
    value = registry.get_sample_value
    assert value(INFO, {"source": "estimate", "measured": "false"}) == 1.0
    # node0 (package 0) other_node 78724 pages, all requested from node1 (package 1)
    assert value(BYTES, pair(0, 1, "estimate")) == 78724 * PAGE
    # node1 (package 1) other_node 39564
    assert value(BYTES, pair(1, 0, "estimate")) == 39564 * PAGE
    assert value(BYTES, pair(0, 1, "estimate")) == 78724 * PAGE  # unchanged: no new pages


def test_estimate_on_a_4_socket_8_node_opteron(hwloc_root: Callable[[str], Path]) -> None:
    collector = build_cross_socket(context(hwloc_root("64amd64-4s2n4ca2co")), page_bytes=PAGE)
    value = registry_of(collector).get_sample_value
    # package 0 = nodes 0 and 1 (other_node 181 and 9691); no numa_foreign anywhere, so each
    # of the 7 other nodes (8 CPUs each) gets 1/7, and each other package's 2 nodes 2/7
    assert value(BYTES, pair(0, 1, "estimate")) == pytest.approx((181 + 9691) * 2 / 7 * PAGE)
    assert value(BYTES, pair(0, 3, "estimate")) == pytest.approx((181 + 9691) * 2 / 7 * PAGE)
    # package 3 = nodes 6 and 7 (9674 and 9641)
    assert value(BYTES, pair(3, 2, "estimate")) == pytest.approx((9674 + 9641) * 2 / 7 * PAGE)
    assert value(BYTES, pair(0, 0, "estimate")) is None


def test_single_package_publishes_only_the_source(hwloc_root: Callable[[str], Path]) -> None:
    collector = build_cross_socket(context(hwloc_root("20em64t-hybrid-1p6c2t+2ca4co1t")))
    families = {f.name: f for f in parsed(collector.collect())}
    assert list(families) == ["toposcope_cross_socket_source_info"]
    assert families["toposcope_cross_socket_source_info"].samples[0].labels == {
        "source": "estimate",
        "measured": "false",
    }


def build_two_package_host(root: Path) -> Path:
    """Packages 0 (nodes 0, 1) and 1 (nodes 2, 3), two CPUs per node, numastat all zero."""
    system = root / "sys" / "devices" / "system"
    write(system / "cpu" / "online", "0-7\n")
    for node in range(4):
        cpus = (2 * node, 2 * node + 1)
        write(system / "node" / f"node{node}" / "cpulist", f"{cpus[0]}-{cpus[1]}\n")
        for cpu in cpus:
            write(
                system / "cpu" / f"cpu{cpu}" / "topology" / "physical_package_id", f"{node // 2}\n"
            )
        set_numastat(root, node)
    return root


def set_numastat(root: Path, node: int, other: int = 0, foreign: int = 0) -> None:
    write(
        root / "sys" / "devices" / "system" / "node" / f"node{node}" / "numastat",
        f"numa_hit 1000\nnuma_miss {foreign}\nnuma_foreign {foreign}\n"
        f"interleave_hit 0\nlocal_node 1000\nother_node {other}\n",
    )


def test_estimate_follows_numastat_increases(tmp_path: Path) -> None:
    root = build_two_package_host(tmp_path)
    registry = registry_of(build_cross_socket(context(root, "estimate"), page_bytes=PAGE))
    value = registry.get_sample_value
    assert value(BYTES, pair(0, 1, "estimate")) is None  # nothing crossed yet

    # 1000 pages placed on node0 for other nodes; node2's tasks missed 300 pages, node1's 100
    set_numastat(root, 0, other=1000)
    set_numastat(root, 1, foreign=100)
    set_numastat(root, 2, foreign=300)
    assert value(BYTES, pair(0, 1, "estimate")) == pytest.approx(1000 * 0.75 * PAGE)

    # 500 pages on node2 and no new misses: split by CPUs over nodes 0, 1 and 3
    set_numastat(root, 2, other=500, foreign=300)
    assert value(BYTES, pair(1, 0, "estimate")) == pytest.approx(500 * 2 / 3 * PAGE)
    assert value(BYTES, pair(0, 1, "estimate")) == pytest.approx(1000 * 0.75 * PAGE)

    # node0's counter restarts (node hot-removed and re-added): its new value is new traffic
    set_numastat(root, 0, other=10)
    assert value(BYTES, pair(0, 1, "estimate")) == pytest.approx(
        1000 * 0.75 * PAGE + 10 * 2 / 3 * PAGE
    )


def test_cpu_less_nodes_belong_to_the_nearest_package(tmp_path: Path) -> None:
    root = build_two_package_host(tmp_path)
    node4 = root / "sys" / "devices" / "system" / "node" / "node4"
    write(node4 / "cpulist", "\n")
    rows = {0: "10 11 20 20 15", 1: "11 10 20 20 17", 2: "20 20 10 11 30", 3: "20 20 11 10 30"}
    rows[4] = "15 17 30 30 10"
    for node, row in rows.items():
        write(root / "sys" / "devices" / "system" / "node" / f"node{node}" / "distance", row + "\n")
    topology = build_from_sysfs(root / "sys")
    assert node_packages(topology) == {0: 0, 1: 0, 2: 1, 3: 1, 4: 0}
    # a memory-only node as far from both packages has none
    write(node4 / "distance", "30 30 30 30 10\n")
    assert 4 not in node_packages(build_from_sysfs(root / "sys"))


def test_estimate_reports_availability(hwloc_root: Callable[[str], Path]) -> None:
    with_stat = NumastatCrossSocketEstimate(SysfsNodes(hwloc_root("16amd64-8n2c") / "sys"), PAGE)
    without = NumastatCrossSocketEstimate(SysfsNodes(hwloc_root("4fake-4gr1nu1pu") / "sys"), PAGE)
    assert with_stat.available()
    assert not without.available()
    assert with_stat.measured is False


# ----------------------------------------------------------------------------- uncore: sysfs


def test_parse_format_and_encode_config() -> None:
    amd_event = parse_format("config:0-7,32-35\n")
    assert amd_event.target == "config"
    assert amd_event.bits == ((0, 7), (32, 35))
    formats = {"event": amd_event, "umask": parse_format("config:8-15")}
    words = encode_config(formats, {"event": 0x7C7, "umask": 0x02})
    assert words == {"config": (0x7 << 32) | (0x02 << 8) | 0xC7, "config1": 0, "config2": 0}
    assert parse_format("config:21").bits == ((21, 21),)
    assert encode_config({"x": parse_format("config1:0-3")}, {"x": 5})["config1"] == 5
    with pytest.raises(ValueError, match="does not fit"):
        encode_config(formats, {"umask": 0x1FF})
    with pytest.raises(ValueError, match="no format field"):
        encode_config(formats, {"edge": 1})
    with pytest.raises(ValueError):
        parse_format("config:7-0")
    with pytest.raises(ValueError):
        parse_format("bogus")


def test_detect_upi_pmus_with_their_topology(
    tmp_path: Path, hwloc_root: Callable[[str], Path]
) -> None:
    root = overlay(tmp_path, hwloc_root("64amd64-4s2n4ca2co"), "intel-upi-4s")
    pmus = detect_uncore_pmus(root / "sys")
    assert [p.name for p in pmus] == ["uncore_upi_0", "uncore_upi_1", "uncore_upi_2"]
    upi0 = pmus[0]
    assert (upi0.kind, upi0.type, upi0.link, upi0.cpus) == ("upi", 40, 0, (0, 16, 32, 48))
    assert dict(upi0.upi_links) == {0: (1, 1), 1: (0, 3), 2: (1, 3), 3: (0, 1)}
    assert encode_config(upi0.formats, {"event": 0x02, "umask": 0x0F})["config"] == UPI_CONFIG


def test_detect_qpi_and_amd_df_pmus(tmp_path: Path, hwloc_root: Callable[[str], Path]) -> None:
    qpi = detect_uncore_pmus(PERF / "intel-qpi-2s" / "sys")
    assert [(p.name, p.kind, p.type, p.link, p.cpus) for p in qpi] == [
        ("uncore_qpi_0", "qpi", 20, 0, (0, 8)),
        ("uncore_qpi_1", "qpi", 21, 1, (0, 8)),
    ]
    assert qpi[0].upi_links == {}
    amd = detect_uncore_pmus(PERF / "amd-df-2s" / "sys")
    assert [(p.name, p.kind, p.type, p.cpus) for p in amd] == [("amd_df", "amd_df", 11, (0, 8))]
    assert detect_uncore_pmus(hwloc_root("64amd64-4s2n4ca2co") / "sys") == []
    assert detect_uncore_pmus(tmp_path / "nothing") == []


def test_read_cpu_model(hwloc_root: Callable[[str], Path]) -> None:
    model = read_cpu_model(PERF / "amd-df-2s" / "proc")
    assert model is not None
    assert (model.vendor, model.family, model.model) == ("AuthenticAMD", 25, 1)
    intel = read_cpu_model(hwloc_root("32intel64-2p8co2t+8ve") / "proc")
    assert intel is not None and intel.vendor == "GenuineIntel"
    assert read_cpu_model(hwloc_root("16ia64-8n2s") / "proc") is None


# ----------------------------------------------------------------------------- uncore: counting


def upi_counts() -> dict[tuple[int, int, int], int]:
    """Data flits per UPI link (PMU type 40 + link) and package CPU: 9000 x (link+1) x (pkg+1)."""
    return {
        (40 + link, UPI_CONFIG, cpu): 9000 * (link + 1) * (package + 1)
        for link in range(3)
        for package, cpu in enumerate((0, 16, 32, 48))
    }


def test_upi_flits_become_bytes_per_package_pair(
    tmp_path: Path, hwloc_root: Callable[[str], Path]
) -> None:
    root = overlay(tmp_path, hwloc_root("64amd64-4s2n4ca2co"), "intel-upi-4s")
    kernel = FakeKernel(upi_counts())
    collector = build_cross_socket(context(root), backend=kernel)
    value = registry_of(collector).get_sample_value
    assert value(INFO, {"source": "uncore", "measured": "true"}) == 1.0
    assert value(INFO, {"source": "estimate", "measured": "false"}) is None
    assert {(e.pmu_type, e.config, e.cpu, e.pid) for e in kernel.events} == {
        (t, c, cpu, -1) for (t, c, cpu) in upi_counts()
    }
    # 9 flits carry 64 bytes; links from uncore_upi_X/dieY (4-socket example of the kernel)
    flit_unit = 64000  # 9000 flits
    expected = {
        (0, 1): 1 * 1, (0, 2): 2 * 1, (0, 3): 3 * 1,
        (1, 3): 1 * 2, (1, 0): 2 * 2, (1, 2): 3 * 2,
        (2, 3): 1 * 3, (2, 0): 2 * 3, (2, 1): 3 * 3,
        (3, 1): 1 * 4, (3, 2): 2 * 4, (3, 0): 3 * 4,
    }  # fmt: skip
    for (package, peer), factor in expected.items():
        assert value(BYTES, pair(package, peer, "uncore")) == pytest.approx(factor * flit_unit)


def test_qpi_data_flits_are_8_bytes(tmp_path: Path, hwloc_root: Callable[[str], Path]) -> None:
    root = overlay(tmp_path, hwloc_root("32intel64-2p8co2t+8ve"), "intel-qpi-2s")
    counts = {(20, QPI_CONFIG, 0): 1000, (21, QPI_CONFIG, 0): 500, (20, QPI_CONFIG, 8): 2000}
    counts[(21, QPI_CONFIG, 8)] = 0
    collector = build_cross_socket(context(root, "uncore"), backend=FakeKernel(counts))
    value = registry_of(collector).get_sample_value
    assert value(BYTES, pair(0, 1, "uncore")) == 1500 * 8  # no topology files: the other one
    assert value(BYTES, pair(1, 0, "uncore")) == 2000 * 8


def amd_counts(cpu0: int, cpu8: int) -> dict[tuple[int, int, int], int]:
    configs = [
        (code & 0xFF) | (0x02 << 8) | ((code >> 8) << 32) for code in (0x7C7, 0x807, 0x847, 0x887)
    ]
    counts = {(11, config, 0): cpu0 for config in configs}
    counts.update({(11, config, 8): cpu8 * (i + 1) for i, config in enumerate(configs)})
    return counts


def test_amd_data_fabric_remote_outbound(tmp_path: Path, hwloc_root: Callable[[str], Path]) -> None:
    root = overlay(tmp_path, hwloc_root("32intel64-2p8co2t+8ve"), "amd-df-2s")
    collector = build_cross_socket(context(root), backend=FakeKernel(amd_counts(100, 10)))
    value = registry_of(collector).get_sample_value
    assert value(BYTES, pair(0, 1, "uncore")) == 4 * 100 * 32  # four link controllers, 32 B
    assert value(BYTES, pair(1, 0, "uncore")) == (10 + 20 + 30 + 40) * 32


def test_amd_zen4_has_no_known_event_and_falls_back(
    tmp_path: Path, hwloc_root: Callable[[str], Path]
) -> None:
    root = overlay(tmp_path, hwloc_root("32intel64-2p8co2t+8ve"), "amd-df-2s", "amd-df-2s-zen4")
    kernel = FakeKernel(amd_counts(1, 1))
    assert [name for name, _ in build_cross_socket(context(root), backend=kernel).sources] == [
        "estimate"
    ]
    with pytest.raises(SourceError, match="no known link-traffic event"):
        build_cross_socket(context(root, "uncore"), backend=kernel)


def test_permission_denied_falls_back_in_auto(
    tmp_path: Path, hwloc_root: Callable[[str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    root = overlay(tmp_path, hwloc_root("64amd64-4s2n4ca2co"), "intel-upi-4s")
    write(root / "proc" / "sys" / "kernel" / "perf_event_paranoid", "2\n")
    kernel = FakeKernel(upi_counts(), error=errno.EACCES, fail_at=5)
    with caplog.at_level(logging.INFO):
        collector = build_cross_socket(context(root), backend=kernel)
    assert collector.sources == [("estimate", False)]
    assert sorted(kernel.closed) == sorted(kernel.opened)  # the 5 opened were closed again
    assert any("perf_event_paranoid=2" in r.getMessage() for r in caplog.records)
    with pytest.raises(SourceError, match="CAP_PERFMON"):
        build_cross_socket(context(root, "uncore"), backend=FakeKernel({}, error=errno.EACCES))


def test_single_package_has_no_link_to_measure(hwloc_root: Callable[[str], Path]) -> None:
    topology = build_from_sysfs(hwloc_root("20em64t-hybrid-1p6c2t+2ca4co1t") / "sys")
    pmus = detect_uncore_pmus(PERF / "intel-qpi-2s" / "sys")
    cpu_package = {c.id: c.package for c in topology.cpus if c.package is not None}
    with pytest.raises(SourceError, match="no peer package"):
        UncoreLinkCounters(pmus, cpu_package, FakeKernel({}))


def test_counter_read_errors_name_the_counter(
    tmp_path: Path, hwloc_root: Callable[[str], Path]
) -> None:
    pmus = detect_uncore_pmus(PERF / "intel-qpi-2s" / "sys")
    counts = {(t, QPI_CONFIG, cpu): 1 for t in (20, 21) for cpu in (0, 8)}

    class LostCounters(FakeKernel):
        def read(self, handle: int) -> int:
            raise OSError(errno.ENODEV, "gone")

    counters = UncoreLinkCounters(pmus, {0: 0, 8: 1}, LostCounters(counts))
    assert counters.pairs == [(0, 1), (1, 0)]
    with pytest.raises(SourceError, match=re.escape("UNC_Q_TxL_FLITS_G0.DATA on uncore_qpi_0")):
        counters.read()
    counters.close()


def test_the_real_perf_event_open_counts_a_software_event() -> None:
    backend = PerfEventOpen()
    task_clock = CounterEvent(pmu_type=1, config=1, cpu=-1, pid=0)  # this process's task clock
    try:
        handle = backend.open(task_clock)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.ENOSYS, errno.ENOENT):
            pytest.skip(f"perf_event_open not permitted here: {exc}")
        raise
    try:
        first = backend.read(handle)
        sum(range(200_000))
        assert backend.read(handle) > first
    finally:
        backend.close(handle)
    with pytest.raises(OSError):
        backend.open(CounterEvent(pmu_type=0x7FFF_FFF0, config=0, cpu=0))
    with pytest.raises(OSError, match="syscall number unknown"):
        PerfEventOpen(machine="vax").open(task_clock)


# ----------------------------------------------------------------------------- resctrl


def test_resctrl_bandwidth_per_node(hwloc_root: Callable[[str], Path]) -> None:
    root = hwloc_root("32intel64-2p8co2t+8ve")
    ctx = context(root, rootfs=RESCTRL / "l3-per-socket")
    collector = build_cross_socket(ctx, page_bytes=PAGE)
    assert collector.sources == [("estimate", False), ("resctrl", True)]
    value = registry_of(collector).get_sample_value
    assert value(INFO, {"source": "resctrl", "measured": "true"}) == 1.0
    local = {"locality": "local", "source": "resctrl"}
    remote = {"locality": "remote", "source": "resctrl"}
    # L3 0 = node0: root group 1e9 total, 8e8 local; jobA 3e9 total, 1e9 local (its MON
    # group m1 is already included in jobA's figures and is not added again)
    assert value(BANDWIDTH, {"numa_node": "0", **local}) == 1.8e9
    assert value(BANDWIDTH, {"numa_node": "0", **remote}) == 2.2e9
    assert value(BANDWIDTH, {"numa_node": "1", **local}) == 6.5e8
    assert value(BANDWIDTH, {"numa_node": "1", **remote}) == 5e7
    assert value(BYTES, pair(0, 1, "estimate")) == 78724 * PAGE


def test_resctrl_alone_publishes_no_link_traffic(hwloc_root: Callable[[str], Path]) -> None:
    ctx = context(hwloc_root("32intel64-2p8co2t+8ve"), "resctrl", rootfs=RESCTRL / "l3-per-socket")
    families = {f.name: f for f in build_cross_socket(ctx).collect()}
    assert sorted(families) == [
        "toposcope_cross_socket_source_info",
        "toposcope_numa_memory_bandwidth_bytes",
    ]


def test_resctrl_sub_numa_clusters(hwloc_root: Callable[[str], Path]) -> None:
    ctx = context(hwloc_root("memorysidecaches"), "resctrl", rootfs=RESCTRL / "snc2")
    value = registry_of(build_cross_socket(ctx)).get_sample_value
    local = {"locality": "local", "source": "resctrl"}
    remote = {"locality": "remote", "source": "resctrl"}
    assert value(BANDWIDTH, {"numa_node": "0", **local}) == 5e8
    assert value(BANDWIDTH, {"numa_node": "0", **remote}) == 1e8
    assert value(BANDWIDTH, {"numa_node": "2", **local}) == 1e8
    assert value(BANDWIDTH, {"numa_node": "2", **remote}) == 3e8
    assert value(BANDWIDTH, {"numa_node": "1", **remote}) == 0
    # node3's mbm_total_bytes reads "Unavailable": skipped, not published as 0
    assert value(BANDWIDTH, {"numa_node": "3", **local}) is None


def test_resctrl_domain_spanning_nodes_is_not_published(
    hwloc_root: Callable[[str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    # L3 domains of a sub-NUMA-clustered machine without the kernel's mon_sub_L3_* split
    ctx = context(hwloc_root("memorysidecaches"), "resctrl", rootfs=RESCTRL / "l3-per-socket")
    with caplog.at_level(logging.WARNING):
        names = {f.name for f in build_cross_socket(ctx).collect()}
    assert names == {"toposcope_cross_socket_source_info"}
    assert any("mon_L3_00 spans several NUMA nodes" in r.getMessage() for r in caplog.records)


def test_resctrl_totals_survive_group_removal(tmp_path: Path) -> None:
    root = tmp_path / "resctrl"
    shutil.copytree(RESCTRL / "l3-per-socket" / "sys" / "fs" / "resctrl", root)
    mbm = ResctrlMbm(root)
    first = mbm.read()[MbmDomain(0)]
    assert (first.local_bytes, first.remote_bytes) == (1.8e9, 2.2e9)
    shutil.rmtree(root / "jobA")  # its tasks go back to the root group
    write(root / "mon_data" / "mon_L3_00" / "mbm_total_bytes", "1100000000\n")
    write(root / "mon_data" / "mon_L3_00" / "mbm_local_bytes", "850000000\n")
    second = mbm.read()[MbmDomain(0)]
    assert second.local_bytes == 1.85e9
    assert second.remote_bytes == 2.25e9
    # a new group starts from zero: all of it is new traffic
    write(root / "jobB" / "mon_data" / "mon_L3_00" / "mbm_total_bytes", "100\n")
    write(root / "jobB" / "mon_data" / "mon_L3_00" / "mbm_local_bytes", "100\n")
    third = mbm.read()[MbmDomain(0)]
    assert third.local_bytes == 1.85e9 + 100
    assert third.remote_bytes == 2.25e9


def test_resctrl_remote_never_steps_back(tmp_path: Path) -> None:
    root = tmp_path / "resctrl"
    write(root / "mon_data" / "mon_L3_00" / "mbm_total_bytes", "1000\n")
    write(root / "mon_data" / "mon_L3_00" / "mbm_local_bytes", "400\n")
    mbm = ResctrlMbm(root)
    assert mbm.available()
    assert mbm.read()[MbmDomain(0)].remote_bytes == 600
    # local read a moment after total: local grew more than total between the two reads
    write(root / "mon_data" / "mon_L3_00" / "mbm_local_bytes", "500\n")
    assert mbm.read()[MbmDomain(0)].remote_bytes == 600
    assert not ResctrlMbm(tmp_path / "none").available()


def test_resctrl_mount_point_comes_from_mountinfo(tmp_path: Path) -> None:
    write(
        tmp_path / "proc" / "1" / "mountinfo",
        "22 1 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n"
        "40 22 0:35 / /srv/res\\040ctrl rw,relatime shared:19 - resctrl resctrl rw\n",
    )
    paths = HostPaths(sysfs=tmp_path / "sys", procfs=tmp_path / "proc", rootfs=tmp_path / "host")
    assert resctrl_mount(paths) == tmp_path / "host" / "srv" / "res ctrl"
    bare = HostPaths(sysfs=tmp_path / "sys", procfs=tmp_path / "noproc", rootfs=tmp_path)
    assert resctrl_mount(bare) is None
    write(tmp_path / "sys" / "fs" / "resctrl" / "mon_data" / "mon_L3_00" / "mbm_total_bytes", "0\n")
    assert resctrl_mount(bare) == tmp_path / "sys" / "fs" / "resctrl"


# ----------------------------------------------------------------------------- Intel PCM


@pytest.fixture
def pcm_server() -> Iterator[Callable[[str], str]]:
    """A pcm-sensor-server stand-in on a free loopback port; call it with the body to serve."""
    state = {"body": ""}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = state["body"].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()

    def serve(body: str) -> str:
        state["body"] = body
        return f"http://127.0.0.1:{server.server_address[1]}"

    try:
        yield serve
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


PCM_2S = (PERF / "pcm" / "pcm-sensor-server-2s.prom").read_text()


def test_parse_pcm_incoming_keeps_only_link_data_traffic() -> None:
    assert parse_pcm_incoming(PCM_2S) == {
        (0, 0): 6400000.0,
        (0, 1): 3200000.0,
        (1, 0): 1280000.0,
        (1, 1): 640000.0,
    }
    assert parse_pcm_incoming("Weird-Name{x} 1\nDRAM_Reads 5\n") == {}
    assert pcm_metrics_url("http://h:9738") == "http://h:9738/metrics"
    assert pcm_metrics_url("http://h:9738/metrics") == "http://h:9738/metrics"


def test_pcm_link_traffic(
    pcm_server: Callable[[str], str], hwloc_root: Callable[[str], Path]
) -> None:
    url = pcm_server(PCM_2S)
    collector = build_cross_socket(context(hwloc_root("32intel64-2p8co2t+8ve"), "pcm", pcm=url))
    value = registry_of(collector).get_sample_value
    assert value(INFO, {"source": "pcm", "measured": "true"}) == 1.0
    # socket 0 received 6.4 MB + 3.2 MB over its two links: sent by package 1
    assert value(BYTES, pair(1, 0, "pcm")) == 9.6e6
    assert value(BYTES, pair(0, 1, "pcm")) == 1.92e6


def test_auto_uses_pcm_when_configured(
    pcm_server: Callable[[str], str], hwloc_root: Callable[[str], Path]
) -> None:
    url = pcm_server(PCM_2S)
    collector = build_cross_socket(context(hwloc_root("32intel64-2p8co2t+8ve"), pcm=url))
    assert collector.sources == [("pcm", True)]


def test_pcm_links_of_a_4_socket_machine_use_the_kernels_upi_map(
    pcm_server: Callable[[str], str], tmp_path: Path, hwloc_root: Callable[[str], Path]
) -> None:
    root = overlay(tmp_path, hwloc_root("64amd64-4s2n4ca2co"), "intel-upi-4s")
    body = "".join(
        f'Incoming_Data_Traffic_On_Link_{link}{{aggregate="system",source="uncore",'
        f'socket="{socket_id}"}} {1000 * (link + 1)}\n'
        for socket_id in range(4)
        for link in range(3)
    )
    url = pcm_server(body)
    value = registry_of(build_cross_socket(context(root, "pcm", pcm=url))).get_sample_value
    # socket 0 link 0 leads to die 1, link 1 to die 2, link 2 to die 3
    assert value(BYTES, pair(1, 0, "pcm")) == 1000
    assert value(BYTES, pair(2, 0, "pcm")) == 2000
    assert value(BYTES, pair(3, 0, "pcm")) == 3000
    # socket 3: link 0 -> die 1, link 1 -> die 2, link 2 -> die 0
    assert value(BYTES, pair(0, 3, "pcm")) == 3000


def test_pcm_without_a_link_map_on_4_sockets_skips_links(
    pcm_server: Callable[[str], str], hwloc_root: Callable[[str], Path]
) -> None:
    url = pcm_server('Incoming_Data_Traffic_On_Link_0{socket="0"} 5\n')
    traffic = PcmLinkTraffic(PcmClient(url), {})
    assert traffic.read([0, 1, 2, 3]) == {}
    assert traffic.read([0, 1]) == {(1, 0): 5.0}


def test_pcm_down_fails_the_scrape_naming_the_url(hwloc_root: Callable[[str], Path]) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    collector = build_cross_socket(context(hwloc_root("32intel64-2p8co2t+8ve"), "pcm", pcm=url))
    with pytest.raises(SourceError, match=re.escape(f"127.0.0.1:{port}/metrics")):
        list(collector.collect())


def test_pcm_without_link_series_fails(
    pcm_server: Callable[[str], str], hwloc_root: Callable[[str], Path]
) -> None:
    url = pcm_server("DRAM_Reads 5\n")
    collector = build_cross_socket(context(hwloc_root("32intel64-2p8co2t+8ve"), "pcm", pcm=url))
    with pytest.raises(SourceError, match="no Incoming_Data_Traffic_On_Link"):
        list(collector.collect())
