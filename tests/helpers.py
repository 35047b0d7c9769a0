"""Test helpers shared by several test modules (fixture locations, tarball extraction)."""

from __future__ import annotations

import tarfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
HWLOC = FIXTURES / "hwloc"
HWLOC_LINUX = HWLOC / "linux"
HWLOC_XML = HWLOC / "xml"


def extract_snapshot(tarball: Path, dest: Path) -> Path:
    """Unpack an hwloc sysfs/procfs tarball under ``dest`` and return its one top-level dir.

    The top-level directory is not always named like the tarball, so it is read from the
    archive. Symlinks inside the tree are kept (sysfs is full of them).
    """
    with tarfile.open(tarball, "r:bz2") as archive:
        members = archive.getmembers()
        tops = {m.name.split("/", 1)[0] for m in members if m.name and m.name != "."}
        archive.extractall(dest, filter="fully_trusted", numeric_owner=True)
    if len(tops) != 1:
        raise AssertionError(f"{tarball.name} has {len(tops)} top-level entries: {sorted(tops)}")
    return dest / tops.pop()
