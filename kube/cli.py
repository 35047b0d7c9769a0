"""``toposcope kube``: the Kubernetes part's own daemons.

    toposcope kube webhook --web.config.file FILE [--web.listen-address 127.0.0.1:9443]
    toposcope kube claim-advice (--pod NAMESPACE/NAME | --prometheus URL) [--kubeconfig FILE]

``webhook`` serves the mutating admission webhook that adds the ``toposcope.io/placement``
scheduling gate to the pods that opt in (:mod:`.webhook`, ``docs/kubernetes.md``). It needs
TLS (the web configuration's ``tls_server_config``): without it, it exits with status 2.
Like every daemon it serves its own ``process_*`` and ``toposcope_build_info`` on ``/metrics``.
``claim-advice`` prints the ResourceClaimTemplate changes that align DRA pods' devices
(:mod:`.claim_cli`).
"""

from __future__ import annotations

import argparse
import logging

from toposcope.kube import claim_cli
from toposcope.kube.webhook import (
    DEFAULT_LISTEN,
    MAX_BODY,
    MUTATE_PATH,
    require_tls,
    webhook_app,
)
from toposcope.serving.httpserver import HttpServer
from toposcope.serving.selfmetrics import with_self_metrics
from toposcope.serving.webflags import add_web_arguments, apply_web_arguments

LOG = logging.getLogger("toposcope.kube")

#: why the webhook takes no basic-auth users (a web configuration listing some is refused)
NO_USERS = "the API server sends no password to a webhook; authenticate it with TLS instead"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``webhook`` and its serving options, and ``claim-advice``."""
    actions = parser.add_subparsers(dest="kube_action", metavar="ACTION", required=True)
    webhook = actions.add_parser(
        "webhook",
        help="serve the mutating admission webhook that gates opted-in pods for placement",
    )
    add_web_arguments(
        webhook,
        DEFAULT_LISTEN,
        f"address to serve {MUTATE_PATH} on over TLS (default {DEFAULT_LISTEN}, loopback only)",
    )
    claim_cli.add_arguments(
        actions.add_parser(
            "claim-advice",
            help="print the ResourceClaimTemplate changes that align DRA pods' devices",
        )
    )


def serve_webhook(args: argparse.Namespace) -> HttpServer:
    """The webhook's server, bound and configured, not serving yet (exit 2 without TLS)."""
    app = with_self_metrics(webhook_app)
    server = HttpServer(app, args.listen, "webhook", max_body=MAX_BODY)
    try:
        require_tls(apply_web_arguments(server, args, users=NO_USERS))
    except BaseException:
        server.close()
        raise
    return server


def run(args: argparse.Namespace) -> int:
    """Serve the webhook until SIGINT or SIGTERM, or print claim advice."""
    if args.kube_action == "claim-advice":
        return claim_cli.run(args)
    server = serve_webhook(args)
    LOG.info("placement-gate webhook listening on https://%s%s", server.address, MUTATE_PATH)
    server.serve_until_signalled()
    return 0
