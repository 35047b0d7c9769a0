"""What the operator allows toposcope to do to Slurm jobs, and the options that say it.

``--resource-manager slurm`` (``toposcope advise --apply``, ``toposcope advisor serve``) acts
only within these settings:

* **migration** moves only jobs that opted in: their ``--comment`` holds the word
  :data:`MIGRATABLE` and Slurm may requeue them; at most ``--slurm-max-migrations`` jobs are
  on the move at once (default 1; 0 turns migration off);
* **idle GPUs** are acted on only with ``--slurm-idle-action``: ``timelimit=MINUTES`` lets
  the job run at most MINUTES more (its time limit is lowered, never raised), and
  ``signal=NAME`` sends it a signal it handles (``scancel --full --signal=NAME``).
  Without it, a release is refused as not configured.

:func:`add_manager_options` declares these options with the connection's (``--slurm-url``...,
:mod:`toposcope.slurm.settings`); the advisor finds it through the
``toposcope.resource_manager_options`` entry point, so the options are declared once, here.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from toposcope.errors import UsageError
from toposcope.slurm.control import InvalidChangeError, check_minutes, check_signal
from toposcope.slurm.settings import add_slurm_options

#: the word a job's comment holds when the job checkpoints and may be requeued elsewhere
MIGRATABLE = "toposcope:migratable"
#: how many migrations may be under way at once unless ``--slurm-max-migrations`` says
DEFAULT_MAX_MIGRATIONS = 1
#: the most ``--slurm-max-migrations`` accepts
MAX_MIGRATIONS = 1000
#: how long a migration waits for Slurm to end a requeued job before steering it, seconds
DEFAULT_REQUEUE_WAIT_S = 90.0

_WORDS = re.compile(r"[^\s,;]+")


def opted_in(comment: str) -> bool:
    """Whether a job's comment holds the word :data:`MIGRATABLE` (words split at blanks,
    commas and semicolons).
    """
    return MIGRATABLE in _WORDS.findall(comment)


@dataclass(frozen=True)
class IdleAction:
    """What releasing a job's idle GPUs does: lower its time limit, or send it a signal."""

    minutes: int | None = None
    signal: str | None = None

    def describe(self) -> str:
        """The action as the option spells it (``timelimit=30``, ``signal=USR1``)."""
        return f"timelimit={self.minutes}" if self.minutes is not None else f"signal={self.signal}"


def parse_idle_action(text: str) -> IdleAction:
    """``timelimit=MINUTES`` or ``signal=NAME``; :class:`UsageError` naming the option."""
    key, equals, value = text.partition("=")
    try:
        if equals and key.strip() == "timelimit" and value.strip().isdigit():
            return IdleAction(minutes=check_minutes(int(value)))
        if equals and key.strip() == "signal":
            return IdleAction(signal=check_signal(value))
    except InvalidChangeError as exc:
        raise UsageError(f"--slurm-idle-action {text!r}: {exc}") from None
    raise UsageError(
        f"--slurm-idle-action {text!r} is neither timelimit=MINUTES nor signal=NAME "
        "(e.g. timelimit=30, signal=USR1)"
    )


@dataclass(frozen=True)
class ApplySettings:
    """The limits of acting through Slurm (see the module docstring).

    ``requeue_wait_s`` bounds how long a migration waits for Slurm to end the requeued job
    (its ``KillWait``) before steering it; after that the job is steered and released anyway.
    """

    idle_action: IdleAction | None = None
    max_migrations: int = DEFAULT_MAX_MIGRATIONS
    requeue_wait_s: float = DEFAULT_REQUEUE_WAIT_S


def add_manager_options(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """Declare the options of ``--resource-manager slurm``: the connection and the limits.

    ``--allow-insecure-token-file`` is the caller's (the advisor declares it already). With
    ``suppress`` the options default to absent, for sub-actions that inherit them.
    """
    add_slurm_options(parser, suppress=suppress, token_file_options=False)
    group = parser.add_argument_group("Slurm actions (--resource-manager slurm)")
    group.add_argument(
        "--slurm-idle-action",
        default=argparse.SUPPRESS if suppress else None,
        metavar="timelimit=MINUTES|signal=NAME",
        help="what releasing idle GPUs does to the job holding them: let it run at most "
        "MINUTES more, or send it a signal it handles (default: releases are refused)",
    )
    group.add_argument(
        "--slurm-max-migrations",
        type=int,
        default=argparse.SUPPRESS if suppress else DEFAULT_MAX_MIGRATIONS,
        metavar="N",
        help="jobs that may be requeued onto other nodes at once; only jobs whose comment "
        f"holds {MIGRATABLE} move (default {DEFAULT_MAX_MIGRATIONS}; 0: none)",
    )


def apply_settings_from_args(args: argparse.Namespace) -> ApplySettings:
    """The limits the options give (:class:`UsageError` for a malformed one)."""
    idle = getattr(args, "slurm_idle_action", None)
    most = getattr(args, "slurm_max_migrations", None)
    most = DEFAULT_MAX_MIGRATIONS if most is None else most
    if isinstance(most, bool) or not isinstance(most, int) or not 0 <= most <= MAX_MIGRATIONS:
        raise UsageError(f"--slurm-max-migrations must be from 0 to {MAX_MIGRATIONS}")
    return ApplySettings(
        idle_action=parse_idle_action(idle) if idle else None,
        max_migrations=most,
    )
