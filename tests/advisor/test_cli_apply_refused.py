"""``toposcope advise --apply`` against the simulator's real resource-manager API: a refused
apply exits 1 with one summary line, each outcome is printed once, and the token options say
whose token they are (``--rm-token-file``; ``--token-file`` still works, with a warning).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.procs import free_port, http_get, poll, running

SIM_TOKEN = "the-simulators-token"


@dataclass(frozen=True)
class SimApi:
    """A running ``toposcope sim``: its metrics base URL, API URL and a scratch directory."""

    url: str
    api: str
    home: Path


def token_file(path: Path, text: str) -> Path:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimApi]:
    home = tmp_path_factory.mktemp("sim-api")
    port = free_port()
    argv = [
        sys.executable, "-m", "toposcope.cli", "sim", "--scenario", "builtin:cpu-numa",
        "--listen", f"127.0.0.1:{port}", "--speed", "0",
        "--token-file", str(token_file(home / "sim.token", SIM_TOKEN)),
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with running(argv, home / "sim.log"):
        poll(lambda: http_get(f"{url}/-/ready"), what="toposcope sim ready")
        yield SimApi(url, f"{url}/api/v1", home)


def advise_apply(sim: SimApi, audit: str, *token: str) -> subprocess.CompletedProcess[str]:
    """``toposcope advise --apply`` on the simulator's one node, through its API, with
    its own audit log ``audit`` (a file in the scratch directory).
    """
    argv = [
        sys.executable, "-m", "toposcope.cli", "advise",
        "--scrape", f"xeon-01={sim.url}/nodes/xeon-01/metrics", "--format", "json",
        "--apply", "--resource-manager", "sim", "--rm-url", sim.api, *token,
        "--audit-db", str(sim.home / audit),
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def outcome_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "recommendation migrate-memory" in line]


def test_a_refused_apply_exits_1_with_a_summary_and_each_outcome_once(sim: SimApi) -> None:
    wrong = token_file(sim.home / "wrong.token", "not-the-token")
    done = advise_apply(sim, "refused.sqlite", "--rm-token-file", str(wrong))
    assert done.returncode == 1, done.stderr
    applies = [line for line in done.stderr.splitlines() if line.startswith("apply ")]
    assert applies and all(": failed (" in line and "HTTP 403" in line for line in applies)
    assert len(set(applies)) == len(applies)
    assert outcome_lines(done.stderr) == []  # not repeated by the applier's log
    assert done.stderr.count("HTTP 403") == len(applies)
    [summary] = [line for line in done.stderr.splitlines() if "not applied" in line]
    assert summary.startswith(f"toposcope advise: error: {len(applies)} of {len(applies)} ")
    assert "(failed)" in summary


def test_the_old_token_option_still_applies_with_a_warning(sim: SimApi) -> None:
    right = sim.home / "sim.token"
    done = advise_apply(sim, "applied.sqlite", "--token-file", str(right))
    assert done.returncode == 0, done.stderr
    assert "warning: --token-file is deprecated, use --rm-token-file" in done.stderr
    applies = [line for line in done.stderr.splitlines() if line.startswith("apply ")]
    assert applies and all(": applied (" in line for line in applies), done.stderr
    assert "not applied" not in done.stderr
