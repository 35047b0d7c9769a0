"""``toposcope dash``: serve the Dash app.

    toposcope dash [--prometheus URL] [--advisor URL] [--advisor-token-file FILE]
        [--listen 127.0.0.1:9851] [--refresh 30s] [--timeout 10]

It reads metrics from the Prometheus HTTP API and recommendations from the advisor service;
it never scrapes exporters itself. The operator's advisor token (``--advisor-token-file``,
else the ``TOPOSCOPE_ADVISOR_TOKEN`` environment variable) stays in this process: apply and
revert are sent from here, never from the browser. Without a token the app is read-only.
It listens on loopback by default; a Prometheus or advisor that is down is logged and shown
on the pages, and the app keeps serving. Exit codes: 0 stopped, 2 usage errors.
"""

from __future__ import annotations

import argparse
import logging
import os
import urllib.parse

from toposcope.dashboards.app.pages import REFRESH
from toposcope.dashboards.app.server import (
    DEFAULT_ADVISOR,
    DEFAULT_PROMETHEUS,
    DEFAULT_REFRESH,
    AppSettings,
    create_app,
)
from toposcope.errors import UsageError
from toposcope.httpserver import HttpServer
from toposcope.tokens import load_token

LOG = logging.getLogger("toposcope.dashboards.app")

DEFAULT_PORT = 9851
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
TOKEN_ENV = "TOPOSCOPE_ADVISOR_TOKEN"


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
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to serve on (default {DEFAULT_LISTEN}: loopback only)",
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
        help="seconds to wait for Prometheus and the advisor (default 10)",
    )


def check_url(option: str, url: str) -> str:
    """``url`` when it is an http(s) URL with a host (:class:`UsageError` otherwise)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise UsageError(f"{option} must be an http:// or https:// URL, not {url!r}")
    return url.rstrip("/")


def read_token(path: str | None, environ: dict[str, str] | None = None) -> str | None:
    """The advisor token from ``path``, else from ``$TOPOSCOPE_ADVISOR_TOKEN``, else ``None``."""
    if path is None:
        token = (environ if environ is not None else dict(os.environ)).get(TOKEN_ENV, "").strip()
        return token or None
    return load_token(path)


def settings_from_args(args: argparse.Namespace) -> AppSettings:
    """Check the options and build the app's settings."""
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    return AppSettings(
        prometheus=check_url("--prometheus", args.prometheus),
        advisor=check_url("--advisor", args.advisor),
        advisor_token=read_token(args.advisor_token_file),
        timeout=args.timeout,
        refresh=args.refresh,
    )


def run(args: argparse.Namespace) -> int:
    """Serve the app until SIGINT or SIGTERM."""
    settings = settings_from_args(args)
    app = create_app(settings)
    server = HttpServer(app.server, args.listen, thread_name="dash-http")
    LOG.info(
        "dash app on http://%s/ (prometheus %s, advisor %s, %s)",
        server.address,
        settings.prometheus,
        settings.advisor,
        "apply/revert enabled" if settings.advisor_token else "read-only: no advisor token",
    )
    server.serve_until_signalled()
    return 0
