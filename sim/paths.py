"""Where the simulator may write: every path it creates or removes stays inside its root.

Names from scenario files, trace rows and imported topologies become path components (a
node's tree, a workload's cgroup directory, a PCI function's directory). They are checked
against :mod:`toposcope.identity.names` where they are read; this module is the second line of
defence. Before a directory is created or a tree removed, its path is resolved (``..`` and
symbolic links followed) and must lie strictly inside the root it belongs to, else
:class:`UnsafePathError` and nothing is touched (:func:`contained`,
:func:`remove_contained`).

:func:`remove_tree` removes the simulator's own state directory at exit within a time
budget, so that a stop request is answered in seconds even when the trees of a large
cluster take longer to delete.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from toposcope.errors import ConfigError

LOG = logging.getLogger("toposcope.sim")

#: What the detached process that finishes a removal runs (see :func:`remove_tree`).
_REMOVER = "import shutil, sys; shutil.rmtree(sys.argv[1], ignore_errors=True)"


class UnsafePathError(ConfigError):
    """A path that resolves outside the directory it must stay in."""


def contained(root: Path | str, path: Path | str) -> Path:
    """``path`` resolved, when it lies strictly inside ``root`` (also resolved).

    Raises :class:`UnsafePathError` naming both otherwise, so that a name such as
    ``../../etc`` never makes the simulator write or delete outside its tree.
    """
    base = Path(os.path.realpath(root))
    resolved = Path(os.path.realpath(path))
    if base not in resolved.parents:
        raise UnsafePathError(
            f"refusing to touch {os.fspath(path)!r}: it resolves to {os.fspath(resolved)!r}, "
            f"outside {os.fspath(base)!r}"
        )
    return resolved


def remove_contained(root: Path | str, path: Path | str) -> None:
    """Remove the tree at ``path`` (nothing if it is absent) after checking it with
    :func:`contained`; a symbolic link inside the tree is removed, never followed.
    """
    target = contained(root, path)
    shutil.rmtree(target, ignore_errors=True)


def _pieces(path: Path) -> list[Path]:
    """The entries of ``path`` and of its subdirectories, deepest first: the pieces
    :func:`remove_tree` deletes one at a time (a node's whole tree is one piece).
    """
    pieces: list[Path] = []
    for child in sorted(path.iterdir()):
        if child.is_dir() and not child.is_symlink():
            pieces.extend(sorted(child.iterdir()))
        pieces.append(child)
    return pieces


def _remove_piece(piece: Path) -> None:
    if piece.is_dir() and not piece.is_symlink():
        shutil.rmtree(piece, ignore_errors=True)
    else:
        piece.unlink(missing_ok=True)


def remove_tree(path: Path, seconds: float) -> bool:
    """Remove the directory tree ``path``, spending at most about ``seconds`` on it.

    Pieces (the entries two levels down, then one level down) are deleted in this process
    until the time is up; whatever is left then is handed to a detached process that
    finishes the removal after this one has exited. Returns whether the tree was gone in
    time. A missing ``path`` is already removed.
    """
    deadline = time.monotonic() + seconds
    try:
        pieces = _pieces(path)
    except FileNotFoundError:
        return True
    except OSError as exc:
        LOG.warning("cannot list %s for removal: %s", path, exc.strerror or exc)
        pieces = []
    for piece in pieces:
        if time.monotonic() > deadline:
            break
        _remove_piece(piece)
    else:
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return True
    remover = subprocess.Popen(
        [sys.executable, "-c", _REMOVER, os.fspath(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    LOG.info("removing the rest of %s in the background (process %d)", path, remover.pid)
    return False
