"""Parse a deployment file's command line with the real ``toposcope`` parser.

Kubernetes ``args`` and systemd ``ExecStart=`` lines name options of the CLI; parsing them
with :func:`toposcope.cli.build_parser` catches an option renamed or removed in the code but
not in the manifests. argparse would accept an unambiguous abbreviation (``--token`` for
``--token-file``), so every ``--option`` is also checked to be spelled out in full.
"""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from toposcope.cli import build_parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            choices: dict[str, argparse.ArgumentParser] = action.choices
            return choices
    return {}


def _command_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The innermost (sub)parser ``argv``'s leading words select."""
    parser, _ = build_parser()
    for word in argv:
        if word.startswith("-"):
            break
        nested = _subparsers(parser)
        if word not in nested:
            break
        parser = nested[word]
    return parser


def parse_cli(argv: list[str]) -> argparse.Namespace:
    """``toposcope ARGV...`` parsed as the command would parse it (the test fails on errors).

    ``argv`` excludes the program name. Every ``--option`` must be one of the selected
    subcommand's option strings exactly.
    """
    known = {
        option for action in _command_parser(argv)._actions for option in action.option_strings
    }
    for word in argv:
        if word.startswith("--"):
            option = word.partition("=")[0]
            assert option in known, f"{option} is not an option of toposcope {argv[:2]}"
    parser, _ = build_parser()
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = parser.parse_args(argv)
    except SystemExit:
        pytest.fail(f"toposcope rejects {argv}: {errors.getvalue().strip()}")
    return args
