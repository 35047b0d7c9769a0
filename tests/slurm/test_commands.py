"""The commands' reader with stand-in ``sinfo``/``squeue``/``scontrol`` printing real outputs.

These run everywhere, Slurm installed or not; test_live_readers.py does the same against a
real cluster.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import FIXTURES
from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.errors import SlurmError, SlurmFormatError, SlurmUnavailableError
from toposcope.slurm.reader import CommandReader, build_state

SAMPLES = FIXTURES / "slurm"
OUTPUTS = {
    "sinfo": SAMPLES / "sinfo.json",
    "squeue": SAMPLES / "squeue.json",
    "scontrol": SAMPLES / "scontrol-show-job-d.txt",
}


def stand_in(bin_dir: Path, name: str, body: str) -> None:
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir()
    for name, output in OUTPUTS.items():
        stand_in(directory, name, f'echo "$@" >> {tmp_path}/calls; cat {output}')
    return directory


def test_the_commands_give_what_slurmrestd_gives(bin_dir: Path) -> None:
    reader = CommandReader(SlurmCommands(bin_dir=bin_dir), clock=lambda: 1795452000.0)
    state = reader.read()
    same_json = build_state(
        json.loads(OUTPUTS["sinfo"].read_text())["nodes"],
        json.loads(OUTPUTS["squeue"].read_text())["jobs"],
        now=1795452000.0,
        source="slurmrestd",
    )
    assert state.running == same_json.running and state.pending == same_json.pending
    assert state.nodes == same_json.nodes and state.source == "commands"
    calls = (bin_dir.parent / "calls").read_text().splitlines()
    assert calls == ["--json", "--json", "-d show job"]


def test_slurm_conf_is_passed_to_the_commands(tmp_path: Path, bin_dir: Path) -> None:
    stand_in(bin_dir, "sinfo", f'echo "$SLURM_CONF" > {tmp_path}/conf; cat {OUTPUTS["sinfo"]}')
    commands = SlurmCommands(tmp_path / "slurm.conf", bin_dir)
    commands.json("sinfo", "--json")
    assert (tmp_path / "conf").read_text().strip() == str(tmp_path / "slurm.conf")
    assert commands.source == f"commands (SLURM_CONF={tmp_path / 'slurm.conf'})"


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        (
            "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1",
            SlurmError,
            "squeue --json exited with 1: slurm_load_jobs error: Unable to contact",
        ),
        ("echo not json", SlurmFormatError, "squeue --json printed no JSON"),
        ("echo '[1, 2]'", SlurmFormatError, "printed no JSON object"),
        ("""echo '{"errors": [{"error": "boom"}], "jobs": []}'""", SlurmError, "reported errors"),
        ("exec sleep 30", SlurmUnavailableError, "did not finish in 0.5 s"),
    ],
)
def test_failing_commands_are_named_with_their_words(
    bin_dir: Path, body: str, error: type[Exception], message: str
) -> None:
    stand_in(bin_dir, "squeue", body)
    with pytest.raises(error, match=message):
        SlurmCommands(bin_dir=bin_dir, timeout_s=0.5).json("squeue", "--json")


def test_a_missing_command_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(
        SlurmUnavailableError, match=f"sinfo is not installed in {tmp_path}: install"
    ):
        CommandReader(SlurmCommands(bin_dir=tmp_path)).read()
