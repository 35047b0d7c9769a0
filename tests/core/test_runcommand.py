"""The bounded command runner the Slurm backend and the simulator's Slurm mirror share."""

from __future__ import annotations

import sys

import pytest

from toposcope.runcommand import (
    CommandExitError,
    CommandNotRunError,
    CommandOutputError,
    run_command,
)


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_the_output_of_a_command_is_its_text() -> None:
    argv = _python("import os; print(os.environ['ONLY'])")
    text = run_command(argv, shown="py", timeout_s=30, max_output=64, env={"ONLY": "here"})
    assert text == "here\n"


def test_a_failed_command_names_its_status_and_the_tail_of_its_error() -> None:
    argv = _python("import sys; sys.stderr.write('x' * 50 + 'END'); sys.exit(3)")
    with pytest.raises(CommandExitError, match=r"^py exited with 3: x{7}END$"):
        run_command(argv, shown="py", timeout_s=30, max_output=64, error_chars=10)
    with pytest.raises(CommandExitError, match=r"^py exited with 1: no message$"):
        run_command(_python("raise SystemExit(1)"), shown="py", timeout_s=30, max_output=64)


def test_output_over_the_bound_is_an_error_not_cut() -> None:
    with pytest.raises(CommandOutputError, match=r"^py printed more than 8 bytes$"):
        run_command(_python("print('x' * 9)"), shown="py", timeout_s=30, max_output=8)


def test_a_missing_or_slow_command_did_not_run() -> None:
    with pytest.raises(CommandNotRunError, match=r"^cannot run nothing-here: "):
        run_command(["/nonexistent/nothing-here"], shown="nothing-here", timeout_s=5, max_output=8)
    slow = _python("import time; time.sleep(30)")
    with pytest.raises(CommandNotRunError, match=r"^py did not finish in 0\.2 s$"):
        run_command(slow, shown="py", timeout_s=0.2, max_output=8)
