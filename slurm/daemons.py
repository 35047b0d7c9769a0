"""Process tools of the local Slurm cluster: requirements, waiting, pids, cgroup directories.

The core's waiting loop (:mod:`toposcope.waiting`) does the waiting; the rest is Slurm's own.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from toposcope.waiting import NotReadyError, wait_until

T = TypeVar("T")

#: The commands the cluster runs.
BINARIES = ("munged", "slurmctld", "slurmd", "slurmrestd", "sinfo", "squeue", "scontrol", "sbatch")
#: Where Debian and Ubuntu install the JWT plugin (package slurm-wlm-jwt-plugin).
JWT_PLUGIN_GLOB = "/usr/lib/*/slurm-wlm/auth_jwt.so"
CGROUP_ROOT = Path("/sys/fs/cgroup")
_POLL_S = 0.05
_LOG_TAIL = 1500


class ClusterError(RuntimeError):
    """The cluster could not be started or stopped; the message quotes the relevant log."""


def missing_requirements() -> list[str]:
    """What this host lacks to run a local cluster (empty when nothing is missing)."""
    missing = [f"the {name} command" for name in BINARIES if shutil.which(name) is None]
    if not glob.glob(JWT_PLUGIN_GLOB):
        missing.append(f"Slurm's JWT plugin ({JWT_PLUGIN_GLOB}, package slurm-wlm-jwt-plugin)")
    if os.geteuid() != 0:
        missing.append("root privileges (mknod of the fake GPUs, slurmd)")
    return missing


def wait_for(check: Callable[[], T | None], what: str, timeout_s: float) -> T:
    """Poll ``check`` until it returns something truthy; the value.

    The core's :func:`toposcope.waiting.wait_until`, with :class:`ClusterError` naming
    ``what`` when ``timeout_s`` passes first.
    """
    try:
        value = wait_until(check, timeout_s, interval_s=_POLL_S, what=what, errors=())
    except NotReadyError:
        raise ClusterError(f"{what}: not within {timeout_s:g} s") from None
    assert value is not None
    return value


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback TCP ports that were free a moment ago."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def is_running(pid: int, binary: str) -> bool:
    """Whether ``pid`` is still the ``binary`` process started (a reused pid is not)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return os.path.basename(command.decode(errors="replace")) == binary and state != "Z"


def log_tail(path: Path) -> str:
    """The end of a daemon's log, for error messages."""
    try:
        return path.read_text(errors="replace")[-_LOG_TAIL:]
    except OSError:
        return "(no log)"


def closed_parent(path: Path) -> Path | None:
    """The first parent of ``path`` other users cannot enter, or ``None``."""
    for directory in path.parents:
        if directory.exists() and not directory.stat().st_mode & stat.S_IXOTH:
            return directory
    return None


def remove_cgroup_tree(path: Path) -> bool:
    """Remove an empty cgroup directory tree (children first); whether it is gone."""
    for directory in sorted((p for p in path.rglob("*") if p.is_dir()), reverse=True):
        try:
            directory.rmdir()
        except OSError:
            return False
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
