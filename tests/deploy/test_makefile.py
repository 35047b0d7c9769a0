"""``make up``'s switches reach the stack runner as the README says (``make -n``: nothing runs).

make has a built-in ``RM`` variable (``rm -f``), so a plain ``make up`` once passed
``--rm rm -f`` to the stack runner and failed; only an ``RM`` the user sets may be passed on.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def stack_line(*args: str, env: dict[str, str] | None = None) -> str:
    """The stack runner's command line that ``make -n up ARGS`` would run."""
    environment = {k: v for k, v in os.environ.items() if k not in {"RM", "TLS"}}
    done = subprocess.run(
        ["make", "-n", "up", *args],
        cwd=REPO,
        env=environment | (env or {}),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    (line,) = [x for x in done.stdout.splitlines() if "deploy/stack.py up" in x]
    return " ".join(line.split()[1:])


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ((), None, "deploy/stack.py up"),
        (("RM=slurm",), None, "deploy/stack.py up --rm slurm"),
        (("TLS=1",), None, "deploy/stack.py up --tls"),
        (("RM=slurm", "TLS=1"), None, "deploy/stack.py up --rm slurm --tls"),
        ((), {"RM": "slurm"}, "deploy/stack.py up --rm slurm"),
    ],
)
def test_make_up_passes_only_the_switches_the_user_set(
    args: tuple[str, ...], env: dict[str, str] | None, expected: str
) -> None:
    assert stack_line(*args, env=env) == expected
