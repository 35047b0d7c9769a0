"""The options of ``toposcope advise`` and what they mean once parsed.

Declared here so that :mod:`toposcope.advisor.cli` holds only what a run does: the metrics
source and analysis options (shared with ``place`` and ``advisor serve``, see
:mod:`.cliargs`), the report's format and width, the workload filters, the policy choice,
``--fail-on`` and the resource-manager options of ``--apply``/``--dry-run``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Mapping

from toposcope.advisor.cliargs import (
    DeprecatedAlias,
    add_agent_arguments,
    add_analysis_arguments,
    add_source_arguments,
)
from toposcope.advisor.dry_run import PRINT_ONLY
from toposcope.advisor.formatters import FORMATTERS, FormatOptions
from toposcope.advisor.job_deadlines import add_deadline_arguments
from toposcope.advisor.label_selector import SelectorError, parse_selector
from toposcope.advisor.memory_matrix import add_memory_arguments
from toposcope.advisor.p2p_matrix import add_p2p_arguments
from toposcope.advisor.policies import POLICIES
from toposcope.advisor.rmclients import add_backend_options, backend_names
from toposcope.advisor.workload_filter import WorkloadFilter
from toposcope.auth.tokens import add_token_file_options
from toposcope.errors import UsageError
from toposcope.report.recommendation import Recommendation, Severity

#: ``--fail-on`` level -> the lowest report severity that fails the run (exit 1)
FAIL_ON: Mapping[str, Severity] = {
    "low": Severity.OK,
    "medium": Severity.INFO,
    "high": Severity.WARNING,
    "critical": Severity.CRITICAL,
}
_RANK = {severity: rank for rank, severity in enumerate(Severity)}


def fails(recommendations: tuple[Recommendation, ...], level: str | None) -> bool:
    """Whether any recommendation is at or above ``--fail-on level`` (never without one)."""
    if level is None:
        return False
    floor = _RANK[FAIL_ON[level]]
    return any(_RANK[r.severity] >= floor for r in recommendations)


def _add_manager_arguments(parser: argparse.ArgumentParser, suppress: bool) -> None:
    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    names = backend_names()
    parser.add_argument(
        "--resource-manager",
        choices=[*names, *PRINT_ONLY],
        default=default("dry-run"),
        help="who applies: dry-run (default: print the calls), sim or agent (HTTP API), "
        "local (this host), slurm (a Slurm cluster: see the --slurm-* options); with "
        "--dry-run, whose plan to print (kubernetes, systemd too)",
    )
    parser.add_argument(
        "--rm-url",
        default=default(None),
        metavar="URL",
        help="resource-manager API URL: sim: http://HOST:9850/api/v1 (the simulator's default "
        "port); agent: a template with {node} as the host, http://{node}:9848/api/v1 (the "
        "agent's default port), used with --rm-url-map NAMES or --rm-endpoints",
    )
    add_agent_arguments(parser, suppress=suppress)
    parser.add_argument(
        "--rm-token-file",
        default=default(None),
        metavar="FILE",
        help="bearer token for the resource-manager API (--rm-url)",
    )
    parser.add_argument(
        "--token-file",
        dest="rm_token_file",
        action=DeprecatedAlias,
        replacement="--rm-token-file",
        default=default(None),
        metavar="FILE",
        help="deprecated name of --rm-token-file",
    )
    add_token_file_options(parser, suppress=suppress)
    parser.add_argument(
        "--audit-db",
        default=default(None),
        metavar="FILE",
        help="SQLite audit log (default $XDG_STATE_HOME/toposcope/advisor-audit.sqlite)",
    )
    add_backend_options(parser, suppress=suppress)


def _add_filter_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("which workloads and policies")
    group.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="NAME",
        help="only workloads in this Kubernetes namespace (repeatable)",
    )
    group.add_argument(
        "--exclude-namespace",
        action="append",
        default=[],
        metavar="NAME",
        help="leave out workloads in this namespace (repeatable)",
    )
    group.add_argument(
        "--workload-selector",
        default="",
        metavar="SELECTOR",
        help="a Kubernetes label selector over the workloads' labels (workload, node, "
        "namespace, pod, container, comm), e.g. 'namespace in (ml,batch),comm!=python'",
    )
    group.add_argument(
        "--workload",
        action="append",
        default=[],
        metavar="GLOB",
        help="only workloads (or pods) whose name matches this glob (repeatable)",
    )
    group.add_argument(
        "--enable-policy",
        action="append",
        default=[],
        metavar="NAME",
        help="run this policy (repeatable, like --policy; default all)",
    )
    group.add_argument(
        "--disable-policy",
        action="append",
        default=[],
        metavar="NAME",
        help="do not run this policy (repeatable)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``toposcope advise`` and its ``revert`` and ``log`` actions."""
    add_source_arguments(parser)
    add_analysis_arguments(parser)
    add_p2p_arguments(parser)
    add_memory_arguments(parser)
    add_deadline_arguments(parser)
    _add_filter_arguments(parser)
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
        "--calibrate-from",
        metavar="DB",
        help="scale each kind's estimates by its measured / estimated gain over the verified "
        "outcomes in this audit log (the advisor service's; shrunk toward 1)",
    )
    parser.add_argument(
        "--format", default="table", choices=sorted(FORMATTERS), help="report format (table)"
    )
    parser.add_argument("--output", metavar="FILE", help="write the report here (default stdout)")
    parser.add_argument(
        "--width",
        type=int,
        metavar="COLUMNS",
        help="fit the table to this width (default: $COLUMNS, else the terminal's when stdout "
        "is one, else no limit; 0: no limit)",
    )
    parser.add_argument(
        "--wide",
        action="store_true",
        help="table: every column (id, severity, risk, summary too) on one line, unwrapped",
    )
    parser.add_argument(
        "--html-standalone",
        action="store_true",
        help="html: an interactive plotly chart, with plotly.js inlined (about 5 MB; default: "
        "a small page with no script)",
    )
    parser.add_argument(
        "--fail-on",
        choices=list(FAIL_ON),
        metavar="{" + ",".join(FAIL_ON) + "}",
        help="exit 1 when a recommendation is at least this severe: low (any), medium (info "
        "and up), high (warning and up), critical; without it a run that worked exits 0",
    )
    parser.add_argument(
        "--apply", action="store_true", help="apply the recommendations (see --resource-manager)"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print on stderr, as a shell script, the plan that would apply the "
        "recommendations through --resource-manager (scontrol, curl, kubectl, systemctl), "
        "asking the cluster nothing it cannot answer offline; changes nothing, --apply or not",
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


def policy_names(args: argparse.Namespace) -> list[str]:
    """The policies to run: ``--policy``/``--enable-policy`` (default all) less
    ``--disable-policy``; :class:`UsageError` for an unknown name or none left.
    """
    enabled = [*args.policy, *args.enable_policy]
    disabled = set(args.disable_policy)
    unknown = sorted(disabled - set(POLICIES))
    if unknown:
        known = ", ".join(sorted(POLICIES))
        raise UsageError(f"--disable-policy {', '.join(unknown)}: known policies: {known}")
    both = sorted(disabled & set(enabled))
    if both:
        raise UsageError(f"policy {', '.join(both)} is both enabled and disabled")
    chosen = [n for n in (enabled or list(POLICIES)) if n not in disabled]
    if not chosen:
        raise UsageError("every policy is disabled: nothing to run")
    return chosen


def workload_filter(args: argparse.Namespace) -> WorkloadFilter:
    """The workload filters the options give (:class:`UsageError` for a bad selector)."""
    try:
        selector = parse_selector(args.workload_selector)
    except SelectorError as exc:
        raise UsageError(f"--workload-selector: {exc}") from exc
    return WorkloadFilter(
        namespaces=frozenset(args.namespace),
        exclude_namespaces=frozenset(args.exclude_namespace),
        selector=selector,
        names=tuple(args.workload),
    )


def format_options(args: argparse.Namespace) -> FormatOptions:
    """How to render the report: :func:`table_width`, ``--wide``, ``--html-standalone``."""
    return FormatOptions(width=table_width(args), wide=args.wide, standalone=args.html_standalone)


def table_width(args: argparse.Namespace) -> int:
    """The width to wrap a table to: ``--width``, else ``$COLUMNS``, else the terminal's
    when stdout is one; 0 (no wrapping) for a report written to a file or a pipe.
    """
    if args.width is not None:
        if args.width < 0:
            raise UsageError(f"--width must be >= 0, not {args.width}")
        return int(args.width)
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        return int(columns)
    if args.output or not sys.stdout.isatty():
        return 0
    return shutil.get_terminal_size().columns
