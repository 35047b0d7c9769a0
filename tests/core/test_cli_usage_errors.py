"""A usage error is reported by the subcommand it is in, with that subcommand's usage."""

from __future__ import annotations

import pytest

from toposcope.cli import main


@pytest.mark.parametrize(
    ("command", "prog"),
    [
        (["advise"], "toposcope advise"),
        (["advise", "revert", "some-id"], "toposcope advise revert"),
        (["place", "--gpus", "1"], "toposcope place"),
        (["sim"], "toposcope sim"),
        (["slurm", "exporter"], "toposcope slurm exporter"),
        (["exporter"], "toposcope exporter"),
        (["advisor", "serve"], "toposcope advisor serve"),
    ],
)
def test_an_unknown_option_prints_its_subcommands_usage(
    command: list[str], prog: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: {prog} "), err
    assert f"{prog}: error: unrecognized arguments: --bogus" in err


def test_an_unknown_top_level_option_prints_the_top_level_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: toposcope [-h]")
    assert "toposcope: error: unrecognized arguments: --bogus" in err
