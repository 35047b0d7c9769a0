"""A real Slurm cluster on one host, on loopback, with fake GPUs: for the tests and the stack.

:class:`LocalCluster` writes the files of :mod:`toposcope.slurm.clusterfiles` into a state
directory, then starts the cluster's own munged, slurmctld, one ``slurmd -N <node>`` per node
(Debian's Slurm is built for several slurmd on one host) and slurmrestd (as ``nobody``, JWT
authentication), and waits until every node is idle and slurmrestd answers. :meth:`stop`
cancels the jobs, shuts the daemons down (``scontrol shutdown``), kills what is left by the
pids it recorded, removes the nodes' cgroup directories and the state directory. How each
daemon is started, recorded and ended is :mod:`toposcope.slurm.clusterprocesses`. Nothing
waits on a fixed sleep: every wait polls a condition until a deadline.

It needs root (mknod, slurmd) and the Debian packages ``slurm-wlm slurmrestd
slurm-wlm-jwt-plugin munge``; :func:`missing_requirements` says what is lacking. The module
uses the standard library only, so the stack and the tests can run it without the rest of
toposcope.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from toposcope.slurm.clusterfiles import ClusterLayout, ClusterSpec, Ports, write_files
from toposcope.slurm.clusterprocesses import DaemonTable
from toposcope.slurm.daemons import (
    CGROUP_ROOT,
    ClusterError,
    closed_parent,
    free_ports,
    log_tail,
    missing_requirements,
    remove_cgroup_tree,
    wait_for,
)

#: one slurm.conf ``Key=value`` line, as :meth:`LocalCluster.start`'s ``extra_conf`` takes
_CONF_LINE = re.compile(r"[A-Za-z][A-Za-z0-9]*=[^\s#=][^\n#]*")


class LocalCluster:
    """One local Slurm cluster; a context manager that starts it and always stops it."""

    def __init__(self, state_dir: str | Path, spec: ClusterSpec | None = None) -> None:
        self.spec = spec or ClusterSpec()
        self.layout = ClusterLayout(Path(state_dir).absolute())
        self.ports: Ports | None = None
        self.cgroups = self.spec.cgroups
        if self.cgroups is None:
            self.cgroups = (CGROUP_ROOT / "freezer").is_dir()
        self._daemons = DaemonTable()
        self.started_in_s: float | None = None
        self.stopped_in_s: float | None = None

    # -- what other code uses ------------------------------------------------------------

    @property
    def node_names(self) -> tuple[str, ...]:
        """The nodes' names."""
        return self.spec.node_names

    @property
    def rest_url(self) -> str:
        """slurmrestd's base URL (``http://127.0.0.1:PORT``)."""
        if self.ports is None:
            raise ClusterError("the cluster has not been started")
        return f"http://127.0.0.1:{self.ports.rest}"

    def env(self) -> dict[str, str]:
        """An environment for Slurm commands aimed at this cluster (no other SLURM_ variables)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.layout.slurm_conf)
        return env

    def command(self, *argv: str, check: bool = True, timeout_s: float = 30.0) -> str:
        """Run a Slurm command against this cluster; its output (ClusterError on failure)."""
        done = subprocess.run(
            list(argv), env=self.env(), capture_output=True, timeout=timeout_s, check=False
        )
        if check and done.returncode != 0:
            error = done.stderr.decode(errors="replace").strip()
            raise ClusterError(f"{' '.join(argv)} exited with {done.returncode}: {error}")
        return done.stdout.decode(errors="replace")

    def token(self, user: str = "root", lifespan_s: int = 3600) -> str:
        """A JWT for ``user`` valid ``lifespan_s`` seconds (``scontrol token``)."""
        text = self.command("scontrol", "token", f"username={user}", f"lifespan={lifespan_s}")
        return text.strip().removeprefix("SLURM_JWT=")

    def sbatch(self, *args: str) -> int:
        """Submit a batch job (output under the state directory); its job id."""
        text = self.command(
            "sbatch",
            "--parsable",
            f"--output={self.layout.out}/%j.out",
            f"--chdir={self.layout.out}",
            *args,
        )
        return int(text.strip().split(";")[0])

    def node_states(self) -> dict[str, str]:
        """Node name -> Slurm's long state (``idle``, ``mixed``...), from ``sinfo``."""
        text = self.command("sinfo", "-h", "-N", "-o", "%N %T", check=False, timeout_s=10)
        return dict(line.split(None, 1) for line in text.splitlines() if " " in line)

    def job_ids(self) -> list[int]:
        """The ids of every job slurmctld knows (any state but finished)."""
        text = self.command("squeue", "-h", "-o", "%A", check=False, timeout_s=10)
        return [int(word) for word in text.split() if word.isdigit()]

    def pids(self) -> dict[str, int]:
        """Daemon -> pid of the daemons that are running."""
        return self._daemons.running()

    def rss_kib(self) -> dict[str, int]:
        """Daemon -> resident memory in KiB (``VmRSS``)."""
        found: dict[str, int] = {}
        for name, pid in self.pids().items():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    found[name] = int(line.split()[1])
        return found

    def cgroup_dirs(self) -> list[Path]:
        """The cgroup directories Slurm made for these nodes (``slurm_<node>``), if any."""
        return sorted(
            path
            for name in self.node_names
            for path in CGROUP_ROOT.glob(f"*/slurm_{name}")
            if path.is_dir()
        )

    # -- starting ------------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(
        self,
        timeout_s: float = 60.0,
        gres_conf: str | None = None,
        extra_conf: Sequence[str] = (),
    ) -> None:
        """Write the files and start every daemon; returns once the nodes are idle.

        ``gres_conf`` replaces the generated gres.conf (its ``File=`` may name
        ``self.layout.dev``, where the fake devices are). ``extra_conf`` lines
        (``Key=value``, e.g. ``PriorityType=priority/multifactor``) are appended to slurm.conf,
        for a test that needs an option the shared cluster lacks. On failure everything
        started so far is stopped and :class:`ClusterError` says what failed, quoting the
        daemon's log.
        """
        for line in extra_conf:
            if not _CONF_LINE.fullmatch(line):
                raise ClusterError(f"extra slurm.conf line {line[:80]!r} is not one Key=value")
        missing = missing_requirements()
        if missing:
            raise ClusterError("cannot run a local Slurm cluster: missing " + "; ".join(missing))
        self._check_state_dir()
        self._clear_cgroups()
        began = time.monotonic()
        ports = free_ports(len(self.node_names) + 2)
        self.ports = Ports(ctld=ports[0], nodes=tuple(ports[2:]), rest=ports[1])
        try:
            write_files(self.spec, self.layout, self.ports, bool(self.cgroups), gres_conf)
            if extra_conf:
                with self.layout.slurm_conf.open("a", encoding="utf-8") as conf:
                    conf.write("".join(f"{line}\n" for line in extra_conf))
            self._daemons.start_munged(self.layout.munge, self.env(), timeout_s)
            self._daemon("slurmctld", "slurmctld", self.layout.run / "slurmctld.pid", timeout_s)
            for name in self.node_names:
                self._daemon(
                    f"slurmd {name}",
                    "slurmd",
                    self.layout.run / f"slurmd-{name}.pid",
                    timeout_s,
                    "-N",
                    name,
                )
            self._wait_idle(timeout_s)
            if self.spec.rest:
                self._start_rest(timeout_s)
        except BaseException:
            with contextlib.suppress(ClusterError):  # the first failure is the one to report
                self.stop()
            raise
        self.started_in_s = time.monotonic() - began

    def _check_state_dir(self) -> None:
        self.layout.root.mkdir(parents=True, exist_ok=True)
        if self.spec.rest:
            closed = closed_parent(self.layout.root)
            if closed is not None:
                raise ClusterError(
                    f"slurmrestd runs as nobody and must read {self.layout.slurm_conf}, but "
                    f"{closed} is closed to other users: choose a state directory others can enter"
                )

    def _clear_cgroups(self) -> None:
        """Remove empty leftovers of earlier runs; refuse when another Slurm uses the names."""
        for path in self.cgroup_dirs():
            if remove_cgroup_tree(path):
                continue
            raise ClusterError(
                f"{path} holds processes: another Slurm on this host uses node names "
                f"{', '.join(self.node_names)}; give this cluster another node prefix"
            )

    def _daemon(self, name: str, binary: str, pid_file: Path, timeout_s: float, *args: str) -> None:
        log = self.layout.log / (f"{binary}-{args[-1]}.log" if args else f"{binary}.log")
        argv = [binary, *args, "-f", str(self.layout.slurm_conf)]
        self._daemons.start_forking(name, argv, pid_file, log, self.env(), timeout_s)

    def _wait_idle(self, timeout_s: float) -> None:
        def idle() -> bool:
            for name in self._daemons.names():
                if name not in self.pids():
                    log = self.layout.log / (
                        "slurmctld.log" if name == "slurmctld" else f"slurmd-{name.split()[-1]}.log"
                    )
                    raise ClusterError(f"{name} exited; its log ends:\n{log_tail(log)}")
            states = self.node_states()
            return all(states.get(n) == "idle" for n in self.node_names)

        try:
            wait_for(idle, "every node idle", timeout_s)
        except ClusterError as exc:
            raise ClusterError(
                f"{exc} (states: {self.node_states()}); slurmctld's log ends:\n"
                f"{log_tail(self.layout.log / 'slurmctld.log')}"
            ) from None

    def _start_rest(self, timeout_s: float) -> None:
        assert self.ports is not None
        env = {**self.env(), "SLURM_JWT": "daemon"}
        log = self.layout.log / "slurmrestd.log"
        self._daemons.start_rest(self.layout.slurm_conf, self.ports.rest, env, log, timeout_s)

    # -- stopping ------------------------------------------------------------------------

    def stop(self, timeout_s: float = 60.0, *, remove_state: bool = True) -> None:
        """Cancel the jobs, stop every daemon, remove cgroup directories and the state.

        Safe to call more than once and after a failed start. Raises :class:`ClusterError`
        when a process or cgroup directory outlives it.
        """
        began = time.monotonic()
        if "slurmctld" in self.pids():
            self._cancel_jobs(timeout_s)
            self.command("scontrol", "shutdown", check=False, timeout_s=10)
        self._daemons.terminate_rest()
        for name in [n for n in self._daemons.names() if n != "munged"]:
            self._daemons.end(name, timeout_s)
        leftovers = self._clear_cgroup_processes(timeout_s)
        if "munged" in self._daemons.names():
            self._daemons.end("munged", timeout_s, asked=False)
        self._daemons.reap_rest(timeout_s)
        alive = self.pids()
        if remove_state and not alive:
            shutil.rmtree(self.layout.root, ignore_errors=True)
        self.stopped_in_s = time.monotonic() - began
        if alive or leftovers:
            raise ClusterError(
                f"after stopping, still running: {alive or 'nothing'}; cgroup directories "
                f"left: {[str(p) for p in leftovers] or 'none'}"
            )

    def _cancel_jobs(self, timeout_s: float) -> None:
        jobs = self.job_ids()
        if not jobs:
            return
        self.command("scancel", *map(str, jobs), check=False)
        # if some job outlives this, shutdown and the cgroup sweep below end what is left
        with contextlib.suppress(ClusterError):
            wait_for(lambda: not self.job_ids(), "every job cancelled", timeout_s)

    def _clear_cgroup_processes(self, timeout_s: float) -> list[Path]:
        """Kill what still runs in the nodes' cgroups, remove the directories; what is left."""
        for path in self.cgroup_dirs():
            for procs in path.rglob("cgroup.procs"):
                for word in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(word), signal.SIGKILL)
        try:
            wait_for(
                lambda: all(remove_cgroup_tree(p) for p in self.cgroup_dirs()),
                "cgroup directories removed",
                timeout_s / 3,
            )
        except ClusterError:
            return self.cgroup_dirs()
        return []
