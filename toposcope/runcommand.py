"""Running a command from a list of arguments, bounded in time and in what it prints.

The Slurm backend and the simulator's Slurm mirror run Slurm's commands (``squeue``,
``sbatch``...) the same way: never through a shell, with a timeout, with the command's
error text kept short, and with an output bound that is checked (an answer over it is an
error, never silently cut). :func:`run_command` does that once; its errors tell apart a
command that could not run or finish (:class:`CommandNotRunError`), one that failed
(:class:`CommandExitError`) and one that printed too much (:class:`CommandOutputError`), so
each caller maps them onto its own error classes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence

from toposcope.errors import ToposcopeError


class CommandError(ToposcopeError):
    """A command did not give its output; the message names the command and why."""


class CommandNotRunError(CommandError):
    """The command could not start (missing, not executable) or did not finish in time."""


class CommandExitError(CommandError):
    """The command exited with a status other than 0; the message ends with its error text."""


class CommandOutputError(CommandError):
    """The command printed more than the bound."""


def run_command(
    argv: Sequence[str],
    *,
    shown: str,
    timeout_s: float,
    max_output: int,
    env: Mapping[str, str] | None = None,
    error_chars: int = 300,
) -> str:
    """The standard output of ``argv`` (run without a shell) as text.

    ``shown`` names the command in messages; the last ``error_chars`` characters of its
    standard error end the message of a failed command.
    """
    try:
        done = subprocess.run(
            list(argv),
            env=None if env is None else dict(env),
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CommandNotRunError(f"{shown} did not finish in {timeout_s:g} s") from None
    except OSError as exc:
        raise CommandNotRunError(f"cannot run {shown}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()[-error_chars:]
        raise CommandExitError(f"{shown} exited with {done.returncode}: {said or 'no message'}")
    if len(done.stdout) > max_output:
        raise CommandOutputError(f"{shown} printed more than {max_output} bytes")
    return done.stdout.decode(errors="replace")
