"""Test helpers shared by several test modules (fixture locations, tarball extraction)."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
HWLOC = FIXTURES / "hwloc"
HWLOC_LINUX = HWLOC / "linux"
HWLOC_XML = HWLOC / "xml"


def extract_snapshot(tarball: Path, dest: Path, only: re.Pattern[str] | None = None) -> Path:
    """Unpack an hwloc sysfs/procfs tarball under ``dest`` and return its one top-level dir.

    The top-level directory is not always named like the tarball, so it is read from the
    archive. Symlinks inside the tree are kept (sysfs is full of them). With ``only``, just
    the members whose path it matches are written (large snapshots unpack much faster).
    """
    with tarfile.open(tarball, "r:bz2") as archive:
        members = archive.getmembers()
        tops = {m.name.split("/", 1)[0] for m in members if m.name and m.name != "."}
        if len(tops) != 1:
            raise AssertionError(
                f"{tarball.name} has {len(tops)} top-level entries: {sorted(tops)}"
            )
        wanted = members if only is None else [m for m in members if only.match(m.name)]
        archive.extractall(dest, members=wanted, filter="fully_trusted", numeric_owner=True)
    return dest / tops.pop()
