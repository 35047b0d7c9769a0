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

from toposcope.errors import ConfigError
from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.jwt import JWT_ENV, load_jwt
from toposcope.slurm.reader import CommandReader, RestReader, SlurmReader
from toposcope.slurm.rest import SlurmRestClient, check_url
from toposcope.tokens import add_token_file_options

URL_ENV = "TOPOSCOPE_SLURM_URL"
USER_ENV = "TOPOSCOPE_SLURM_USER"
TOKEN_FILE_ENV = "TOPOSCOPE_SLURM_TOKEN_FILE"


@dataclass(frozen=True)
class SlurmSettings:
    """How to reach one Slurm cluster (see the module docstring for each field's source)."""

    url: str | None = None
    user: str | None = None
    token_file: str | None = None
    slurm_conf: str | None = None
    timeout_s: float = 10.0
    allow_insecure_token_file: bool = False


def add_slurm_options(parser: argparse.ArgumentParser) -> None:
    """Declare the ``--slurm-*`` options (and ``--allow-insecure-token-file``)."""
    group = parser.add_argument_group("Slurm")
    group.add_argument(
        "--slurm-url",
        metavar="URL",
        help=f"slurmrestd base URL, e.g. http://127.0.0.1:6820 (env {URL_ENV}); without it, "
        "squeue/sinfo/scontrol are run",
    )
    group.add_argument(
        "--slurm-user",
        metavar="NAME",
        help=f"user the JWT belongs to (env {USER_ENV}; default: the token's own claim)",
    )
    group.add_argument(
        "--slurm-token-file",
        metavar="FILE",
        help=f"file holding slurmrestd's JWT, mode 0600 (env {TOKEN_FILE_ENV}; else ${JWT_ENV})",
    )
    group.add_argument(
        "--slurm-conf", metavar="FILE", help="slurm.conf for the commands (env SLURM_CONF)"
    )
    group.add_argument(
        "--slurm-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="timeout of each request or command (default: 10)",
    )
    add_token_file_options(parser)


def settings_from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> SlurmSettings:
    """Settings from the parsed options, the environment filling what they leave out."""
    return SlurmSettings(
        url=args.slurm_url or environ.get(URL_ENV) or None,
        user=args.slurm_user or environ.get(USER_ENV) or None,
        token_file=args.slurm_token_file or environ.get(TOKEN_FILE_ENV) or None,
        slurm_conf=args.slurm_conf or environ.get("SLURM_CONF") or None,
        timeout_s=args.slurm_timeout,
        allow_insecure_token_file=args.allow_insecure_token_file,
    )


def open_reader(settings: SlurmSettings, environ: Mapping[str, str] | None = None) -> SlurmReader:
    """slurmrestd's reader when a URL is configured, else the commands' reader.

    Raises :class:`~toposcope.errors.ConfigError` for a malformed URL or a missing JWT, and
    :class:`~toposcope.slurm.errors.SlurmAuthError` for a malformed JWT.
    """
    env = dict(os.environ if environ is None else environ)
    if settings.url:
        check_url(settings.url)
        jwt = load_jwt(settings.token_file, env, allow_insecure=settings.allow_insecure_token_file)
        client = SlurmRestClient(settings.url, jwt, settings.user, timeout_s=settings.timeout_s)
        return RestReader(client)
    if settings.slurm_conf and not Path(settings.slurm_conf).is_file():
        # the commands would retry reading it for a minute before saying so
        raise ConfigError(f"slurm.conf {settings.slurm_conf} does not exist or is not a file")
    return CommandReader(SlurmCommands(settings.slurm_conf, timeout_s=settings.timeout_s))
