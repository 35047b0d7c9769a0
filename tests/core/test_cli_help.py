"""Every subcommand's ``--help``, walked from the subcommand table: a description, option
help for every option, an "Examples:" section whose command lines parse, and plain text
(no reStructuredText ````...```` markup).
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator

import pytest

from toposcope.cli import build_parser
from toposcope.cli_help import EXAMPLES


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every (sub)parser under ``parser``, with its command path ("" for the top)."""
    yield " ".join(path), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))


PARSER, _ = build_parser()
COMMANDS = dict(commands(PARSER))


def test_the_walk_reaches_the_nested_actions() -> None:
    assert {"slurm show", "slurm gres-conf", "kube webhook", "advise revert"} <= set(COMMANDS)
    assert set(COMMANDS) == set(EXAMPLES)


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_help_has_a_description_examples_and_no_markup(path: str) -> None:
    parser = COMMANDS[path]
    text = parser.format_help()
    assert parser.description, path
    assert "\nExamples:\n  toposcope " in text, path
    assert "``" not in text, path
    silent = [
        a.option_strings or [a.dest]
        for a in parser._actions
        if not a.help and not isinstance(a, argparse._SubParsersAction)
    ]
    assert silent == [], path


@pytest.mark.parametrize("path", sorted(EXAMPLES))
def test_every_example_parses(path: str) -> None:
    for example in EXAMPLES[path]:
        words = shlex.split(example.replace("\\\n", " "))
        start = words.index("toposcope") + 1
        end = words.index("|") if "|" in words[start:] else len(words)
        command = words[start]
        parser, _ = build_parser([command])
        args = parser.parse_args(words[start:end])
        assert args.command == command, example
        assert not path or path.split(maxsplit=1)[0] == command, example
