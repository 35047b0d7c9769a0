"""The one bounded reader of small outside files: limits, messages and the YAML mapping."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toposcope.boundedread import load_yaml_mapping, read_bounded
from toposcope.errors import ConfigError, SourceError


def test_a_file_at_the_limit_is_read_and_one_byte_over_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 8)
    assert read_bounded(path, 8, "the file") == b"x" * 8
    path.write_bytes(b"x" * 9)
    with pytest.raises(ConfigError, match=r"^the file: over 8 bytes: not a thing$"):
        read_bounded(path, 8, "the file", what="a thing")


def test_an_unreadable_file_raises_the_callers_class_with_the_cause(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"^missing one: cannot read it: ") as raised:
        read_bounded(tmp_path / "absent", 8, "missing one", error=SourceError)
    assert isinstance(raised.value.__cause__, FileNotFoundError)


def test_inspect_sees_the_open_files_status_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    seen: list[int] = []
    read_bounded(path, 8, "f", inspect=lambda status: seen.append(status.st_size))
    assert seen == [3]

    def refuse(status: os.stat_result) -> None:
        raise ConfigError(f"refused size {status.st_size}")

    with pytest.raises(ConfigError, match="refused size 3"):
        read_bounded(path, 8, "f", inspect=refuse)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"a: [\n", "^conf: not valid YAML: "),
        (b"- 1\n- 2\n", r"^conf: not a config \(no top-level mapping\)$"),
        (b"\xff\xfe\xfa", "^conf: not valid YAML: "),
        (b"[" * 3000 + b"]" * 3000, "^conf: not valid YAML"),
    ],
)
def test_bad_yaml_is_a_named_error(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError, match=message):
        load_yaml_mapping(path, 1 << 20, "conf", "a config")


def test_a_yaml_mapping_is_returned(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("a: 1\nb: [x]\n")
    assert load_yaml_mapping(path, 64, "conf", "a config") == {"a": 1, "b": ["x"]}
