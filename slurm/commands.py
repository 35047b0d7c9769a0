"""Run Slurm's own commands (``squeue``, ``sinfo``, ``scontrol``) and return what they print.

This is the reader's way in where no slurmrestd is configured: any host with the Slurm client
tools and credentials (munge, or ``SLURM_JWT``) can read the cluster. ``slurm_conf`` selects
the cluster (``SLURM_CONF``); ``bin_dir`` where the commands are (else ``PATH``). Output is
bounded (:data:`MAX_OUTPUT`), each run has a timeout, and failures become
:class:`~toposcope.slurm.errors.SlurmError` naming the command and quoting its error output.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from toposcope.runcommand import (
    CommandExitError,
    CommandNotRunError,
    CommandOutputError,
    run_command,
)
from toposcope.slurm.errors import SlurmError, SlurmFormatError, SlurmUnavailableError

#: The most bytes a command may print before it is refused.
MAX_OUTPUT = 64 * 1024 * 1024


class SlurmCommands:
    """Runs Slurm client commands against one cluster."""

    def __init__(
        self,
        slurm_conf: str | Path | None = None,
        bin_dir: str | Path | None = None,
        *,
        timeout_s: float = 30.0,
    ) -> None:
        self.slurm_conf = None if slurm_conf is None else Path(slurm_conf)
        self.bin_dir = None if bin_dir is None else Path(bin_dir)
        self.timeout_s = timeout_s

    @property
    def source(self) -> str:
        """How reports name this way in (``commands`` plus the configuration file, if any)."""
        return "commands" + (f" (SLURM_CONF={self.slurm_conf})" if self.slurm_conf else "")

    def binary(self, name: str) -> str:
        """The path of command ``name``; :class:`SlurmUnavailableError` when it is missing."""
        found = shutil.which(name, path=str(self.bin_dir) if self.bin_dir else None)
        if found is None:
            where = f"in {self.bin_dir}" if self.bin_dir else "on PATH"
            raise SlurmUnavailableError(
                f"{name} is not installed {where}: install Slurm's client tools or configure "
                "slurmrestd (--slurm-url)"
            )
        return found

    def environment(self) -> dict[str, str]:
        """The environment the commands run in (this process's, with ``SLURM_CONF`` set)."""
        env = dict(os.environ)
        if self.slurm_conf is not None:
            env["SLURM_CONF"] = str(self.slurm_conf)
        return env

    def run(self, name: str, *args: str) -> str:
        """Run ``name args...`` and return its standard output as text."""
        argv = [self.binary(name), *args]
        try:
            return run_command(
                argv,
                shown=" ".join([name, *args]),
                timeout_s=self.timeout_s,
                max_output=MAX_OUTPUT,
                env=self.environment(),
            )
        except CommandNotRunError as exc:
            raise SlurmUnavailableError(str(exc)) from None
        except CommandExitError as exc:
            raise SlurmError(str(exc)) from None
        except CommandOutputError as exc:
            raise SlurmFormatError(str(exc)) from None

    def json(self, name: str, *args: str) -> dict[str, Any]:
        """Run a command that prints JSON (``squeue --json``) and return the object."""
        text = self.run(name, *args)
        try:
            answer = json.loads(text)
        except ValueError as exc:
            raise SlurmFormatError(f"{name} {' '.join(args)} printed no JSON: {exc}") from None
        if not isinstance(answer, dict):
            raise SlurmFormatError(f"{name} {' '.join(args)} printed no JSON object")
        errors = answer.get("errors") or []
        if errors:
            raise SlurmError(f"{name} {' '.join(args)} reported errors: {str(errors)[:300]}")
        return answer
