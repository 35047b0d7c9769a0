"""Bearer tokens in files: one reader for every server and client of toposcope, one writer.

The resource-manager API (simulator, node agent), the advisor service, the advisor's
clients and the Dash app all keep their token in a file (a Kubernetes Secret, a systemd
credential, ``.run/*/token``), so they read it the same way and fail the same way.

A token guards nothing against the users who can read it, so :func:`load_token` refuses a
file that every user can read or write (``chmod 600`` it, or pass
``--allow-insecure-token-file``, which every command reading tokens declares with
:func:`add_token_file_options`) and warns about one its group can read (a Kubernetes Secret
volume shared with ``fsGroup`` is one). What toposcope writes itself, :func:`write_secret`
creates readable by its owner alone from the first byte.

A token that rotates (a Kubernetes projected ServiceAccount token, which the kubelet rewrites
before it expires) is read through :class:`TokenFile`, which reads the file again whenever it
changed, so a long-running client never sends an expired token.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import stat
import tempfile
import threading
from pathlib import Path

from toposcope.boundedread import read_bounded
from toposcope.errors import ConfigError

LOG = logging.getLogger("toposcope.auth.tokens")

#: The option that lets a token file every user can read through (with a warning).
INSECURE_OPTION = "--allow-insecure-token-file"
#: A token file is never longer than this: anything bigger is not a token file.
MAX_TOKEN_FILE = 64 * 1024

_EVERYONE = stat.S_IROTH | stat.S_IWOTH
_GROUP = stat.S_IRGRP | stat.S_IWGRP


def add_token_file_options(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """Declare ``--allow-insecure-token-file`` (``args.allow_insecure_token_file``).

    With ``suppress`` the option defaults to absent, for sub-commands that inherit it.
    """
    parser.add_argument(
        INSECURE_OPTION,
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="accept token files that every user can read or write (refused otherwise: "
        "chmod 600 them instead)",
    )


def load_token(path: str | Path, *, allow_insecure: bool = False) -> str:
    """Read the API token from ``path`` (its first line, surrounding blanks dropped).

    A missing, unreadable or empty file is a :class:`ConfigError`: a server must not start
    thinking it is protected when it is not. So is a file every user can read or write,
    unless ``allow_insecure`` (then it warns); a file its group can read or write warns.
    """
    token_path = Path(path)
    raw = read_bounded(
        token_path,
        MAX_TOKEN_FILE,
        f"token file {token_path}",
        what="a token",
        inspect=lambda status: _check_mode(token_path, status.st_mode, allow_insecure),
    )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"token file {token_path}: not UTF-8 text") from exc
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise ConfigError(f"token file {token_path} is empty")
    return token


class TokenFile:
    """A token file read again whenever it changes: a rotated token is sent from then on.

    The kubelet rewrites a projected ServiceAccount token well before it expires (by swapping
    a symbolic link, so the file's identity changes); :meth:`read` compares the file's device,
    inode, size and modification time with those of the last read and reads it again when any
    differs. The first read happens here, so a missing or unsafe file fails at start-up
    (:func:`load_token`'s rules). A later read that fails keeps the last good token, with a
    warning, and is tried again at the next call: the old token stays valid for a while.
    """

    def __init__(self, path: str | Path, *, allow_insecure: bool = False) -> None:
        self.path = Path(path)
        self.allow_insecure = allow_insecure
        self._lock = threading.Lock()
        self._seen = self._identity()
        self._token = load_token(self.path, allow_insecure=allow_insecure)

    def _identity(self) -> tuple[int, int, int, int] | None:
        try:
            info = self.path.stat()
        except OSError:
            return None
        return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)

    def read(self) -> str:
        """The token, read again first when the file changed since the last read."""
        with self._lock:
            seen = self._identity()
            if seen is not None and seen != self._seen:
                try:
                    self._token = load_token(self.path, allow_insecure=self.allow_insecure)
                except ConfigError as exc:
                    LOG.warning("keeping the previous token: %s", exc)
                else:
                    LOG.info("token file %s changed: using the new token", self.path)
                    self._seen = seen
            return self._token


#: a token as clients take it: the text itself, or a file to read it from before each use
Token = str | TokenFile


def token_text(token: Token | None) -> str | None:
    """The text of ``token`` now (a :class:`TokenFile` is read again if it changed)."""
    return token.read() if isinstance(token, TokenFile) else token


def _check_mode(path: Path, mode: int, allow_insecure: bool) -> None:
    """Refuse (or warn about) a token file others can read or write; see :func:`load_token`."""
    shown = f"{stat.S_IMODE(mode):04o}"
    if mode & _EVERYONE:
        if not allow_insecure:
            raise ConfigError(
                f"token file {path} can be read or written by every user (mode {shown}): "
                f"restrict it with `chmod 600 {path}`, or pass {INSECURE_OPTION} to use it anyway"
            )
        LOG.warning(
            "token file %s can be read or written by every user (mode %s); using it as "
            "allowed, but restrict it with chmod 600",
            path,
            shown,
        )
    elif mode & _GROUP:
        LOG.warning(
            "token file %s can be read or written by its group (mode %s); "
            "restrict it with chmod 600 unless that group is meant to use it",
            path,
            shown,
        )


def write_secret(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path``, readable and writable by its owner alone (mode 0600).

    The file is created with that mode (never with a wider one narrowed afterwards) under a
    temporary name in the same directory, then renamed over ``path``: nobody ever reads a
    half-written secret, or one that was readable by others for a moment.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def ensure_token_file(path: str | Path) -> Path:
    """``path``, holding a random token: kept when it is already a private token file.

    A new token is written (with :func:`write_secret`) when the file is missing, empty, or
    readable or writable by anyone but its owner, so a token leaked that way is not reused.
    """
    target = Path(path)
    try:
        info = target.stat()
        keep = stat.S_ISREG(info.st_mode) and not info.st_mode & (_EVERYONE | _GROUP)
        keep = keep and bool(target.read_text(encoding="utf-8").strip())
    except (OSError, UnicodeDecodeError):
        keep = False
    if not keep:
        write_secret(target, secrets.token_urlsafe(32) + "\n")
    return target
