"""The daemons of one local Slurm cluster: starting them, knowing their pids, ending them.

:class:`DaemonTable` is what :class:`toposcope.slurm.localcluster.LocalCluster` runs its
daemons with: munged, slurmctld and the slurmds fork into the background and write a pid
file, which the table waits for; slurmrestd stays in the foreground as a child process, and
the table waits until it answers HTTP. The table tells which daemons still run (a recorded
pid only counts while it still runs the recorded binary) and ends them: wait, then SIGTERM,
then SIGKILL. Nothing waits on a fixed sleep: every wait polls a condition until a deadline.

Like :mod:`toposcope.slurm.localcluster`, this module uses the standard library only.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

from toposcope.slurm.daemons import ClusterError, is_running, log_tail, wait_for


class DaemonTable:
    """The daemons one cluster started, by name (``munged``, ``slurmd n1``...), in start order.

    One table per cluster, so that stopping ends exactly the processes this cluster started,
    never another Slurm's on the same host.
    """

    def __init__(self) -> None:
        self._pids: dict[str, tuple[int, str]] = {}
        self._rest: subprocess.Popen[bytes] | None = None

    def names(self) -> list[str]:
        """Every daemon started, running or not, in start order."""
        return list(self._pids)

    def running(self) -> dict[str, int]:
        """Daemon -> pid of the daemons that are running."""
        return {name: pid for name, (pid, binary) in self._pids.items() if is_running(pid, binary)}

    def start_munged(self, munge: Path, env: dict[str, str], timeout_s: float) -> None:
        """Start the cluster's own munged (socket, key, pid and log under ``munge``)."""
        log = munge / "munged.log"
        argv = [
            "munged",
            f"--socket={munge / 'munge.socket'}",
            f"--key-file={munge / 'munge.key'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--seed-file={munge / 'munged.seed'}",
            f"--log-file={log}",
        ]
        self.start_forking("munged", argv, munge / "munged.pid", log, env, timeout_s)

    def start_forking(
        self,
        name: str,
        argv: list[str],
        pid_file: Path,
        log: Path,
        env: dict[str, str],
        timeout_s: float,
    ) -> None:
        """Start a daemon that forks; returns once ``pid_file`` names a running ``argv[0]``."""
        self._launch(name, argv, log, env)
        self._record(name, argv[0], pid_file, log, timeout_s)

    def _launch(self, name: str, argv: list[str], log: Path, env: dict[str, str]) -> None:
        """Run a daemon that forks into the background; its launcher must exit with 0."""
        done = subprocess.run(argv, env=env, capture_output=True, timeout=30, check=False)
        if done.returncode != 0:
            error = done.stderr.decode(errors="replace").strip()
            said = f" ({error})" if error else ""
            raise ClusterError(f"{name} did not start{said}; its log ends:\n{log_tail(log)}")

    def _record(self, name: str, binary: str, pid_file: Path, log: Path, timeout_s: float) -> None:
        """Wait until ``pid_file`` names a running ``binary``; remember it as ``name``."""

        def pid() -> int | None:
            try:
                number = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                return None
            return number if is_running(number, binary) else None

        try:
            self._pids[name] = (wait_for(pid, f"{name}'s pid file", timeout_s), binary)
        except ClusterError as exc:
            raise ClusterError(f"{exc}; its log ends:\n{log_tail(log)}") from None

    def start_rest(
        self, slurm_conf: Path, port: int, env: dict[str, str], log: Path, timeout_s: float
    ) -> None:
        """Start slurmrestd (JWT authentication, as ``nobody``) on loopback ``port`` as a child.

        Its output goes to ``log``; returns once ``port`` answers HTTP.
        """
        argv = [
            "slurmrestd",
            "-f",
            str(slurm_conf),
            "-a",
            "rest_auth/jwt",
            "-s",
            "openapi/v0.0.38",
            "-u",
            "nobody",
            f"127.0.0.1:{port}",
        ]
        with log.open("wb") as out:
            self._rest = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._pids["slurmrestd"] = (self._rest.pid, "slurmrestd")

        def answers() -> bool:
            if self._rest is not None and self._rest.poll() is not None:
                raise ClusterError(f"slurmrestd exited; its log ends:\n{log_tail(log)}")
            with socket.socket() as sock:
                sock.settimeout(1.0)
                try:
                    sock.connect(("127.0.0.1", port))
                    sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
                    return sock.recv(16).startswith(b"HTTP/")
                except OSError:
                    return False

        wait_for(answers, "slurmrestd answering", timeout_s)

    def terminate_rest(self) -> None:
        """Ask slurmrestd to exit (SIGTERM) if it runs; :meth:`reap_rest` collects it."""
        if self._rest is not None and self._rest.poll() is None:
            self._rest.terminate()

    def reap_rest(self, timeout_s: float) -> None:
        """Wait for the slurmrestd child to exit, if one was started."""
        if self._rest is not None:
            self._rest.wait(timeout=timeout_s)

    def end(self, name: str, timeout_s: float, *, asked: bool = True) -> None:
        """Wait for daemon ``name`` to exit (``asked`` to already), then SIGTERM, SIGKILL it."""
        pid, binary = self._pids[name]
        signals = (
            (None, signal.SIGTERM, signal.SIGKILL) if asked else (signal.SIGTERM, signal.SIGKILL)
        )
        for sig in signals:
            if sig is not None and is_running(pid, binary):
                os.kill(pid, sig)
            try:
                wait_for(lambda: not is_running(pid, binary), f"{name} exiting", timeout_s / 3)
                return
            except ClusterError:
                continue
