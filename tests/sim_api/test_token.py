"""load_token: the token file must exist and hold a token; a world-readable one warns."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from toposcope.errors import ConfigError
from toposcope.tokens import load_token


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


def test_a_world_readable_file_works_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "token", "s3cret\n", mode=0o644)
    with caplog.at_level(logging.WARNING, logger="toposcope.rmapi"):
        assert load_token(str(path)) == "s3cret"
    assert len(caplog.records) == 1
    assert "readable by every user" in caplog.records[0].getMessage()
    assert str(path) in caplog.records[0].getMessage()


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"reading token file .*absent"):
        load_token(tmp_path / "absent")


def test_a_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="reading token file"):
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
