"""Reading a small file from outside: bounded, with one set of error messages.

Configuration files (a kubeconfig, the kubelet's configuration, the advisor's agent map),
token files and the container runtime's state files all come from outside and are small, so
they are read the same way: opened once, at most ``limit + 1`` bytes read so a file over the
bound is an error (never silently cut), and every failure named with the file and what it was
meant to be. :func:`load_yaml_mapping` adds the YAML parse and the top-level mapping check
that every configuration file needs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from toposcope.errors import ConfigError, ToposcopeError


def read_bounded(
    path: str | Path,
    limit: int,
    where: str,
    *,
    error: type[ToposcopeError] = ConfigError,
    what: str = "",
    inspect: Callable[[os.stat_result], None] | None = None,
) -> bytes:
    """The bytes of ``path``, at most ``limit`` of them, or ``error`` naming ``where``.

    ``what`` (such as ``"a token"``) ends the message about a file over the limit; ``inspect``
    sees the open file's status before anything is read (a token file's mode is checked on
    the file read, not on a name that may be swapped in between). The cause of an unreadable
    file is chained, so a caller can tell a permission problem from a missing file.
    """
    try:
        with Path(path).open("rb") as handle:
            if inspect is not None:
                inspect(os.fstat(handle.fileno()))
            raw = handle.read(limit + 1)
    except OSError as exc:
        raise error(f"{where}: cannot read it: {exc.strerror or exc}") from exc
    if len(raw) > limit:
        raise error(f"{where}: over {limit} bytes" + (f": not {what}" if what else ""))
    return raw


def load_yaml_mapping(
    path: str | Path,
    limit: int,
    where: str,
    what: str,
    *,
    error: type[ToposcopeError] = ConfigError,
) -> Mapping[str, Any]:
    """The top-level mapping of the YAML file ``path`` (see :func:`read_bounded`).

    ``what`` names what the file should be (``"a kubeconfig"``): a file whose top level is
    not a mapping is "not" that. YAML that does not parse, is not UTF-8 or nests too deeply
    is ``error`` too, never a traceback.
    """
    raw = read_bounded(path, limit, where, error=error, what=what)
    # PyYAML (1.8 MB resident) only for YAML files: token and state files do not need it
    import yaml  # noqa: PLC0415

    try:
        data = yaml.safe_load(raw)
    except (yaml.YAMLError, RecursionError) as exc:
        raise error(f"{where}: not valid YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise error(f"{where}: not {what} (no top-level mapping)")
    return data
