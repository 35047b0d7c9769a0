"""Test helpers shared by several test modules (fixture locations, tarball extraction)."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
from collections.abc import Mapping
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


def modules_loaded_by(argv: list[str], env: Mapping[str, str] | None = None) -> set[str]:
    """The modules a fresh interpreter holds after ``toposcope ARGV`` (memory checks).

    Runs the real entry point in a subprocess, so nothing an earlier test imported counts.
    """
    probe = (
        "import sys\n"
        "from toposcope.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=None if env is None else dict(env),
    )
    return set(done.stdout.splitlines()[-1].split())


def holds_any(loaded: set[str], prefix: str) -> bool:
    """Whether ``loaded`` holds the module ``prefix`` or one of its submodules."""
    return any(m == prefix or m.startswith(f"{prefix}.") for m in loaded)
