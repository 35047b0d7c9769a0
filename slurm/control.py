"""Every change toposcope makes to Slurm jobs, through one runner.

:class:`SlurmControl` is the only code that changes Slurm. Each change names one job by its
id (digits only) and, where it moves the job, nodes by their host names
(:func:`toposcope.identity.names.check_node_name`); anything else is refused before Slurm sees it.
Commands are run through :class:`~toposcope.slurm.commands.SlurmCommands` (an argument list,
never a shell; a timeout; bounded output); where slurmrestd is configured, the changes it can
make (a pending job's node list, a time limit) go through it
(``POST /slurm/v0.0.38/job/{id}``), the others through ``scontrol`` and ``scancel``
(slurmrestd v0.0.38 can neither requeue nor release a job).

:attr:`SlurmControl.changes` lists every change sent, in order, as the command line (or the
request) it was, for logs and for checking that a repeated request changed nothing.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence

from toposcope.identity.names import check_node_name
from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.errors import SlurmError
from toposcope.slurm.rest import SlurmRestClient

#: the largest job id Slurm hands out (job ids are 32-bit; the top values are reserved)
MAX_JOB_ID = 0xFFFF_FFF0
#: the longest time limit toposcope sets, minutes (one year)
MAX_MINUTES = 366 * 24 * 60


class InvalidChangeError(SlurmError, ValueError):
    """A change refused before it reached Slurm: a malformed job id, node name or signal."""


def check_job_id(job_id: object) -> str:
    """``job_id`` as Slurm's decimal text, when it is a job id (a whole number 1..MAX)."""
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id <= MAX_JOB_ID:
        raise InvalidChangeError(f"job id {job_id!r} is not a whole number from 1 to {MAX_JOB_ID}")
    return str(job_id)


def check_minutes(minutes: object) -> int:
    """``minutes`` when it is a time limit toposcope may set (1 minute to a year)."""
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 0 < minutes <= MAX_MINUTES:
        raise InvalidChangeError(f"time limit {minutes!r} is not 1 to {MAX_MINUTES} minutes")
    return minutes


def check_signal(name: object) -> str:
    """The signal's name without ``SIG`` (``USR1``), when ``name`` names a signal."""
    text = str(name).strip().upper().removeprefix("SIG") if isinstance(name, str) else ""
    if f"SIG{text}" not in signal.Signals.__members__:
        raise InvalidChangeError(f"{name!r} is not a signal name (USR1, TERM, INT...)")
    return text


def _nodes(nodes: Sequence[str]) -> str:
    try:
        return ",".join(check_node_name(node) for node in nodes)
    except ValueError as exc:
        raise InvalidChangeError(str(exc)) from None


class SlurmControl:
    """Changes jobs of one Slurm cluster (see the module docstring)."""

    def __init__(self, commands: SlurmCommands, rest: SlurmRestClient | None = None) -> None:
        self.commands = commands
        self.rest = rest
        self.changes: list[str] = []

    def _run(self, name: str, *args: str) -> None:
        self.changes.append(" ".join((name, *args)))
        self.commands.run(name, *args)

    def _update(self, job_id: int, rest_body: dict[str, object], *assignments: str) -> None:
        """Update one job: through slurmrestd when configured, else ``scontrol update``."""
        job = check_job_id(job_id)
        if self.rest is None:
            self._run("scontrol", "update", f"JobId={job}", *assignments)
            return
        self.changes.append(f"POST job/{job} {rest_body}")
        self.rest.request("POST", f"job/{job}", rest_body)

    def set_required_nodes(self, job_id: int, nodes: Sequence[str]) -> None:
        """Set a pending job's ``ReqNodeList`` (slurmrestd's ``nodelist``); empty clears it."""
        listed = _nodes(nodes)
        self._update(job_id, {"nodelist": listed}, f"ReqNodeList={listed}")

    def set_time_limit(self, job_id: int, minutes: int) -> None:
        """Set a job's time limit, in minutes (``TimeLimit=``; slurmrestd's ``time_limit``)."""
        limit = check_minutes(minutes)
        self._update(job_id, {"time_limit": limit}, f"TimeLimit={limit}")

    def requeue_hold(self, job_id: int) -> None:
        """``scontrol requeuehold``: end a running job and hold it in the queue."""
        self._run("scontrol", "requeuehold", check_job_id(job_id))

    def restart_on(self, job_id: int, node: str) -> None:
        """Steer a held, requeued job to ``node`` and let it start as soon as it is released."""
        job = check_job_id(job_id)
        listed = _nodes([node])
        self._run("scontrol", "update", f"JobId={job}", f"ReqNodeList={listed}", "StartTime=now")

    def release(self, job_id: int) -> None:
        """``scontrol release``: let a held job be scheduled again."""
        self._run("scontrol", "release", check_job_id(job_id))

    def send_signal(self, job_id: int, name: str) -> None:
        """``scancel --full --signal=NAME``: signal the batch script and every step of a job."""
        self._run("scancel", "--full", f"--signal={check_signal(name)}", check_job_id(job_id))
