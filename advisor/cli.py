"""``toposcope advise``: recommendations from the metrics, optionally applied.

    toposcope advise (--prometheus URL | --scrape [NAME=]URL [--scrape ...]) [--window 1h]
        [--at TIME] [--policy NAME ... | --enable-policy NAME ...] [--disable-policy NAME ...]
        [--set POLICY.SETTING=VALUE ...] [--prometheus-selector MATCHERS]
        [--namespace NS ...] [--exclude-namespace NS ...] [--workload-selector SELECTOR]
        [--workload GLOB ...] [--format table|json|yaml|csv|markdown|html] [--width N]
        [--min-gain 0.05] [--output FILE] [--fail-on low|medium|high|critical]
        [--dry-run] [--apply [--resource-manager dry-run|sim|agent|local|slurm] [--rm-url URL]
         [--rm-token-file FILE] [--slurm-url URL --slurm-token-file FILE ...]
         [--audit-db FILE] [--max-actions N] [--max-actions-per-node N]]
    toposcope advise revert ID --resource-manager sim|agent|local|slurm [--rm-url URL]
        [--rm-token-file FILE] [--audit-db FILE]
    toposcope advise log [--audit-db FILE]

Exit codes, as krr, kubent and trivy: 0 when the run worked, with or without
recommendations; 1 with ``--fail-on LEVEL`` and a recommendation at least that severe, or
when ``--apply`` had a recommendation refused or failed by the resource manager (one summary
line on stderr names them); 2 on usage, configuration or connection errors (also for
``revert`` when nothing could be reverted). Dry-run commands and apply results go to stderr,
one line per recommendation, so that stdout carries only the report.
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

from toposcope.advisor.advise_options import (
    add_arguments,
    fails,
    format_options,
    policy_names,
    workload_filter,
)
from toposcope.advisor.applying import Applier
from toposcope.advisor.applying.applier import REVERT_DONE
from toposcope.advisor.audit import FAILED, RETRY_LATER, UNKNOWN, AuditLog
from toposcope.advisor.calibration import KindCalibration, calibration_from
from toposcope.advisor.cliargs import agents_from_args, backend_from_args, selector
from toposcope.advisor.dry_run import (
    PRINT_ONLY,
    GuardedPlanner,
    dry_run_backends,
    hints_from,
    planner_for,
    render_dry_run,
)
from toposcope.advisor.errors import AdvisorError
from toposcope.advisor.formatters import find_formatter
from toposcope.advisor.job_deadlines import load_deadlines
from toposcope.advisor.loaders import Window
from toposcope.advisor.memory_matrix import parse_memory_options
from toposcope.advisor.model import PendingWorkload, pending_from
from toposcope.advisor.outcomes import OutcomeLog
from toposcope.advisor.p2p_matrix import parse_options
from toposcope.advisor.policies import (
    PLACING,
    POLICIES,
    build,
    parse_overrides,
    settings_markdown,
)
from toposcope.advisor.rmclients import (
    backend_names,
    backend_options,
    make_resource_manager,
    read_token,
)
from toposcope.advisor.rmclients.clienttls import client_tls_from_args
from toposcope.advisor.runner import advise, load_model
from toposcope.advisor.workload_filter import filter_report
from toposcope.errors import ConfigError, UsageError
from toposcope.report.recommendation import Report
from toposcope.rm import ResourceManager, ResourceManagerError
from toposcope.rm.plan import Planner
from toposcope.rm.plan_script import comment

__all__ = ["EXIT_ERROR", "EXIT_FINDINGS", "EXIT_OK", "add_arguments", "parse_at", "run"]

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2
#: backends whose pending workloads a dry run reads when it can (one request, not one per node)
PENDING_READERS = frozenset({"sim", "slurm", "kubernetes"})
#: apply results that make ``--apply`` exit 1: refused or failed by the resource manager,
#: refused for now (retry later), or unknown (the resource manager stopped answering)
APPLY_FAILED = frozenset({FAILED, RETRY_LATER, UNKNOWN})


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


def local_actor() -> str:
    """Who applies from this process, as the audit log records it: ``user@host``.

    A user with no name in the password database is recorded by its uid.
    """
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def _audit(args: argparse.Namespace) -> AuditLog:
    return AuditLog(Path(args.audit_db) if args.audit_db else default_audit_db())


def _manager(args: argparse.Namespace, nodes: list[str], out: TextIO) -> ResourceManager:
    token = (
        read_token(args.rm_token_file, args.allow_insecure_token_file)
        if args.rm_token_file
        else None
    )
    return make_resource_manager(
        args.resource_manager,
        url=args.rm_url,
        token=token,
        nodes=nodes,
        out=out,
        agents=agents_from_args(args, token),
        options=backend_options(args.resource_manager, args),
        tls=client_tls_from_args(args),
    )


def _list_policies(out: TextIO) -> int:
    for name, cls in POLICIES.items():
        out.write(f"{name}: {cls.description}\n\n{settings_markdown(cls)}\n\n")
    return EXIT_OK


def _pending(manager: ResourceManager) -> tuple[PendingWorkload, ...]:
    return pending_from(manager.workloads())


def _check(args: argparse.Namespace) -> None:
    if not 0 <= args.min_gain <= 10:
        raise UsageError(f"--min-gain must be between 0 and 10, not {args.min_gain}")
    if args.max_actions < 0 or args.max_actions_per_node < 0:
        raise UsageError("--max-actions and --max-actions-per-node must be >= 0")
    if args.dry_run and args.resource_manager not in dry_run_backends():
        known = ", ".join(dry_run_backends())
        raise UsageError(
            f"--dry-run has no plan for --resource-manager {args.resource_manager} "
            f"(it has for {known})"
        )
    if not args.dry_run and args.resource_manager in PRINT_ONLY:
        raise UsageError(
            f"--resource-manager {args.resource_manager} can only print commands (--dry-run)"
        )
    if args.at and (args.scrape or args.sim):
        raise UsageError("--at needs --prometheus: a scrape sees only the present")


def _write(text: str, output: str | None) -> None:
    if not output:
        sys.stdout.write(text)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {output}: {exc}") from exc


def _apply(args: argparse.Namespace, report: Report, manager: ResourceManager | None) -> bool:
    """Apply the report's recommendations, one stderr line each; whether none failed
    (a refusal, a failure or an unreachable resource manager also gets a summary line).
    """
    if manager is None:
        manager = _manager(args, [], sys.stderr)
    dry = args.resource_manager == "dry-run"
    applier = Applier(
        manager,
        None if dry else _audit(args),
        actor=local_actor(),
        backend=args.resource_manager,
        max_per_run=args.max_actions,
        max_per_node=args.max_actions_per_node,
    )
    outcomes = applier.apply(report.recommendations)
    for outcome in outcomes:
        sys.stderr.write(
            f"apply {outcome.recommendation_id}: {outcome.result}"
            + (f" ({outcome.detail})" if outcome.detail else "")
            + "\n"
        )
    failed = [o for o in outcomes if o.result in APPLY_FAILED]
    if failed:
        listed = ", ".join(f"{o.recommendation_id} ({o.result})" for o in failed)
        sys.stderr.write(
            f"toposcope advise: error: {len(failed)} of {len(outcomes)} recommendation(s) "
            f"not applied: {listed}\n"
        )
    return not failed


def _calibration(path: str | None) -> dict[str, KindCalibration]:
    """The calibration of the verified outcomes in the audit log ``path`` (none: empty)."""
    if not path:
        return {}
    if not Path(path).is_file():
        raise UsageError(f"--calibrate-from: no audit log at {path}")
    return calibration_from(OutcomeLog(path))


def _advise(args: argparse.Namespace) -> int:
    if args.list_policies:
        return _list_policies(sys.stdout)
    _check(args)
    calibration = _calibration(args.calibrate_from)
    window = Window.parse(args.window, end=parse_at(args.at) if args.at else None)
    policies = build(policy_names(args), parse_overrides(args.set))
    chosen = workload_filter(args)
    render = find_formatter(args.format)
    options = format_options(args)
    p2p = parse_options(args.p2p_bandwidth)
    memory = parse_memory_options(args.memory_bandwidth)
    deadlines = load_deadlines(args.job_deadlines)
    backend = backend_from_args(args)
    model = load_model(
        backend,
        window,
        selector=selector(args),
        node_label=args.node_label,
        p2p=p2p,
        memory=memory,
        deadlines=deadlines,
    )
    manager: ResourceManager | None = None
    unread = ""
    placing = any(p.name in PLACING for p in policies)
    if args.resource_manager in backend_names() and args.resource_manager != "dry-run":
        if not args.dry_run:
            manager = _manager(args, sorted(model.nodes), sys.stderr)
            if placing:
                model = replace(model, pending=_pending(manager))
        elif placing and args.resource_manager in PENDING_READERS:
            try:
                pending = _pending(_manager(args, sorted(model.nodes), sys.stderr))
                model = replace(model, pending=pending)
            except (ConfigError, ResourceManagerError, AdvisorError) as exc:
                unread = f"pending workloads were not read, so nothing is placed: {exc}"
    report = filter_report(
        advise(model, policies, min_gain=args.min_gain, calibration=calibration), model, chosen
    )
    _write(render(report, options), args.output)
    if args.dry_run:
        backend = args.resource_manager
        planner = planner_for(backend, args.rm_url, backend_options(backend, args))
        listed = getattr(args, "rm_url_map", None) or getattr(args, "rm_endpoints", None)
        if backend == "agent" and listed:
            agents = _manager(args, sorted(model.nodes), sys.stderr)
            if isinstance(agents, Planner):  # the allow-list's endpoints, no request sent
                planner = GuardedPlanner(agents, backend)
        script = render_dry_run(report, backend, planner, hints_from(model))
        if unread:
            first, _, rest = script.partition("\n")
            script = f"{first}\n{comment(unread)}\n{rest}"
        sys.stderr.write(script)
    elif args.apply and not _apply(args, report, manager):
        return EXIT_FINDINGS
    return EXIT_FINDINGS if fails(report.recommendations, args.fail_on) else EXIT_OK


def _revert(args: argparse.Namespace) -> int:
    if args.resource_manager == "dry-run":
        raise UsageError("revert needs --resource-manager local, or sim or agent with --rm-url")
    audit = _audit(args)
    nodes = sorted({e.node for e in audit.entries() if e.node})
    applier = Applier(
        _manager(args, nodes, sys.stderr), audit, actor=local_actor(), backend=args.resource_manager
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
