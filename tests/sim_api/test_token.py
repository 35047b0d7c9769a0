"""load_token: the token file must exist, hold a token and be private.

One every user can read or write is refused unless allowed; one its group can read warns.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from toposcope.auth.tokens import MAX_TOKEN_FILE, load_token
from toposcope.errors import ConfigError


def write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def test_reads_the_first_line_without_blanks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "token", "  s3cret \nignored\n")
    with caplog.at_level(logging.WARNING):
        assert load_token(path) == "s3cret"
    assert caplog.records == []


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o602, 0o666])
def test_a_file_every_user_can_read_or_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = write(tmp_path / "token", "s3cret\n", mode=mode)
    with pytest.raises(ConfigError) as refused:
        load_token(path)
    message = str(refused.value)
    assert str(path) in message and f"mode {mode:04o}" in message
    assert f"chmod 600 {path}" in message and "--allow-insecure-token-file" in message
    assert "s3cret" not in message


def test_allow_insecure_reads_it_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "token", "s3cret\n", mode=0o644)
    with caplog.at_level(logging.WARNING, logger="toposcope.auth.tokens"):
        assert load_token(str(path), allow_insecure=True) == "s3cret"
    [record] = caplog.records
    assert "every user" in record.getMessage() and str(path) in record.getMessage()


@pytest.mark.parametrize("mode", [0o640, 0o620, 0o440])
def test_a_file_its_group_can_use_works_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int
) -> None:
    path = write(tmp_path / "token", "s3cret\n", mode=mode)
    with caplog.at_level(logging.WARNING, logger="toposcope.auth.tokens"):
        assert load_token(path) == "s3cret"
    [record] = caplog.records
    assert "its group" in record.getMessage() and f"mode {mode:04o}" in record.getMessage()


def test_a_huge_file_is_not_a_token(tmp_path: Path) -> None:
    path = write(tmp_path / "token", "x" * (MAX_TOKEN_FILE + 1))
    with pytest.raises(ConfigError, match="not a token"):
        load_token(path)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"token file .*absent: cannot read it"):
        load_token(tmp_path / "absent")


def test_a_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"token file .*: cannot read it"):
        load_token(tmp_path)


@pytest.mark.parametrize("text", ["", "\n", "   \n\t\n"])
def test_an_empty_file_is_a_config_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match="is empty"):
        load_token(write(tmp_path / "token", text))


def test_a_binary_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_bytes(b"\xff\xfe\x00")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_token(path)
