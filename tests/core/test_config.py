"""HostPaths from the ``--path.*`` options (exporter, agent, ``topology``)."""

from __future__ import annotations

from pathlib import Path

from toposcope.config import HostPaths


def test_defaults_are_this_hosts_mounts() -> None:
    assert HostPaths.from_options() == HostPaths(Path("/sys"), Path("/proc"), Path("/"))


def test_rootfs_carries_sysfs_and_procfs_unless_they_are_given() -> None:
    paths = HostPaths.from_options("/host")
    assert (paths.sysfs, paths.procfs, paths.rootfs) == (
        Path("/host/sys"),
        Path("/host/proc"),
        Path("/host"),
    )
    mixed = HostPaths.from_options("/host", procfs="/proc")
    assert (mixed.sysfs, mixed.procfs) == (Path("/host/sys"), Path("/proc"))
    assert mixed.in_rootfs("/sys/fs/cgroup") == Path("/host/sys/fs/cgroup")
