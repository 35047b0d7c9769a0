"""Bearer tokens read from files: one reader for every server and client of toposcope.

The resource-manager API (simulator, node agent), the advisor service, the advisor's
clients and the Dash app all keep their token in a file (a Kubernetes Secret, a systemd
credential, ``.run/*/token``), so they read it the same way and fail the same way.
"""

from __future__ import annotations

import logging
import stat
from pathlib import Path

from toposcope.errors import ConfigError

LOG = logging.getLogger("toposcope.tokens")


def load_token(path: str | Path) -> str:
    """Read the API token from ``path`` (its first line, surrounding blanks dropped).

    A missing, unreadable or empty file is a :class:`ConfigError`: a server must not start
    thinking it is protected when it is not. A file that other users can read still works,
    with a warning, since the token then guards nothing against them.
    """
    token_path = Path(path)
    try:
        text = token_path.read_text(encoding="utf-8")
        mode = token_path.stat().st_mode
    except OSError as exc:
        raise ConfigError(f"reading token file {token_path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"reading token file {token_path}: not UTF-8 text") from exc
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise ConfigError(f"token file {token_path} is empty")
    if mode & stat.S_IROTH:
        LOG.warning("token file %s is readable by every user; restrict it (chmod 600)", token_path)
    return token
