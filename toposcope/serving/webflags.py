"""The serving flags every daemon shares, in exporter-toolkit's spelling:
``--web.listen-address`` (repeatable; ``--listen`` is the same flag) and
``--web.config.file`` (TLS, basic-auth users, headers: :mod:`toposcope.serving.webconfig`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from toposcope.errors import ConfigError
from toposcope.serving.httpserver import HttpServer
from toposcope.serving.livewebconfig import LiveWebConfig


class _ListenAction(argparse.Action):
    """The first address replaces the default (``args.listen``); later ones are added to
    ``args.listen_also``.
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        also = getattr(namespace, "listen_also", None)
        if also is None:
            namespace.listen = values
            namespace.listen_also = []
        else:
            also.append(values)


def add_web_arguments(
    parser: argparse.ArgumentParser, default_listen: str, listen_help: str
) -> None:
    """Declare ``--web.listen-address``/``--listen`` and ``--web.config.file``."""
    parser.add_argument(
        "--web.listen-address",
        "--listen",
        dest="listen",
        action=_ListenAction,
        default=default_listen,
        metavar="HOST:PORT",
        help=f"{listen_help}; repeat to listen on several addresses",
    )
    parser.set_defaults(listen_also=None)
    parser.add_argument(
        "--web.config.file",
        dest="web_config_file",
        metavar="FILE",
        help="exporter-toolkit web configuration: tls_server_config, basic_auth_users, "
        "http_server_config.headers (read again on change or SIGHUP)",
    )


def apply_web_arguments(
    server: HttpServer,
    args: argparse.Namespace,
    *,
    users: str = "server",
    web: LiveWebConfig | None = None,
) -> LiveWebConfig | None:
    """Give ``server`` the extra listen addresses and the web configuration of ``args``.

    ``users`` says who checks ``basic_auth_users`` (and adds the headers): ``"server"`` (on
    every request), ``"app"`` (the application does) or the reason the daemon cannot take
    users (then a file listing some is a :class:`ConfigError`). ``web`` is the file's live
    configuration when the caller already reads it (the Dash app checks its users with the
    same one, so that both follow the file's changes and SIGHUP).
    """
    path = getattr(args, "web_config_file", None)
    if web is None and path:
        web = LiveWebConfig(path)
    if web is not None:
        if users not in ("server", "app") and web.current().basic_auth:
            raise ConfigError(f"{web.path}: basic_auth_users: {users}")
        server.use_web_config(web, in_app=users == "app")
    for address in getattr(args, "listen_also", None) or []:
        server.add_listener(address)
    return web
