"""Where toposcope finds Slurm: slurmrestd's URL and JWT, or the commands' configuration.

Each setting comes from a command-line option or, when the option is absent, from the
environment; nothing comes from metrics or from answers:

=====================  ==============================  ========================================
option                 environment                      meaning
=====================  ==============================  ========================================
``--slurm-url``        ``TOPOSCOPE_SLURM_URL``          slurmrestd base URL; without it the
                                                        commands are used
``--slurm-user``       ``TOPOSCOPE_SLURM_USER``         ``X-SLURM-USER-NAME`` (default: the
                                                        JWT's ``sun`` claim)
``--slurm-token-file`` ``TOPOSCOPE_SLURM_TOKEN_FILE``   file holding the JWT (mode 0600)
(none)                 ``SLURM_JWT``                    the JWT itself, when no file is given
``--slurm-conf``       ``SLURM_CONF``                   slurm.conf the commands read
=====================  ==============================  ========================================
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from toposcope.auth.tokens import add_token_file_options
from toposcope.errors import ConfigError, UsageError
from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.jwt import JWT_ENV, load_jwt
from toposcope.slurm.reader import CommandReader, RestReader, SlurmReader
from toposcope.slurm.rest import SlurmRestClient, check_url

URL_ENV = "TOPOSCOPE_SLURM_URL"
USER_ENV = "TOPOSCOPE_SLURM_USER"
TOKEN_FILE_ENV = "TOPOSCOPE_SLURM_TOKEN_FILE"
#: each request's or command's timeout unless ``--slurm-timeout`` says otherwise, seconds
DEFAULT_TIMEOUT_S = 10.0
#: the longest timeout accepted, seconds
MAX_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class SlurmSettings:
    """How to reach one Slurm cluster (see the module docstring for each field's source)."""

    url: str | None = None
    user: str | None = None
    token_file: str | None = None
    slurm_conf: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    allow_insecure_token_file: bool = False


def add_slurm_options(
    parser: argparse.ArgumentParser, *, suppress: bool = False, token_file_options: bool = True
) -> None:
    """Declare the ``--slurm-*`` options (and ``--allow-insecure-token-file``).

    With ``suppress`` the options default to absent, for sub-actions that inherit them from
    their parent's options; without ``token_file_options`` ``--allow-insecure-token-file``
    is left to the caller, which declares it already.
    """

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("Slurm")
    group.add_argument(
        "--slurm-url",
        default=default(None),
        metavar="URL",
        help=f"slurmrestd base URL, e.g. http://127.0.0.1:6820 (env {URL_ENV}); without it, "
        "squeue/sinfo/scontrol are run",
    )
    group.add_argument(
        "--slurm-user",
        default=default(None),
        metavar="NAME",
        help=f"user the JWT belongs to (env {USER_ENV}; default: the token's own claim)",
    )
    group.add_argument(
        "--slurm-token-file",
        default=default(None),
        metavar="FILE",
        help=f"file holding slurmrestd's JWT, mode 0600 (env {TOKEN_FILE_ENV}; else ${JWT_ENV})",
    )
    group.add_argument(
        "--slurm-conf",
        default=default(None),
        metavar="FILE",
        help="slurm.conf for the commands (env SLURM_CONF)",
    )
    group.add_argument(
        "--slurm-timeout",
        type=float,
        default=default(DEFAULT_TIMEOUT_S),
        metavar="SECONDS",
        help=f"timeout of each request or command (default: {DEFAULT_TIMEOUT_S:g})",
    )
    if token_file_options:
        add_token_file_options(parser, suppress=suppress)


def settings_from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> SlurmSettings:
    """Settings from the parsed options, the environment filling what they leave out."""
    timeout_s = getattr(args, "slurm_timeout", None)
    if timeout_s is None:
        timeout_s = DEFAULT_TIMEOUT_S
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise UsageError(f"--slurm-timeout must be between 0 and {MAX_TIMEOUT_S:g} s")
    return SlurmSettings(
        url=getattr(args, "slurm_url", None) or environ.get(URL_ENV) or None,
        user=getattr(args, "slurm_user", None) or environ.get(USER_ENV) or None,
        token_file=getattr(args, "slurm_token_file", None) or environ.get(TOKEN_FILE_ENV) or None,
        slurm_conf=getattr(args, "slurm_conf", None) or environ.get("SLURM_CONF") or None,
        timeout_s=timeout_s,
        allow_insecure_token_file=bool(getattr(args, "allow_insecure_token_file", False)),
    )


def open_rest_client(
    settings: SlurmSettings, environ: Mapping[str, str] | None = None
) -> SlurmRestClient | None:
    """slurmrestd's client when a URL is configured, else ``None``.

    Raises :class:`~toposcope.errors.ConfigError` for a malformed URL or a missing JWT, and
    :class:`~toposcope.slurm.errors.SlurmAuthError` for a malformed JWT.
    """
    if not settings.url:
        return None
    env = dict(os.environ if environ is None else environ)
    check_url(settings.url)
    jwt = load_jwt(settings.token_file, env, allow_insecure=settings.allow_insecure_token_file)
    return SlurmRestClient(settings.url, jwt, settings.user, timeout_s=settings.timeout_s)


def open_commands(settings: SlurmSettings) -> SlurmCommands:
    """The Slurm commands aimed at the configured slurm.conf (ConfigError when it is missing)."""
    if settings.slurm_conf and not Path(settings.slurm_conf).is_file():
        # the commands would retry reading it for a minute before saying so
        raise ConfigError(f"slurm.conf {settings.slurm_conf} does not exist or is not a file")
    return SlurmCommands(settings.slurm_conf, timeout_s=settings.timeout_s)


def open_reader(settings: SlurmSettings, environ: Mapping[str, str] | None = None) -> SlurmReader:
    """slurmrestd's reader when a URL is configured, else the commands' reader.

    Raises as :func:`open_rest_client` and :func:`open_commands` do.
    """
    client = open_rest_client(settings, environ)
    if client is not None:
        return RestReader(client)
    return CommandReader(open_commands(settings))
