"""Real processes for the local actuator's tests: a Python child with a few idle threads
(and optionally a grandchild), stopped at the end of each test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

#: a child that starts THREADS idle threads (and a grandchild of its own when asked), says
#: "ready <grandchild pid or 0>" and waits until its standard input closes
CHILD = """
import subprocess, sys, threading
stop = threading.Event()
threads = [threading.Thread(target=stop.wait, daemon=True) for _ in range(int(sys.argv[1]))]
for thread in threads:
    thread.start()
grandchild = None
if sys.argv[2] == "1":
    grandchild = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
print("ready", grandchild.pid if grandchild else 0, flush=True)
sys.stdin.read()
stop.set()
if grandchild is not None:
    grandchild.stdin.close()
    grandchild.wait(timeout=10)
"""


@dataclass
class Child:
    """A running child: its process, and its grandchild's pid (0 without one)."""

    process: subprocess.Popen[str]
    grandchild: int

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def workload(self) -> str:
        return f"pid-{self.pid}"


def tasks(pid: int) -> list[int]:
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))


def cpus_allowed(pid: int) -> dict[int, str]:
    """``Cpus_allowed_list`` of every thread of ``pid``, read from /proc."""
    found = {}
    for tid in tasks(pid):
        with open(f"/proc/{pid}/task/{tid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Cpus_allowed_list:"):
                    found[tid] = line.split(":", 1)[1].strip()
    return found


@contextmanager
def running_child(threads: int = 3, grandchild: bool = False) -> Iterator[Child]:
    """Start the child, wait for its "ready" line, stop it (and its grandchild) afterwards."""
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(threads), "1" if grandchild else "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().split()
        assert line and line[0] == "ready", line
        yield Child(process, int(line[1]))
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture
def child() -> Iterator[Child]:
    """A child with three idle threads."""
    with running_child() as started:
        yield started


def allowed_cpus() -> list[int]:
    """CPUs this test process may run on."""
    return sorted(os.sched_getaffinity(0))
