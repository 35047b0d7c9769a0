"""``toposcope dash``: serve the Dash app.

    toposcope dash [--prometheus URL] [--advisor URL] [--advisor-token-file FILE]
        [--listen 127.0.0.1:9851] [--refresh 30s] [--timeout 10] [--node-label LABEL]
        [--web.config.file FILE] [--auth.trusted-user-header NAME]
        [--auth.trusted-proxy ADDR[,ADDR]] [--web.allowed-hosts HOST[,HOST]]
        [--fabric-file FILE | --fabric-slurm-topology FILE | --fabric-ibnetdiscover FILE]

It reads metrics from the Prometheus HTTP API and recommendations from the advisor service;
it never scrapes exporters itself. It names the node of a series as the advisor does
(``--node-label``: give both the same value). The operator's advisor token
(``--advisor-token-file``, else the ``TOPOSCOPE_ADVISOR_TOKEN`` environment variable) stays
in this process: apply and revert are sent from here, never from the browser, and only for
a signed-in user: a basic-auth user of ``--web.config.file`` or the user a trusted proxy
names in ``--auth.trusted-user-header``. Without a token or a way to sign in the app is
read-only.
It answers only for the hosts of ``--web.allowed-hosts`` (default: the listen address and
the loopback names), which stops DNS rebinding.
The fabric page draws the cluster's network fabric read once at start from one of the
fabric options (:mod:`.fabric_source`); a malformed file exits 2 naming ``file:line``.
It listens on loopback by default; a Prometheus or advisor that is down is logged and shown
on the pages, and the app keeps serving. Exit codes: 0 stopped, 2 usage errors.
"""

from __future__ import annotations

import argparse
import logging
import os
import urllib.parse

from toposcope.auth.tokens import add_token_file_options, load_token
from toposcope.dashboards.app.access import (
    DEFAULT_PROXIES,
    Access,
    check_header_name,
    default_hosts,
    parse_hosts,
    parse_proxies,
)
from toposcope.dashboards.app.fabric_source import (
    add_fabric_arguments,
    describe_fabric,
    fabric_from_args,
)
from toposcope.dashboards.app.server import (
    DEFAULT_ADVISOR,
    DEFAULT_PROMETHEUS,
    DEFAULT_REFRESH,
    AppSettings,
    create_app,
)
from toposcope.dashboards.app.shell import REFRESH
from toposcope.errors import UsageError
from toposcope.identity.node import add_node_label_argument
from toposcope.serving.httpserver import HttpServer, parse_listen
from toposcope.serving.livewebconfig import LiveWebConfig
from toposcope.serving.webflags import add_web_arguments, apply_web_arguments

LOG = logging.getLogger("toposcope.dashboards.app")

DEFAULT_PORT = 9851
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
TOKEN_ENV = "TOPOSCOPE_ADVISOR_TOKEN"
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the app's options."""
    parser.add_argument(
        "--prometheus",
        default=DEFAULT_PROMETHEUS,
        metavar="URL",
        help=f"Prometheus (or any PromQL API) base URL (default {DEFAULT_PROMETHEUS})",
    )
    parser.add_argument(
        "--advisor",
        default=DEFAULT_ADVISOR,
        metavar="URL",
        help=f"advisor service base URL (default {DEFAULT_ADVISOR})",
    )
    parser.add_argument(
        "--advisor-token-file",
        metavar="FILE",
        help=f"bearer token for applying and reverting (default: ${TOKEN_ENV}; without "
        "either the app is read-only)",
    )
    add_token_file_options(parser)
    add_web_arguments(
        parser, DEFAULT_LISTEN, f"address to serve on (default {DEFAULT_LISTEN}: loopback only)"
    )
    parser.add_argument(
        "--refresh",
        default=DEFAULT_REFRESH,
        choices=list(REFRESH),
        help=f"default page refresh (default {DEFAULT_REFRESH})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help=(
            "seconds to wait for Prometheus and the advisor (default 10); an apply or revert "
            "not answered in time is shown as still running and followed to its end"
        ),
    )
    add_node_label_argument(parser)
    parser.add_argument(
        "--auth.trusted-user-header",
        dest="trusted_user_header",
        metavar="NAME",
        help="header in which an authenticating reverse proxy names the user (e.g. "
        "X-Forwarded-User); believed only from --auth.trusted-proxy addresses",
    )
    parser.add_argument(
        "--auth.trusted-proxy",
        dest="trusted_proxy",
        default=DEFAULT_PROXIES,
        metavar="ADDR[,ADDR]",
        help=f"addresses or networks of the proxy that sets the user header (default "
        f"{DEFAULT_PROXIES})",
    )
    parser.add_argument(
        "--web.allowed-hosts",
        dest="allowed_hosts",
        metavar="HOST[,HOST]",
        help="Host header values the app answers (HOST or HOST:PORT; default: the listen "
        "address and localhost, 127.0.0.1 and [::1], with the listen port)",
    )
    add_fabric_arguments(parser)


def check_url(option: str, url: str) -> str:
    """``url`` when it is an http(s) URL with a host (:class:`UsageError` otherwise)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise UsageError(f"{option} must be an http:// or https:// URL, not {url!r}")
    return url.rstrip("/")


def read_token(
    path: str | None, environ: dict[str, str] | None = None, allow_insecure: bool = False
) -> str | None:
    """The advisor token from ``path``, else from ``$TOPOSCOPE_ADVISOR_TOKEN``, else ``None``."""
    if path is None:
        token = (environ if environ is not None else dict(os.environ)).get(TOKEN_ENV, "").strip()
        return token or None
    return load_token(path, allow_insecure=allow_insecure)


def access_from_args(args: argparse.Namespace) -> Access:
    """Who may use the app, from ``--web.config.file`` (followed as it changes),
    ``--auth.*`` and ``--web.allowed-hosts``.
    """
    header = args.trusted_user_header
    if args.allowed_hosts is not None:
        hosts = parse_hosts(args.allowed_hosts)
    else:
        hosts = default_hosts(args.listen)
    return Access(
        web_config=LiveWebConfig(args.web_config_file) if args.web_config_file else None,
        user_header=check_header_name(header) if header is not None else None,
        trusted_proxies=parse_proxies(args.trusted_proxy),
        allowed_hosts=hosts,
    )


def describe_access(settings: AppSettings) -> str:
    """Who may apply and revert, for the start-up log line."""
    access = settings.access
    if not settings.advisor_token:
        return "read-only: no advisor token"
    who = []
    web = access.web()
    if web is not None and web.basic_auth:
        who.append(f"basic-auth users {', '.join(web.users)}")
    if access.user_header is not None:
        who.append(f"users named in {access.user_header} by a trusted proxy")
    return f"apply/revert for {' and '.join(who)}" if who else "read-only: no users configured"


def settings_from_args(args: argparse.Namespace) -> AppSettings:
    """Check the options and build the app's settings."""
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    return AppSettings(
        prometheus=check_url("--prometheus", args.prometheus),
        advisor=check_url("--advisor", args.advisor),
        advisor_token=read_token(
            args.advisor_token_file, allow_insecure=args.allow_insecure_token_file
        ),
        timeout=args.timeout,
        refresh=args.refresh,
        access=access_from_args(args),
        node_label=args.node_label,
        fabric=fabric_from_args(args),
    )


def run(args: argparse.Namespace) -> int:
    """Serve the app until SIGINT or SIGTERM."""
    settings = settings_from_args(args)
    app = create_app(settings)
    server = HttpServer(app.server, args.listen, thread_name="dash-http")
    live = settings.access.web_config
    web = apply_web_arguments(
        server, args, users="app", web=live if isinstance(live, LiveWebConfig) else None
    )
    LOG.info(
        "dash app on %s://%s/ (prometheus %s, advisor %s, %s; hosts %s; node label %s; %s)",
        "https" if web is not None and web.tls else "http",
        server.address,
        settings.prometheus,
        settings.advisor,
        describe_access(settings),
        ", ".join(settings.access.allowed_hosts),
        settings.node_label,
        describe_fabric(settings.fabric),
    )
    if not settings.access.basic_auth and parse_listen(args.listen)[0] not in LOOPBACK:
        LOG.warning(
            "the pages are open to anyone who reaches %s: add basic_auth_users", args.listen
        )
    server.serve_until_signalled()
    return 0
