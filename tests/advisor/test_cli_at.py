"""``toposcope advise --at``: the evaluation time, given as Unix seconds or RFC 3339."""

from __future__ import annotations

import pytest

from toposcope.advisor.cli import parse_at
from toposcope.cli import main
from toposcope.errors import UsageError


def test_unix_seconds_and_rfc3339_name_the_same_moment() -> None:
    assert parse_at("1700000000") == 1700000000.0
    assert parse_at("2023-11-14T22:13:20Z") == 1700000000.0
    assert parse_at("2023-11-14T23:13:20+01:00") == 1700000000.0


@pytest.mark.parametrize("text", ["yesterday", "2023-11-14T22:13:20"])
def test_a_time_without_offset_or_not_a_time_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="--at"):
        parse_at(text)


def test_at_with_scrape_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["advise", "--scrape", "http://127.0.0.1:1/metrics", "--at", "1700000000"])
    assert code == 2
    assert "--at needs --prometheus" in capsys.readouterr().err
