"""``toposcope advise``: recommendations from the metrics, optionally applied.

    toposcope advise (--prometheus URL | --scrape [NAME=]URL...) [--window 1h] [--at TIME]
        [--policy NAME ...] [--set POLICY.SETTING=VALUE ...] [--format table|json|csv|markdown|html]
        [--min-gain 0.05] [--output FILE]
        [--apply [--resource-manager dry-run|sim|agent|local|slurm] [--rm-url URL]
         [--token-file FILE] [--slurm-url URL --slurm-token-file FILE ...]
         [--audit-db FILE] [--max-actions N] [--max-actions-per-node N]]
    toposcope advise revert ID --resource-manager sim|agent|local|slurm [--rm-url URL]
        [--token-file FILE] [--audit-db FILE]
    toposcope advise log [--audit-db FILE]

Exit codes: 0 nothing to do, 1 recommendations found (applied or not), 2 usage,
configuration or connection errors (also for ``revert`` when nothing could be reverted).
Dry-run calls and apply results go to stderr so that stdout carries only the report.
"""

from __future__ import annotations

import argparse
import getpass
import os
import socket
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TextIO

from toposcope.advisor.applying import Applier
from toposcope.advisor.applying.applier import REVERT_DONE
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.cliargs import (
    add_agent_arguments,
    add_analysis_arguments,
    add_source_arguments,
    agents_from_args,
    backend_from_args,
    selector,
)
from toposcope.advisor.errors import AdvisorError
from toposcope.advisor.formatters import FORMATTERS, find_formatter
from toposcope.advisor.loaders import Window
from toposcope.advisor.model import PendingWorkload
from toposcope.advisor.policies import POLICIES, build, parse_overrides, settings_markdown
from toposcope.advisor.rmclients import (
    add_backend_options,
    backend_names,
    backend_options,
    make_resource_manager,
    read_token,
)
from toposcope.advisor.runner import advise, load_model
from toposcope.errors import ConfigError, UsageError
from toposcope.resources import ResourceManager, ResourceManagerError
from toposcope.tokens import add_token_file_options

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2


def default_audit_db() -> Path:
    """``$XDG_STATE_HOME/toposcope/advisor-audit.sqlite`` (``~/.local/state`` by default)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "toposcope" / "advisor-audit.sqlite"


def parse_at(text: str) -> float:
    """Unix seconds from ``--at``: a number of seconds or an RFC 3339 time with its offset."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise UsageError(f"--at {text!r} is neither Unix seconds nor an RFC 3339 time") from exc
    if moment.tzinfo is None:
        raise UsageError(f"--at {text!r} needs a UTC offset (e.g. 2024-05-01T12:00:00Z)")
    return moment.timestamp()


def _add_manager_arguments(parser: argparse.ArgumentParser, suppress: bool) -> None:
    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument(
        "--resource-manager",
        choices=backend_names(),
        default=default("dry-run"),
        help="who applies: dry-run (default: print the calls), sim or agent (HTTP API), "
        "local (this host), slurm (a Slurm cluster: see the --slurm-* options)",
    )
    parser.add_argument(
        "--rm-url",
        default=default(None),
        metavar="URL",
        help="resource-manager API URL (agent: a template with {node} as the host, e.g. "
        "http://{node}:9848/api/v1, used with --rm-url-map NAMES or --rm-endpoints)",
    )
    add_agent_arguments(parser, suppress=suppress)
    parser.add_argument(
        "--token-file", default=default(None), metavar="FILE", help="bearer token for the API"
    )
    add_token_file_options(parser, suppress=suppress)
    parser.add_argument(
        "--audit-db",
        default=default(None),
        metavar="FILE",
        help="SQLite audit log (default $XDG_STATE_HOME/toposcope/advisor-audit.sqlite)",
    )
    add_backend_options(parser, suppress=suppress)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``toposcope advise`` and its ``revert`` and ``log`` actions."""
    add_source_arguments(parser)
    add_analysis_arguments(parser)
    parser.add_argument(
        "--at",
        metavar="TIME",
        help="evaluate the window ending at TIME (Unix seconds or RFC 3339; default: the "
        "backend's now), to compare backends or rerun a past report",
    )
    parser.add_argument(
        "--list-policies", action="store_true", help="print the policies and their settings"
    )
    parser.add_argument(
        "--format", default="table", choices=sorted(FORMATTERS), help="report format"
    )
    parser.add_argument("--output", metavar="FILE", help="write the report here (default stdout)")
    parser.add_argument(
        "--apply", action="store_true", help="apply the recommendations (see --resource-manager)"
    )
    _add_manager_arguments(parser, suppress=False)
    parser.add_argument(
        "--max-actions", type=int, default=10, help="recommendations applied per run (10)"
    )
    parser.add_argument(
        "--max-actions-per-node", type=int, default=2, help="recommendations per node (2)"
    )
    sub = parser.add_subparsers(dest="advise_command", metavar="ACTION")
    revert = sub.add_parser(
        "revert", help="undo an applied recommendation (or one action by request id)"
    )
    revert.add_argument("id", metavar="ID", help="recommendation id or action request id")
    _add_manager_arguments(revert, suppress=True)
    log = sub.add_parser("log", help="print the audit log")
    log.add_argument("--recommendation", metavar="ID", help="only this recommendation's actions")
    _add_manager_arguments(log, suppress=True)


def _actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def _audit(args: argparse.Namespace) -> AuditLog:
    return AuditLog(Path(args.audit_db) if args.audit_db else default_audit_db())


def _manager(args: argparse.Namespace, nodes: list[str], out: TextIO) -> ResourceManager:
    token = read_token(args.token_file, args.allow_insecure_token_file) if args.token_file else None
    return make_resource_manager(
        args.resource_manager,
        url=args.rm_url,
        token=token,
        nodes=nodes,
        out=out,
        agents=agents_from_args(args, token),
        options=backend_options(args.resource_manager, args),
    )


def _list_policies(out: TextIO) -> int:
    for name, cls in POLICIES.items():
        out.write(f"{name}: {cls.description}\n\n{settings_markdown(cls)}\n\n")
    return EXIT_OK


def _pending(manager: ResourceManager) -> list[PendingWorkload]:
    return [
        PendingWorkload(w.name, w.gpus_requested)
        for w in manager.workloads()
        if w.state == "pending" and w.gpus_requested > 0
    ]


def _advise(args: argparse.Namespace) -> int:
    if args.list_policies:
        return _list_policies(sys.stdout)
    if not 0 <= args.min_gain <= 10:
        raise UsageError(f"--min-gain must be between 0 and 10, not {args.min_gain}")
    if args.max_actions < 0 or args.max_actions_per_node < 0:
        raise UsageError("--max-actions and --max-actions-per-node must be >= 0")
    at = parse_at(args.at) if args.at else None
    if at is not None and args.scrape:
        raise UsageError("--at needs --prometheus: a scrape sees only the present")
    window = Window.parse(args.window, end=at)
    policies = build(args.policy, parse_overrides(args.set))
    render = find_formatter(args.format)
    backend = backend_from_args(args)
    model = load_model(backend, window, selector=selector(args), node_label=args.node_label)
    manager: ResourceManager | None = None
    if args.resource_manager != "dry-run":
        manager = _manager(args, sorted(model.nodes), sys.stderr)
        if any(p.name == "gpu-placement" for p in policies):
            model = replace(model, pending=tuple(_pending(manager)))
    report = advise(model, policies, min_gain=args.min_gain)
    text = render(report)
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write {args.output}: {exc}") from exc
    else:
        sys.stdout.write(text)
    if args.apply:
        if manager is None:
            manager = _manager(args, [], sys.stderr)
        dry = args.resource_manager == "dry-run"
        applier = Applier(
            manager,
            None if dry else _audit(args),
            actor=_actor(),
            backend=args.resource_manager,
            max_per_run=args.max_actions,
            max_per_node=args.max_actions_per_node,
        )
        for outcome in applier.apply(report.recommendations):
            sys.stderr.write(
                f"apply {outcome.recommendation_id}: {outcome.result}"
                + (f" ({outcome.detail})" if outcome.detail else "")
                + "\n"
            )
    return EXIT_FINDINGS if report.recommendations else EXIT_OK


def _revert(args: argparse.Namespace) -> int:
    if args.resource_manager == "dry-run":
        raise UsageError("revert needs --resource-manager local, or sim or agent with --rm-url")
    audit = _audit(args)
    nodes = sorted({e.node for e in audit.entries() if e.node})
    applier = Applier(
        _manager(args, nodes, sys.stderr), audit, actor=_actor(), backend=args.resource_manager
    )
    outcomes = applier.revert(args.id)
    for outcome in outcomes:
        print(f"revert {outcome.recommendation_id}: {outcome.result} ({outcome.detail})")
    return EXIT_OK if all(o.result in REVERT_DONE for o in outcomes) else EXIT_ERROR


def _log(args: argparse.Namespace) -> int:
    entries = _audit(args).entries(args.recommendation)
    for e in entries:
        before = (
            f"cpus={e.before.cpus} mems={e.before.mems} gpus={e.before.gpus}" if e.before else "-"
        )
        print(
            f"{e.intent_at} {e.actor} {e.backend} {e.request_id} {e.kind} {e.node}/{e.workload} "
            f"result={e.result or 'none'} before[{before}]"
            + (f" reverted_by={e.reverted_by}" if e.reverted_by else "")
            + (f" error={e.error}" if e.error else "")
        )
    if not entries:
        print("audit log is empty")
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    """Carry out ``advise`` (or its ``revert`` / ``log`` action); errors exit 2."""
    try:
        if args.advise_command == "revert":
            return _revert(args)
        if args.advise_command == "log":
            return _log(args)
        return _advise(args)
    except (UsageError, ConfigError, AdvisorError) as exc:
        print(f"toposcope advise: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except ResourceManagerError as exc:
        print(f"toposcope advise: resource manager error: {exc}", file=sys.stderr)
        return EXIT_ERROR
