"""Files holding secrets or state are private: tokens written by toposcope, the advisor's
SQLite stores (and SQLite's files beside them), and every command refuses a token file that
every user can read unless ``--allow-insecure-token-file`` says otherwise.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from toposcope.advisor.audit import AuditLog
from toposcope.advisor.outcomes import OutcomeLog
from toposcope.auth.tokens import ensure_token_file, load_token, write_secret
from toposcope.cli import main

PRIVATE = 0o600


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """A umask that lets every user read new files, as on many systems."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def open_token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    path.chmod(0o644)
    return path


def test_write_secret_creates_a_private_file(tmp_path: Path, loose_umask: None) -> None:
    path = write_secret(tmp_path / "new" / "token", "abc\n")
    assert path.read_text() == "abc\n" and mode_of(path) == PRIVATE
    # replacing a file that was readable by others leaves a private one
    old = tmp_path / "old"
    old.write_text("leaked\n")
    old.chmod(0o644)
    write_secret(old, "fresh\n")
    assert old.read_text() == "fresh\n" and mode_of(old) == PRIVATE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "old"]  # no temporary left


def test_generated_tokens_are_private_and_kept(tmp_path: Path, loose_umask: None) -> None:
    path = ensure_token_file(tmp_path / "sim" / "token")
    token = load_token(path)
    assert mode_of(path) == PRIVATE and len(token) >= 32
    assert load_token(ensure_token_file(path)) == token  # kept across restarts


@pytest.mark.parametrize(("text", "mode"), [("", PRIVATE), ("leaked\n", 0o644), ("x\n", 0o640)])
def test_an_empty_or_shared_token_file_gets_a_new_private_token(
    tmp_path: Path, loose_umask: None, text: str, mode: int
) -> None:
    path = tmp_path / "token"
    path.write_text(text)
    path.chmod(mode)
    ensure_token_file(path)
    assert mode_of(path) == PRIVATE
    assert load_token(path) not in ("leaked", "x")


def _journal_modes(db: Path) -> dict[str, int]:
    """The modes of the files SQLite keeps beside ``db`` while another connection writes."""
    modes: dict[str, int] = {}
    with sqlite3.connect(db, isolation_level=None) as rollback:
        rollback.execute("BEGIN IMMEDIATE")
        rollback.execute("CREATE TABLE probe (x)")
        rollback.execute("INSERT INTO probe VALUES (zeroblob(100000))")
        modes["-journal"] = mode_of(db.with_name(db.name + "-journal"))
        rollback.execute("ROLLBACK")
    with sqlite3.connect(db, isolation_level=None) as wal:
        assert wal.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        wal.execute("CREATE TABLE probe (x)")
        for suffix in ("-wal", "-shm"):
            modes[suffix] = mode_of(db.with_name(db.name + suffix))
    return modes


def test_the_advisor_stores_and_sqlite_side_files_are_private(
    tmp_path: Path, loose_umask: None
) -> None:
    db = tmp_path / "state" / "audit.sqlite"
    AuditLog(db)
    OutcomeLog(db)
    assert mode_of(db) == PRIVATE
    assert _journal_modes(db) == {"-journal": PRIVATE, "-wal": PRIVATE, "-shm": PRIVATE}


def test_a_store_left_readable_by_others_is_narrowed(
    tmp_path: Path, loose_umask: None, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "audit.sqlite"
    sqlite3.connect(db).close()
    db.chmod(0o644)
    with caplog.at_level(logging.WARNING):
        AuditLog(db)
    assert mode_of(db) == PRIVATE
    assert any("0644" in r.getMessage() and str(db) in r.getMessage() for r in caplog.records)


def _commands(token: Path, tmp_path: Path) -> dict[str, list[str]]:
    """Each command that reads a token file, with a later error that ends it after reading."""
    closed = "http://127.0.0.1:1"
    audit = str(tmp_path / "audit.sqlite")
    return {
        "agent": ["agent", "--path.sysfs", str(tmp_path / "absent"), "--token-file", str(token)],
        "sim": [
            "sim",
            "--scenario",
            "builtin:demo",
            "--listen",
            "127.0.0.1:99999",
            "--token-file",
            str(token),
        ],
        "advisor serve": [
            "advisor",
            "serve",
            "--prometheus",
            closed,
            "--listen",
            "127.0.0.1:99999",
            "--audit-db",
            audit,
            "--api-token-file",
            str(token),
        ],
        "advisor serve rm": [
            "advisor",
            "serve",
            "--prometheus",
            closed,
            "--listen",
            "127.0.0.1:99999",
            "--audit-db",
            audit,
            "--resource-manager",
            "sim",
            "--rm-url",
            closed,
            "--rm-token-file",
            str(token),
        ],
        "advise revert": [
            "advise",
            "--prometheus",
            closed,
            "--resource-manager",
            "sim",
            "--rm-url",
            closed,
            "--audit-db",
            audit,
            "revert",
            "no-such-id",
            "--rm-token-file",
            str(token),
        ],
        "place": [
            "place",
            "--gpus",
            "1",
            "--prometheus",
            closed,
            "--retries",
            "0",
            "--bearer-token-file",
            str(token),
        ],
        "dash": ["dash", "--listen", "127.0.0.1:99999", "--advisor-token-file", str(token)],
    }


COMMANDS = ["agent", "sim", "advisor serve", "advisor serve rm", "advise revert", "place", "dash"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_refuses_a_token_file_every_user_can_read(
    command: str, open_token: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _commands(open_token, tmp_path)[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"token file {open_token} can be read or written by every user" in err
    assert "--allow-insecure-token-file" in err and "Traceback" not in err


@pytest.mark.parametrize("command", COMMANDS)
def test_allow_insecure_token_file_lets_every_command_use_it(
    command: str,
    open_token: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    argv = [*_commands(open_token, tmp_path)[command], "--allow-insecure-token-file"]
    with caplog.at_level(logging.WARNING, logger="toposcope.auth.tokens"):
        assert main(argv) == 2  # the later error, once the token was read
    assert "can be read or written by every user" not in capsys.readouterr().err
    assert any(str(open_token) in r.getMessage() for r in caplog.records)
