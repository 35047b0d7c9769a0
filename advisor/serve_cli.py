"""``toposcope advisor serve``: the advisor as a long-running service.

    toposcope advisor serve (--prometheus URL | --scrape [NAME=]URL...) [--window 1h]
        [--policy NAME ...] [--set POLICY.SETTING=VALUE ...] [--min-gain 0.05]
        [--interval 60s] [--listen 127.0.0.1:9849] [--api-token-file FILE]
        [--resource-manager dry-run|sim|agent|local|slurm] [--rm-url URL] [--rm-token-file FILE]
        [--slurm-url URL --slurm-token-file FILE ...]
        [--audit-db FILE] [--verify-after DURATION] [--harm-threshold 0.1]
        [--paid-share 0.5] [--reuse-window DURATION]
        [--progress-metric 'NAME_REGEX=PROMQL with {workload}' ...]
        [--leader-elect [--leader-elect-resource-lock auto|leases|file] ...]
        [--auto-apply [--auto-apply-config FILE] [--auto-apply-kill-switch FILE] ...]

It analyses every ``--interval`` (the same loaders and policies as ``toposcope advise``),
serves ``/metrics`` (scrape it as job ``toposcope-advisor``, which the alert rules expect)
and the JSON API of :mod:`toposcope.advisor.api`, on loopback unless told otherwise.
Applying and reverting need the bearer token of ``--api-token-file``; the resource manager is
dry-run unless ``--resource-manager`` names another, and every action goes to the audit log
(``--audit-db``), which is the truth across restarts. Applied recommendations are verified
after ``--verify-after`` (default: the window) and reverted when harmful and undoable; a
moved or placed job is judged by its progress (``--progress-metric`` where a job class
publishes its own), a release by its GPUs being freed and reused within ``--reuse-window``.

With ``--leader-elect`` several replicas share the audit log and one of them acts
(:mod:`toposcope.advisor.leader_flags`): the others answer reads and refuse changes with 503
until they take over. A leader that cannot renew its lease exits with status 1 (the
descheduler and controller-runtime do the same), so that it never acts beside its successor.

With ``--auto-apply`` the leader also applies recommendations on its own after each
analysis, within the policy of ``--auto-apply-config`` and the limit flags
(:mod:`toposcope.advisor.autoapply`); without it nothing is applied unless asked.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from toposcope.advisor.acting import ManagerFactory
from toposcope.advisor.api import DEFAULT_LISTEN, advisor_app, service_server
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.autoapply.decisions import DecisionLog
from toposcope.advisor.autoapply.flags import add_auto_apply_arguments, policy_from_args
from toposcope.advisor.autoapply.loop import AutoApplier
from toposcope.advisor.cli import default_audit_db, local_actor
from toposcope.advisor.cliargs import (
    DeprecatedAlias,
    add_agent_arguments,
    add_analysis_arguments,
    add_source_arguments,
    agents_from_args,
    backend_from_args,
    selector,
)
from toposcope.advisor.errors import AdvisorError
from toposcope.advisor.job_deadlines import add_deadline_arguments, checked_deadlines_file
from toposcope.advisor.leader_election import LeaderElector
from toposcope.advisor.leader_flags import Election, add_leader_arguments, election_from_args
from toposcope.advisor.loaders.base import Window, parse_duration
from toposcope.advisor.memory_matrix import add_memory_arguments, parse_memory_options
from toposcope.advisor.outcomes import OutcomeLog, VerificationRule
from toposcope.advisor.p2p_matrix import add_p2p_arguments, parse_options
from toposcope.advisor.policies import build, parse_overrides
from toposcope.advisor.progress_metrics import parse_progress_metric
from toposcope.advisor.rmclients import (
    add_backend_options,
    backend_names,
    backend_options,
    make_resource_manager,
    read_token,
    registered_names,
    rotating_token,
)
from toposcope.advisor.rmclients.clienttls import client_tls_from_args
from toposcope.advisor.service import AdvisorService, AnalysisSettings
from toposcope.auth.tokens import Token, add_token_file_options
from toposcope.errors import ConfigError, UsageError
from toposcope.logformat import add_log_arguments
from toposcope.rm import ResourceManager
from toposcope.serving.webflags import add_web_arguments, apply_web_arguments

LOG = logging.getLogger("toposcope.advisor.serve_cli")

EXIT_OK = 0
EXIT_LOST_LEADERSHIP = 1
EXIT_ERROR = 2
#: why a web configuration's basic_auth_users cannot apply to the advisor's API
BEARER_ONLY = (
    "the API's callers authenticate with a bearer token (--api-token-file) in the same "
    "Authorization header; restrict who connects with tls_server_config client certificates"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``toposcope advisor`` and its ``serve`` action."""
    sub = parser.add_subparsers(dest="advisor_command", metavar="ACTION", required=True)
    serve = sub.add_parser(
        "serve",
        help="analyse periodically; serve /metrics and the recommendations API",
        description="analyse periodically; serve /metrics and the recommendations API",
    )
    add_source_arguments(serve)
    add_analysis_arguments(serve)
    add_p2p_arguments(serve)
    add_memory_arguments(serve)
    add_deadline_arguments(serve)
    serve.add_argument(
        "--interval", default="60s", help="time between analyses, a PromQL duration (60s)"
    )
    add_web_arguments(
        serve,
        DEFAULT_LISTEN,
        f"address of /metrics and the API (default {DEFAULT_LISTEN}: loopback only)",
    )
    add_log_arguments(serve)
    serve.add_argument(
        "--api-token-file",
        metavar="FILE",
        help="this service's own API token: apply and revert requests must carry it (without "
        "it they answer 403); the resource manager's is --rm-token-file",
    )
    serve.add_argument(
        "--token-file",
        dest="api_token_file",
        action=DeprecatedAlias,
        replacement="--api-token-file",
        metavar="FILE",
        help="deprecated name of --api-token-file",
    )
    add_token_file_options(serve)
    serve.add_argument(
        "--resource-manager",
        choices=backend_names(),
        default="dry-run",
        help="who applies: dry-run (default: record the calls only), sim or agent (HTTP "
        "API), local (this host), slurm (a Slurm cluster: see the --slurm-* options)",
    )
    serve.add_argument(
        "--rm-url",
        metavar="URL",
        help="resource-manager API URL (agent: a template with {node} as the host, e.g. "
        "http://{node}:9848/api/v1, used with --rm-url-map NAMES or --rm-endpoints)",
    )
    add_agent_arguments(serve)
    serve.add_argument(
        "--rm-token-file", metavar="FILE", help="bearer token for the resource-manager API"
    )
    add_backend_options(serve)
    serve.add_argument(
        "--audit-db",
        metavar="FILE",
        help="SQLite audit log (default $XDG_STATE_HOME/toposcope/advisor-audit.sqlite)",
    )
    serve.add_argument(
        "--verify-after",
        metavar="DURATION",
        help="judge an applied change this long after it (default: the --window)",
    )
    serve.add_argument(
        "--harm-threshold",
        type=float,
        default=0.10,
        help="harmful when cores used or GPU utilization fall by more than this share, or "
        "the remote share rises by more (default 0.10)",
    )
    serve.add_argument(
        "--paid-share",
        "--effective-share",
        dest="paid_share",
        type=float,
        default=0.5,
        help="paid when at least this share of the remote share is gone, or a job move "
        "gained at least this share of its estimate (default 0.5; --effective-share is its "
        "earlier name)",
    )
    serve.add_argument(
        "--reuse-window",
        metavar="DURATION",
        default="1h",
        help="a release whose GPUs nobody took within this long (after --verify-after) is "
        "neutral (default 1h)",
    )
    serve.add_argument(
        "--progress-metric",
        action="append",
        default=[],
        metavar="NAME_REGEX=PROMQL",
        help="judge moved and placed jobs whose name matches NAME_REGEX by this PromQL (a "
        "rate, higher is faster), {workload} standing for the job's name as a label value: "
        "'train-.*=sum(rate(steps_total{job={workload}}[5m]))' (repeatable; first match wins)",
    )
    add_leader_arguments(serve)
    add_auto_apply_arguments(serve)


def _duration(option: str, text: str) -> float:
    try:
        return parse_duration(text)
    except ConfigError as exc:
        raise UsageError(f"{option}: {exc}") from exc


def manager_factory(args: argparse.Namespace, rm_token: Token | None) -> ManagerFactory:
    """The resource manager per call; an in-process one (``local``, ``slurm``) is built once
    (it remembers its actions, the before-state of its pins, the migrations under way).
    """
    built: dict[str, ResourceManager] = {}
    agents = agents_from_args(args, rm_token)
    tls = client_tls_from_args(args)
    name = args.resource_manager
    options = backend_options(name, args)
    in_process = name in registered_names()

    def factory(nodes: Sequence[str], out: TextIO) -> ResourceManager:
        if in_process:
            if name not in built:
                built[name] = make_resource_manager(name, options=options)
            return built[name]
        return make_resource_manager(
            name,
            url=args.rm_url,
            token=rm_token,
            nodes=nodes,
            out=out,
            agents=agents,
            tls=tls,
        )

    factory([], sys.stderr)  # missing options fail now, not at the first apply
    return factory


def audit_path(args: argparse.Namespace) -> Path:
    """The audit database the options name (``--audit-db`` or the default)."""
    return Path(args.audit_db) if args.audit_db else default_audit_db()


def build_service(args: argparse.Namespace) -> AdvisorService:
    """The service the options describe (not yet running)."""
    if not 0 <= args.min_gain <= 10:
        raise UsageError(f"--min-gain must be between 0 and 10, not {args.min_gain}")
    window = Window.parse(args.window)
    policies = build(args.policy, parse_overrides(args.set))
    backend = backend_from_args(args)
    # read again whenever it changes: in Kubernetes it is a projected token the kubelet rotates
    rm_token = rotating_token(args.rm_token_file, args.allow_insecure_token_file)
    path = audit_path(args)
    verify_after = _duration("--verify-after", args.verify_after) if args.verify_after else None
    if verify_after is None:
        verify_after = window.seconds
    reuse_window = _duration("--reuse-window", args.reuse_window)
    try:
        progress_metrics = [parse_progress_metric(text) for text in args.progress_metric]
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    rule = VerificationRule(
        verify_after_seconds=verify_after,
        harm_threshold=args.harm_threshold,
        paid_share=args.paid_share,
        give_up_seconds=max(86400.0, verify_after + reuse_window),
        reuse_window_seconds=reuse_window,
    )
    auto_policy = policy_from_args(args)
    service = AdvisorService(
        backend,
        policies,
        AnalysisSettings(
            window,
            selector(args),
            args.node_label,
            args.min_gain,
            parse_options(args.p2p_bandwidth),
            memory=parse_memory_options(args.memory_bandwidth),
            deadlines_file=checked_deadlines_file(args.job_deadlines),
        ),
        manager_factory=manager_factory(args, rm_token),
        backend_name=args.resource_manager,
        audit=AuditLog(path),
        outcomes=OutcomeLog(path),
        rule=rule,
        actor=local_actor(),
        progress_metrics=progress_metrics,
    )
    if auto_policy is not None:
        service.auto_apply = AutoApplier(
            auto_policy, service.acting, DecisionLog(path), service.clock
        )
    return service


def api_token(args: argparse.Namespace) -> str | None:
    """The bearer token apply and revert requests must carry (``None``: they are refused)."""
    token = (
        read_token(args.api_token_file, args.allow_insecure_token_file)
        if args.api_token_file
        else None
    )
    if token is None:
        LOG.warning("no --api-token-file: applying and reverting through the API are disabled")
    return token


def campaign(service: AdvisorService, election: Election, lost: threading.Event) -> LeaderElector:
    """Start campaigning for ``service``; losing the lease sets ``lost`` and ends serving
    (SIGTERM to this process, so that the main loop's clean-up runs).
    """

    def on_lost() -> None:
        service.step_down()
        lost.set()
        os.kill(os.getpid(), signal.SIGTERM)

    elector = LeaderElector(election.lock, election.settings, service.take_over, on_lost)
    service.campaign(elector)
    elector.start()
    return elector


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM; configuration errors exit 2, a lost lease 1."""
    try:
        interval = _duration("--interval", args.interval)
        token = api_token(args)
        election = election_from_args(args, audit_path(args))
        service = build_service(args)
        server = service_server(advisor_app(service, token), args.listen)
        apply_web_arguments(server, args, users=BEARER_ONLY)
    except (UsageError, ConfigError, AdvisorError) as exc:
        print(f"toposcope advisor serve: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    lost = threading.Event()
    elector = campaign(service, election, lost) if election is not None else None
    if elector is None:
        service.recover()
    service.start(interval)
    LOG.info(
        "advisor serving on %s (port %d), analysing every %gs, resource manager %s",
        args.listen,
        server.port,
        interval,
        args.resource_manager,
    )
    try:
        server.serve_until_signalled()
    finally:
        if elector is not None:
            service.step_down()  # refuse new changes, let the one under way finish
            elector.stop()  # then hand the lock over
        service.stop()
    if lost.is_set():
        print("toposcope advisor serve: error: leader election lost", file=sys.stderr)
        return EXIT_LOST_LEADERSHIP
    return EXIT_OK
