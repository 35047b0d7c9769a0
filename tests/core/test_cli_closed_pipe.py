"""A reader that closes the pipe early (``toposcope ... | head``) ends the command quietly.

The pipe's read end is closed before the command starts, so its first write finds no reader
whatever the timing: no traceback, exit status 141 (128 + SIGPIPE, what a shell shows for
git or coreutils in the same place).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from toposcope.cli import EXIT_BROKEN_PIPE


def run_into_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``python -m toposcope.cli ARGV`` with a standard output nobody reads."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "toposcope.cli", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)


def test_advise_list_policies_into_a_closed_pipe_ends_quietly() -> None:
    result = run_into_closed_pipe(["advise", "--list-policies"])
    assert result.stderr == ""
    assert result.returncode == EXIT_BROKEN_PIPE


def test_topology_into_a_closed_pipe_ends_quietly(hwloc_root: Callable[[str], Path]) -> None:
    result = run_into_closed_pipe(["topology", "--root", str(hwloc_root("16amd64-8n2c"))])
    assert result.stderr == ""
    assert result.returncode == EXIT_BROKEN_PIPE
