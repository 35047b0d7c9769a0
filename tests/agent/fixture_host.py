"""A host tree under a test's tmp_path whose processes are real: the agent reads cgroups and
``/proc`` there, and changes the real threads those files name.

Each added process is a running child of the test: its ``stat`` and ``status`` are copied
from the real ``/proc``, its ``task/`` lists its real thread ids, and its ``cgroup`` file
puts it where the test says (a Slurm job, a pod...). The cgroup tree (v2 unified, or v1 with
cpuset and memory hierarchies) holds the cpuset files a scheduler would have written, so a
test can tell whether the agent wrote them.
"""

from __future__ import annotations

import os
from pathlib import Path

from toposcope.config import HostPaths
from toposcope.cpulist import format_cpulist

V2_MOUNTINFO = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
V1_MOUNTINFO = (
    "31 25 0:27 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset\n"
    "32 25 0:28 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n"
)


class FixtureHost:
    """A rootfs and procfs under ``root`` (the real sysfs, for online CPUs and nodes)."""

    def __init__(self, root: Path, version: int = 2) -> None:
        self.root = root
        self.version = version
        self.proc = root / "proc"
        (self.proc / "1").mkdir(parents=True)
        (self.proc / "1" / "mountinfo").write_text(V2_MOUNTINFO if version == 2 else V1_MOUNTINFO)
        self.paths = HostPaths(sysfs=Path("/sys"), procfs=self.proc, rootfs=root)

    def hierarchies(self) -> list[Path]:
        """The mounted hierarchies' directories (the cpuset one first)."""
        base = self.root / "sys" / "fs" / "cgroup"
        return [base] if self.version == 2 else [base / "cpuset", base / "memory"]

    def cpuset_dir(self, cgroup: str) -> Path:
        """The directory of cgroup path ``cgroup`` in the cpuset hierarchy."""
        return self.hierarchies()[0] / cgroup.strip("/")

    def add_cgroup(self, cgroup: str, cpus: list[int], mems: list[int], pids: list[int]) -> None:
        """Cgroup ``cgroup`` in every hierarchy with its processes, and cpuset files in it and
        in each ancestor that has none yet (what a scheduler allocated).
        """
        for hierarchy in self.hierarchies():
            directory = hierarchy / cgroup.strip("/")
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in pids))
        if self.version == 2:
            names = ("cpuset.cpus", "cpuset.mems", "cpuset.cpus.effective", "cpuset.mems.effective")
        else:
            names = ("cpuset.cpus", "cpuset.mems", "cpuset.effective_cpus", "cpuset.effective_mems")
        parts = [p for p in cgroup.split("/") if p]
        for depth in range(1, len(parts) + 1):  # every cgroup has its cpuset, as in the kernel
            directory = self.cpuset_dir("/".join(parts[:depth]))
            for name in names:
                if not (directory / name).exists():
                    values = mems if "mems" in name else cpus
                    (directory / name).write_text(format_cpulist(values) + "\n")
        for pid in pids:
            self.add_process(pid, cgroup)

    def add_process(self, pid: int, cgroup: str, environ: bytes = b"") -> None:
        """Real process ``pid`` (its threads, stat and status) living in cgroup ``cgroup``."""
        directory = self.proc / str(pid)
        (directory / "task").mkdir(parents=True, exist_ok=True)
        for name in ("stat", "status"):
            (directory / name).write_bytes(Path(f"/proc/{pid}/{name}").read_bytes())
        for tid in os.listdir(f"/proc/{pid}/task"):
            (directory / "task" / tid).mkdir(exist_ok=True)
        if self.version == 2:
            (directory / "cgroup").write_text(f"0::{cgroup}\n")
        else:
            (directory / "cgroup").write_text(f"4:memory:{cgroup}\n3:cpuset:{cgroup}\n")
        (directory / "environ").write_bytes(environ)

    def cgroup_files(self) -> dict[str, str]:
        """Every file of the cgroup tree and its text (to show what the agent wrote)."""
        found = {}
        for hierarchy in self.hierarchies():
            for path in sorted(hierarchy.rglob("*")):
                if path.is_file():
                    found[str(path.relative_to(self.root))] = path.read_text()
        return found
