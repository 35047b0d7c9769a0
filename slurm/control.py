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
from toposcope.rm.plan import CommandStep, HttpStep, Step
from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.errors import SlurmError
from toposcope.slurm.rest import API_VERSION, SlurmRestClient

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
    """Changes jobs of one Slurm cluster (see the module docstring).

    Each change is first a step of a plan (:mod:`toposcope.rm.plan`), built by the
    ``*_step`` methods from checked values; :meth:`run` carries out exactly such a step, and
    ``--dry-run`` prints the same steps.
    """

    def __init__(self, commands: SlurmCommands, rest: SlurmRestClient | None = None) -> None:
        self.commands = commands
        self.rest = rest
        self.changes: list[str] = []

    def _rest_url(self, path: str) -> str:
        assert self.rest is not None
        return f"{self.rest.url}/slurm/{API_VERSION}/{path}"

    def run(self, step: Step) -> None:
        """Carry out one step of a plan: a ``scontrol``/``scancel`` command, or a request
        to this cluster's slurmrestd; anything else is refused before Slurm sees it.
        """
        if isinstance(step, CommandStep) and step.argv[:1] in (("scontrol",), ("scancel",)):
            self.changes.append(" ".join(step.argv))
            self.commands.run(*step.argv)
            return
        if isinstance(step, HttpStep) and step.api == "slurmrestd" and self.rest is not None:
            prefix = self._rest_url("")
            if step.url.startswith(prefix):
                path = step.url.removeprefix(prefix)
                self.changes.append(f"{step.method} {path} {step.body}")
                self.rest.request(step.method, path, step.body)
                return
        raise InvalidChangeError(f"not a change of this Slurm cluster: {step}")

    def _update_step(self, job_id: int, rest_body: dict[str, object], *assignments: str) -> Step:
        """One job update: through slurmrestd when configured, else ``scontrol update``."""
        job = check_job_id(job_id)
        if self.rest is None:
            return CommandStep(("scontrol", "update", f"JobId={job}", *assignments))
        user = (("X-SLURM-USER-NAME", self.rest.user),)
        url = self._rest_url(f"job/{job}")
        return HttpStep("POST", url, rest_body, api="slurmrestd", headers=user)

    def required_nodes_step(self, job_id: int, nodes: Sequence[str]) -> Step:
        """Set a pending job's ``ReqNodeList`` (slurmrestd's ``nodelist``); empty clears it."""
        listed = _nodes(nodes)
        return self._update_step(job_id, {"nodelist": listed}, f"ReqNodeList={listed}")

    def time_limit_step(self, job_id: int, minutes: int) -> Step:
        """Set a job's time limit, in minutes (``TimeLimit=``; slurmrestd's ``time_limit``)."""
        limit = check_minutes(minutes)
        return self._update_step(job_id, {"time_limit": limit}, f"TimeLimit={limit}")

    @staticmethod
    def requeue_hold_step(job_id: int) -> Step:
        """``scontrol requeuehold``: end a running job and hold it in the queue."""
        return CommandStep(("scontrol", "requeuehold", check_job_id(job_id)))

    @staticmethod
    def restart_on_step(job_id: int, node: str) -> Step:
        """Steer a held, requeued job to ``node`` and let it start as soon as it is released."""
        job = check_job_id(job_id)
        listed = _nodes([node])
        return CommandStep(
            ("scontrol", "update", f"JobId={job}", f"ReqNodeList={listed}", "StartTime=now")
        )

    @staticmethod
    def release_step(job_id: int) -> Step:
        """``scontrol release``: let a held job be scheduled again."""
        return CommandStep(("scontrol", "release", check_job_id(job_id)))

    @staticmethod
    def signal_step(job_id: int, name: str) -> Step:
        """``scancel --full --signal=NAME``: signal the batch script and every step of a job."""
        return CommandStep(
            ("scancel", "--full", f"--signal={check_signal(name)}", check_job_id(job_id))
        )

    def set_required_nodes(self, job_id: int, nodes: Sequence[str]) -> None:
        """Carry out :meth:`required_nodes_step`."""
        self.run(self.required_nodes_step(job_id, nodes))

    def set_time_limit(self, job_id: int, minutes: int) -> None:
        """Carry out :meth:`time_limit_step`."""
        self.run(self.time_limit_step(job_id, minutes))

    def requeue_hold(self, job_id: int) -> None:
        """Carry out :meth:`requeue_hold_step`."""
        self.run(self.requeue_hold_step(job_id))

    def restart_on(self, job_id: int, node: str) -> None:
        """Carry out :meth:`restart_on_step`."""
        self.run(self.restart_on_step(job_id, node))

    def release(self, job_id: int) -> None:
        """Carry out :meth:`release_step`."""
        self.run(self.release_step(job_id))

    def send_signal(self, job_id: int, name: str) -> None:
        """Carry out :meth:`signal_step`."""
        self.run(self.signal_step(job_id, name))
