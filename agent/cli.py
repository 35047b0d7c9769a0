"""``toposcope agent``: the resource-manager API for this host, backed by the local actuator.

    toposcope agent [--listen 127.0.0.1:9848] [--token-file FILE] [--hostname NAME]
        [--auth.kubernetes-tokenreview --auth.allowed-service-account NS:NAME ...
         [--auth.audience toposcope-agent] [--auth.cache-ttl 30] [--auth.kubeconfig FILE]]
        [--workloads.mode cgroup|process] [--path.sysfs DIR] [--path.procfs DIR]
        [--path.rootfs DIR] [--kubelet.pod-resources-socket PATH] [--path.runtime-state DIR]

It serves the same API as the simulator (:func:`toposcope.rm.api.make_api_app`: ``GET
/api/v1/nodes``, ``/workloads``, ``POST /api/v1/actions``...) over
:class:`~toposcope.agent.local_rm.LocalResourceManager`, so the advisor's ``agent``
backend (``--rm-url http://{node}:9848``) pins threads, writes cpusets and migrates pages on
each node. It listens on loopback unless told otherwise. Reads are open; state changes need
``Authorization: Bearer <token>`` with the token of ``--token-file``, and without a token
file every state change is refused (403), so an agent started without one cannot be steered.
In Kubernetes, ``--auth.kubernetes-tokenreview`` replaces the shared token: each caller sends
its own projected ServiceAccount token and the API server vouches for it
(:mod:`toposcope.kubeapi.tokenreview`; only the ``--auth.allowed-service-account`` accounts, only
tokens for ``--auth.audience``; 503 and nothing done when the API server cannot be asked).
``GET /metrics`` serves the agent process's own ``process_*`` and ``toposcope_build_info``.
The agent needs ``CAP_SYS_NICE`` (and write access to the cgroup filesystem for cpusets) to
act on other users' workloads, and the host's PID namespace. It respects the owner of a
workload (:mod:`toposcope.agent.ownership`): Slurm jobs only inside their allocation,
Guaranteed pods never, Burstable and BestEffort containers only inside their cpuset; with the
kubelet's pod-resources socket it names pods as the exporter does.
"""

from __future__ import annotations

import argparse
import logging
import socket

from toposcope.agent.kubelet import workload_mapper
from toposcope.agent.local_rm import LocalResourceManager
from toposcope.auth.tokens import add_token_file_options, load_token
from toposcope.config import HostPaths
from toposcope.errors import ConfigError
from toposcope.host.podresources.options import add_pod_naming_arguments
from toposcope.host.podresources.source import (
    KubeletSource,
    open_kubelet_source,
)
from toposcope.kubeapi.client import connect
from toposcope.kubeapi.tokenreview import DEFAULT_AUDIENCE, DEFAULT_TTL, Poster, TokenReviewVerifier
from toposcope.rm.api import make_api_app
from toposcope.serving.httpserver import HttpServer
from toposcope.serving.selfmetrics import with_self_metrics
from toposcope.serving.webflags import add_web_arguments, apply_web_arguments

LOG = logging.getLogger("toposcope.agent")

#: the exporter is 9847; the agent sits next to it
DEFAULT_PORT = 9848
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
#: why a web configuration's basic_auth_users cannot apply to the agent
BEARER_ONLY = (
    "the agent's callers authenticate with a bearer token (--token-file) in the same "
    "Authorization header; restrict who connects with tls_server_config client certificates"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the agent's options."""
    add_web_arguments(
        parser,
        DEFAULT_LISTEN,
        f"address to serve the API on (default {DEFAULT_LISTEN}: loopback only; "
        ":PORT for every interface, port 0 picks a free one)",
    )
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help="bearer token that state changes must carry (without it every POST answers 403)",
    )
    add_token_file_options(parser)
    parser.add_argument(
        "--auth.kubernetes-tokenreview",
        dest="auth_tokenreview",
        action="store_true",
        help="in a pod: accept the bearer tokens the Kubernetes API server authenticates "
        "(TokenReview) as an allowed service account, instead of --token-file",
    )
    parser.add_argument(
        "--auth.allowed-service-account",
        dest="auth_allowed",
        action="append",
        default=[],
        metavar="NS:NAME",
        help="service account whose tokens may change state (repeatable; e.g. "
        "toposcope:toposcope-advisor)",
    )
    parser.add_argument(
        "--auth.audience",
        dest="auth_audience",
        default=DEFAULT_AUDIENCE,
        help=f"audience the callers' tokens must be bound to (default {DEFAULT_AUDIENCE})",
    )
    parser.add_argument(
        "--auth.cache-ttl",
        dest="auth_cache_ttl",
        type=float,
        default=DEFAULT_TTL,
        metavar="SECONDS",
        help=f"how long an accepted token is remembered (default {DEFAULT_TTL:g}, at most 600)",
    )
    parser.add_argument(
        "--auth.kubeconfig",
        dest="auth_kubeconfig",
        metavar="FILE",
        help="ask the API server of this kubeconfig (default: this pod's service account)",
    )
    parser.add_argument(
        "--hostname", default="", help="node name to report (default: this host's name)"
    )
    parser.add_argument(
        "--workloads.mode",
        dest="workloads_mode",
        default="cgroup",
        choices=["cgroup", "process"],
        help="what GET /workloads lists, as the exporter's option (actions accept both names)",
    )
    parser.add_argument("--path.sysfs", dest="path_sysfs", metavar="DIR", help="sysfs mount")
    parser.add_argument("--path.procfs", dest="path_procfs", metavar="DIR", help="procfs mount")
    parser.add_argument(
        "--path.rootfs", dest="path_rootfs", metavar="DIR", help="root for cgroup mounts"
    )
    add_pod_naming_arguments(parser)


def paths_from_args(args: argparse.Namespace) -> HostPaths:
    """The host roots the options name (``/``, ``/sys``, ``/proc`` by default)."""
    paths = HostPaths.from_options(args.path_rootfs, args.path_sysfs, args.path_procfs)
    paths.check()
    return paths


def tokenreview_verifier(
    args: argparse.Namespace, api: Poster | None = None
) -> TokenReviewVerifier | None:
    """The TokenReview check the ``--auth.*`` options ask for (``None`` without
    ``--auth.kubernetes-tokenreview``); ``api`` defaults to this pod's service account.
    """
    if not args.auth_tokenreview:
        if args.auth_allowed:
            raise ConfigError("--auth.allowed-service-account needs --auth.kubernetes-tokenreview")
        return None
    if args.token_file:
        raise ConfigError("give either --token-file or --auth.kubernetes-tokenreview, not both")
    if not args.auth_allowed:
        raise ConfigError(
            "--auth.kubernetes-tokenreview needs --auth.allowed-service-account NS:NAME "
            "(the advisor's, e.g. toposcope:toposcope-advisor)"
        )
    return TokenReviewVerifier(
        api or connect(args.auth_kubeconfig, timeout=5.0),
        args.auth_allowed,
        audience=args.auth_audience,
        ttl=args.auth_cache_ttl,
    )


def build_server(
    args: argparse.Namespace,
    kubelet: KubeletSource | None = None,
    api: Poster | None = None,
) -> tuple[HttpServer, LocalResourceManager]:
    """The server and resource manager the options describe (not yet serving).

    ``kubelet`` is the kubelet source to name pods with; the caller closes it. Without one,
    one is opened from the options and stays open for the process's life. ``api`` is the API
    server that reviews tokens under ``--auth.kubernetes-tokenreview`` (default: in-cluster).
    """
    verifier = tokenreview_verifier(args, api)
    token = (
        load_token(args.token_file, allow_insecure=args.allow_insecure_token_file)
        if args.token_file
        else None
    )
    paths = paths_from_args(args)
    if kubelet is None:
        kubelet = open_kubelet_source(args.pod_resources_socket)
    manager = LocalResourceManager(
        paths,
        node_name=args.hostname or socket.gethostname(),
        mode=args.workloads_mode,
        mapper=workload_mapper(paths, kubelet, args.runtime_state),
    )
    if token is None and verifier is None:
        LOG.warning("no --token-file: the API is read-only, every state change answers 403")
    app = with_self_metrics(make_api_app(manager, token, verifier=verifier))
    server = HttpServer(app, args.listen, thread_name="agent-http")
    return server, manager


def run(args: argparse.Namespace) -> int:
    """Serve the API until SIGINT or SIGTERM."""
    kubelet = open_kubelet_source(args.pod_resources_socket)
    try:
        server, manager = build_server(args, kubelet)
        apply_web_arguments(server, args, users=BEARER_ONLY)
        LOG.info(
            "serving the resource-manager API for node %s on %s (port %d)",
            manager.node_name,
            args.listen,
            server.port,
        )
        server.serve_until_signalled()
    finally:
        kubelet.close()
    return 0
