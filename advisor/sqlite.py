"""One SQLite file holding some of the advisor's tables (the audit log, the outcome tables).

Both stores open the same file the same way: the directory and schema are created on first
use, every ``_connect()`` block is one transaction committed on success, rows come back as
``sqlite3.Row``, and a file that cannot be opened is a :class:`ConfigError` naming it.

The file records who changed what on which node, so it is readable by its owner alone: it
is created with mode 0600 before SQLite opens it, and SQLite gives its ``-journal``, ``-wal``
and ``-shm`` files the mode of the database. A file left readable by others by an earlier
version is narrowed to 0600, with a warning.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from toposcope.errors import ConfigError

LOG = logging.getLogger("toposcope.advisor.sqlite")

#: The mode of the database and of the files SQLite keeps beside it.
PRIVATE_MODE = 0o600
#: Suffixes of the files SQLite keeps beside the database while it writes.
SIDE_FILES = ("-journal", "-wal", "-shm")


def create_private(path: Path) -> None:
    """Create ``path`` empty with mode 0600 (an empty file is an empty SQLite database).

    An existing file is kept; if its group or others can use it, it (and SQLite's files
    beside it) is narrowed to 0600.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_MODE)
    except FileExistsError:
        for candidate in (path, *(path.with_name(path.name + s) for s in SIDE_FILES)):
            _narrow(candidate)
        return
    os.close(fd)


def _narrow(path: Path) -> None:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if mode & 0o077:
        LOG.warning("%s was mode %04o; narrowing it to %04o", path, mode, PRIVATE_MODE)
        os.chmod(path, PRIVATE_MODE)


class SqliteStore:
    """Tables of ``schema`` in the SQLite file ``path``; ``what`` names them in errors."""

    def __init__(self, path: str | Path, schema: str, what: str) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            create_private(self.path)
            with self._connect() as db:
                db.executescript(schema)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot open {what} {self.path}: {exc}") from exc

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=10)) as db:
            db.row_factory = sqlite3.Row
            with db:  # one transaction, committed on success
                yield db
