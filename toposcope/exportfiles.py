"""Write a set of generated text files into a folder, or check that the folder holds them.

``toposcope rules export`` and ``toposcope dashboards export`` share it: the same exit codes
(0 written or up to date, 1 when ``--check`` finds a file missing or different) and the same
refusal of a path that is not a folder.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

from toposcope.errors import UsageError


def write_or_check(directory: Path, files: Mapping[str, str], command: str, check: bool) -> int:
    """Write ``files`` (name -> text) into ``directory``, or with ``check`` compare them.

    Returns 0, or 1 when ``check`` finds a stale file (named on stderr with ``command``, the
    command that rewrites it).
    """
    if check:
        stale = [
            name
            for name, text in files.items()
            if not (directory / name).is_file()
            or (directory / name).read_text(encoding="utf-8") != text
        ]
        for name in stale:
            print(f"{directory / name} is stale: run {command}", file=sys.stderr)
        return 1 if stale else 0
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory} is not a folder")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (directory / name).write_text(text, encoding="utf-8")
            print(directory / name)
    except OSError as exc:
        raise UsageError(f"cannot write into {directory}: {exc.strerror}") from exc
    return 0


def add_export_parser(
    parser: argparse.ArgumentParser, dest: str, help_text: str, description: str | None
) -> argparse.ArgumentParser:
    """The ``export DIR [--check]`` action under ``parser`` (``dest`` holds the action name)."""
    sub = parser.add_subparsers(dest=dest, metavar="ACTION", required=True)
    export = sub.add_parser("export", help=help_text, description=description)
    export.add_argument(
        "directory", metavar="DIR", help="folder to write into (created if missing)"
    )
    export.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a file in DIR is missing or differs",
    )
    return export
