"""``toposcope slurm show``: configuration from options or the environment, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.slurm.conftest import wait_running
from tests.slurm.test_rest_client import make_jwt
from toposcope.cli import main
from toposcope.slurm.localcluster import LocalCluster


def show(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert main(["slurm", "show", "--format", "json", *args]) == 0, capsys.readouterr().err
    answer: dict[str, object] = json.loads(capsys.readouterr().out)
    return answer


def test_rest_from_options_commands_from_slurm_conf_and_rest_from_the_environment(
    slurm: LocalCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = slurm.sbatch("-J", "shown", "--gres=gpu:2", "-c", "2", "--wrap", "sleep 600")
    wait_running(slurm, job)
    token = tmp_path / "jwt"
    token.write_text(slurm.token() + "\n")
    token.chmod(0o600)
    monkeypatch.delenv("SLURM_JWT", raising=False)
    by_rest = show(capsys, "--slurm-url", slurm.rest_url, "--slurm-token-file", str(token))
    by_commands = show(capsys, "--slurm-conf", str(slurm.layout.slurm_conf))
    monkeypatch.setenv("TOPOSCOPE_SLURM_URL", slurm.rest_url)
    monkeypatch.setenv("SLURM_JWT", slurm.token())
    by_environment = show(capsys)

    assert by_rest["source"] == by_environment["source"] == f"slurmrestd {slurm.rest_url}"
    assert str(by_commands["source"]).startswith("commands (SLURM_CONF=")
    running = [
        [(j["job_id"], j["name"], j["allocations"]) for j in answer["running"]]  # type: ignore[attr-defined]
        for answer in (by_rest, by_commands, by_environment)
    ]
    assert running[0] == running[1] == running[2]
    ((job_id, name, allocations),) = running[0]
    assert (job_id, name) == (job, "shown")
    assert len(allocations[0]["gpus"]) == 2 and len(allocations[0]["cpus"]) == 2

    assert main(["slurm", "show", "--slurm-url", slurm.rest_url]) == 0
    text = capsys.readouterr().out
    assert f"{job} 'shown' user root" in text and "GPUs in use" in text


@pytest.mark.parametrize(
    ("args", "environment", "message"),
    [
        (["--slurm-url", "http://127.0.0.1:1"], {}, "needs a JWT: give --slurm-token-file"),
        (
            ["--slurm-url", "http://127.0.0.1:1"],
            {"SLURM_JWT": make_jwt({"sun": "root", "exp": 1})},
            "expired at 1970-01-01T00:00:01Z",
        ),
        (
            ["--slurm-url", "http://127.0.0.1:1"],
            {"SLURM_JWT": make_jwt({"sun": "root"})},
            "cannot reach slurmrestd at http://127.0.0.1:1",
        ),
        (["--slurm-url", "ftp://x"], {}, "is not an http:// or https:// URL"),
        (["--slurm-url", "http://127.0.0.1:1"], {"SLURM_JWT": "nonsense"}, "is not a JWT"),
        (["--slurm-conf", "/nonexistent/slurm.conf"], {}, "/nonexistent/slurm.conf does not exist"),
    ],
)
def test_configuration_errors_exit_2(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    environment: dict[str, str],
    message: str,
) -> None:
    for name in ("SLURM_JWT", "TOPOSCOPE_SLURM_URL", "TOPOSCOPE_SLURM_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert main(["slurm", "show", *args]) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error


def test_a_token_file_others_can_read_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "jwt"
    token.write_text(make_jwt({"sun": "root"}))
    token.chmod(0o644)
    args = ["--slurm-url", "http://127.0.0.1:1", "--slurm-token-file", str(token)]
    assert main(["slurm", "show", *args]) == 2
    assert "can be read or written by every user" in capsys.readouterr().err


def test_no_action_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["slurm"]) == 2
    assert "choose an action" in capsys.readouterr().err
