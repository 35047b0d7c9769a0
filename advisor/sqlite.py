"""One SQLite file holding some of the advisor's tables (the audit log, the outcome tables).

Both stores open the same file the same way: the directory and schema are created on first
use, every ``_connect()`` block is one transaction committed on success, rows come back as
``sqlite3.Row``, and a file that cannot be opened is a :class:`ConfigError` naming it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from toposcope.errors import ConfigError


class SqliteStore:
    """Tables of ``schema`` in the SQLite file ``path``; ``what`` names them in errors."""

    def __init__(self, path: str | Path, schema: str, what: str) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
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
