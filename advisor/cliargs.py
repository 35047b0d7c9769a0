"""Command-line options shared by ``toposcope advise``, ``toposcope place`` and ``toposcope
advisor serve``: where the metrics come from (a PromQL API or exporters to scrape) and how to
reach them, what one analysis runs, and which node agents the ``agent`` backend may call.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toposcope.advisor.loaders import MetricsBackend, PrometheusLoader, ScrapeLoader, ScrapeTarget
from toposcope.advisor.loaders.base import check_selector
from toposcope.advisor.loaders.dcgm import GPU_METRICS_SOURCES, with_gpu_metrics_source
from toposcope.advisor.loaders.sim_targets import sim_targets
from toposcope.advisor.policies import POLICIES
from toposcope.advisor.rmclients import EndpointResolver, read_token, resolver_from_options
from toposcope.advisor.rmclients.clienttls import add_client_tls_arguments
from toposcope.auth.tokens import Token
from toposcope.errors import ConfigError, UsageError
from toposcope.identity.node import add_node_label_argument


class DeprecatedAlias(argparse.Action):
    """An option's old name: stores its value like the new name does and warns on stderr
    that it is deprecated (``replacement`` names the new option).
    """

    def __init__(self, *args: Any, replacement: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.replacement = replacement

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        """Warn, then store ``values``."""
        sys.stderr.write(
            f"{parser.prog}: warning: {option_string} is deprecated, use {self.replacement}\n"
        )
        setattr(namespace, self.dest, values)


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """``--prometheus URL | --scrape URL [--scrape URL...] | --sim URL``, their connection
    options, and ``--gpu-metrics-source`` (whose series give GPU traffic and activity).
    """
    group = parser.add_argument_group("metrics source (one of)")
    group.add_argument(
        "--prometheus",
        metavar="URL",
        help="PromQL API base URL: Prometheus, VictoriaMetrics, Thanos or Mimir "
        "(e.g. http://prometheus:9090, http://mimir/prometheus)",
    )
    group.add_argument(
        "--scrape",
        action="append",
        metavar="[NAME=]URL",
        help="read an exporter's /metrics directly (repeatable, one URL each; NAME: the node "
        "name to report)",
    )
    group.add_argument(
        "--sim",
        metavar="URL",
        help="scrape every node of a running toposcope sim at this URL "
        "(e.g. http://127.0.0.1:9850), named as the simulator names them",
    )
    parser.add_argument(
        "--bearer-token-file", metavar="FILE", help="bearer token for the PromQL API"
    )
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="extra HTTP header for the PromQL API (repeatable; e.g. X-Scope-OrgID:tenant)",
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra query parameter for the PromQL API (repeatable; e.g. dedup=true)",
    )
    parser.add_argument(
        "--prometheus-selector",
        dest="selector",
        default="",
        metavar="MATCHERS",
        help='PromQL label matchers added to every query, e.g. job="toposcope"',
    )
    parser.add_argument(
        "--selector",
        dest="selector",
        action=DeprecatedAlias,
        replacement="--prometheus-selector",
        metavar="MATCHERS",
        help="deprecated name of --prometheus-selector",
    )
    parser.add_argument(
        "--gpu-metrics-source",
        choices=GPU_METRICS_SOURCES,
        default="toposcope",
        help="where GPU traffic and SM activity come from: toposcope's series (default) or "
        "dcgm-exporter's DCGM_FI_PROF_* series, joined to toposcope's GPUs by UUID",
    )
    add_node_label_argument(parser)
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="seconds per HTTP request (default 10)"
    )
    parser.add_argument(
        "--retries", type=int, default=2, help="retries of a failed query (default 2)"
    )


def _pairs(items: list[str], sep: str, what: str) -> dict[str, str]:
    result = {}
    for item in items:
        name, found, value = item.partition(sep)
        if not found or not name.strip():
            raise UsageError(f"{what} {item!r} is not NAME{sep}VALUE")
        result[name.strip()] = value.strip()
    return result


def backend_from_args(args: argparse.Namespace) -> MetricsBackend:
    """The metrics backend the options ask for (:class:`UsageError` unless exactly one)."""
    if [bool(args.prometheus), bool(args.scrape), bool(args.sim)].count(True) != 1:
        raise UsageError(
            "give exactly one of --prometheus URL, --scrape URL (repeatable) or --sim URL"
        )
    if args.timeout <= 0 or args.retries < 0:
        raise UsageError("--timeout must be > 0 and --retries >= 0")
    check_selector(args.selector)
    return with_gpu_metrics_source(_backend(args), args.gpu_metrics_source)


def _backend(args: argparse.Namespace) -> MetricsBackend:
    """The backend of the validated source options (``--prometheus``, ``--scrape``, ``--sim``)."""
    if args.scrape:
        return ScrapeLoader([ScrapeTarget.parse(t) for t in args.scrape], timeout=args.timeout)
    if args.sim:
        targets = sim_targets(args.sim, timeout=args.timeout)
        nodes = sum(1 for target in targets if target.node is not None)
        source = f"sim:{args.sim} ({nodes} nodes)"
        return ScrapeLoader(targets, timeout=args.timeout, source=source)
    insecure = getattr(args, "allow_insecure_token_file", False)
    token = read_token(Path(args.bearer_token_file), insecure) if args.bearer_token_file else None
    return PrometheusLoader(
        args.prometheus,
        headers=_pairs(args.header, ":", "--header"),
        bearer_token=token,
        params=_pairs(args.param, "=", "--param"),
        timeout=args.timeout,
        retries=args.retries,
    )


def selector(args: argparse.Namespace) -> str:
    """The validated ``--prometheus-selector`` text."""
    try:
        return check_selector(args.selector)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc


def add_analysis_arguments(parser: argparse.ArgumentParser) -> None:
    """``--window``, ``--policy``, ``--set`` and ``--min-gain``: what one analysis runs."""
    parser.add_argument(
        "--window", default="1h", help="look-back window, a PromQL duration (default 1h)"
    )
    parser.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="NAME",
        help=f"policy to run (repeatable; default all: {', '.join(POLICIES)})",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="POLICY.SETTING=VALUE",
        help="change a policy setting (repeatable; see toposcope advise --list-policies)",
    )
    parser.add_argument(
        "--min-gain",
        type=float,
        default=0.05,
        help="leave out recommendations with a smaller estimated gain (default 0.05)",
    )


def add_agent_arguments(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """``--rm-url-map`` / ``--rm-endpoints``: the allow-list of node agents (``agent`` backend),
    and ``--rm-tls-*``: how the HTTP backends connect.

    With ``suppress`` the options default to absent, for sub-actions that inherit them.
    """
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--rm-url-map",
        default=default,
        metavar="FILE|NODE=URL,...",
        help="agent backend: the agents it may call, a YAML file (nodes: {NODE: URL} or a list "
        "of names for the --rm-url template) or NODE=URL pairs; no other node gets the token",
    )
    parser.add_argument(
        "--rm-endpoints",
        default=default,
        metavar="kubernetes:NAMESPACE/SERVICE",
        help="agent backend in Kubernetes: each node's agent pod from the Service's endpoints "
        "(with --rm-url http://{node}:PORT/api/v1 for scheme, port and path)",
    )
    add_client_tls_arguments(parser, suppress=suppress)


def agents_from_args(args: argparse.Namespace, token: Token | None) -> EndpointResolver | None:
    """The agent allow-list for ``--resource-manager agent`` (``None`` for other backends)."""
    if args.resource_manager != "agent":
        return None
    return resolver_from_options(
        url=args.rm_url,
        url_map=getattr(args, "rm_url_map", None),
        endpoints=getattr(args, "rm_endpoints", None),
        token=token,
        allow_insecure_token_file=getattr(args, "allow_insecure_token_file", False),
    )
