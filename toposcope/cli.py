"""The ``toposcope`` command: one entry point, one module per subcommand.

Only the module of the subcommand being run is imported (read from the command line before
parsing), so ``toposcope exporter`` never loads the advisor, the Dash app or their libraries,
and the core never imports a part at start-up (imports go one way: parts depend on the core).
Each module provides ``add_arguments(parser)`` and ``run(args) -> int``.

Exit codes: 0 ok, 1 findings (a command that reports problems found some), 2 usage or
configuration errors (a malformed file, a root that does not exist; a usage error prints the
usage of the subcommand it is in), 141 when whoever reads standard output closed it early
(``toposcope ... | head``: quiet, as git and coreutils end on SIGPIPE).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Protocol, cast

from toposcope import __version__
from toposcope.cli_help import finish_help
from toposcope.errors import ConfigError, SourceError, UsageError
from toposcope.extras import load_with_extra
from toposcope.logformat import add_log_arguments, configure_logging

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
#: 128 + SIGPIPE: what a shell reports for git or coreutils when the reader of a pipe left
EXIT_BROKEN_PIPE = 141

#: what ``toposcope --help`` says the command is
DESCRIPTION = (
    "topology-aware observability and tuning for GPU/NUMA clusters: exporters, an advisor "
    "(report, service, placement), a simulated cluster, dashboards and alert rules"
)

#: subcommand -> the install extra that brings its libraries (``pip install toposcope[X]``)
EXTRAS: dict[str, str] = {
    "advise": "advisor",
    "place": "advisor",
    "advisor": "advisor",
    "sim": "sim",
    "agent": "agent",
    "dash": "dash",
    "slurm": "slurm",
    "kube": "kube",
}

#: subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "topology": (
        "toposcope.exporters.topology_cli",
        "show this machine's (or a snapshot's) topology",
    ),
    "fabric": (
        "toposcope.fabric.cli",
        "show the network between nodes: switches, blocks, rails (topology.conf, ibnetdiscover)",
    ),
    "exporter": ("toposcope.exporters.cli", "serve /metrics (NUMA, cross-socket, workloads, GPUs)"),
    "advise": ("toposcope.advisor.cli", "recommend (and apply) topology fixes from the metrics"),
    "place": ("toposcope.advisor.place_cli", "best GPU set for a job of N GPUs"),
    "sim": ("toposcope.sim.cli", "run a simulated cluster: per-node /metrics, truth, the API"),
    "agent": (
        "toposcope.agent.cli",
        "serve the resource-manager API for this host (affinity, cpusets, migrate_pages)",
    ),
    "advisor": (
        "toposcope.advisor.serve_cli",
        "run the advisor as a service: periodic analysis, /metrics, apply/revert API",
    ),
    "dash": ("toposcope.dashboards.app.cli", "serve the Dash app: cluster, nodes, advice"),
    "docs": ("toposcope.docs", "generate reference documentation (docs/metrics.md)"),
    "rules": (
        "toposcope.rules.cli",
        "export the alert rules (files or a PrometheusRule) with your selectors and thresholds",
    ),
    "dashboards": (
        "toposcope.dashboards.grafana.export_cli",
        "export the Grafana dashboards' JSON files",
    ),
    "slurm": (
        "toposcope.slurm.cli",
        "read Slurm's nodes and jobs; print a node's gres.conf lines from its topology",
    ),
    "kube": (
        "toposcope.kube.cli",
        "Kubernetes: serve the admission webhook that gates opted-in pods for placement",
    ),
}


class SubcommandModule(Protocol):
    """What a subcommand module provides."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Declare the subcommand's options."""

    def run(self, args: argparse.Namespace) -> int:
        """Carry the subcommand out and return its exit code."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (its first word that is not a top-level option)."""
    words = iter(argv)
    for word in words:
        if word == "--log-level":
            next(words, None)
        elif word == "--":
            return next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def _import_subcommand(name: str, module_name: str) -> SubcommandModule:
    module = load_with_extra(
        lambda: importlib.import_module(module_name),
        f"toposcope {name}",
        EXTRAS.get(name, "all"),
        UsageError,
    )
    return cast(SubcommandModule, module)


def build_parser(
    commands: Iterable[str] | None = None,
) -> tuple[argparse.ArgumentParser, dict[str, SubcommandModule]]:
    """The top-level parser, with the options of ``commands`` (default: every subcommand).

    Only the modules of ``commands`` are imported: ``toposcope exporter`` never loads the
    advisor or the Dash app, and ``toposcope --version`` loads no part at all. The other
    subcommands are still listed (with their one-line help) so ``--help`` shows them all.
    """
    wanted = set(SUBCOMMANDS) if commands is None else set(commands)
    parser = _Parser(prog="toposcope", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"toposcope {__version__}")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="logging verbosity (default: info)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    modules: dict[str, SubcommandModule] = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        add_log_arguments(sub_parser)
        if name in wanted:
            module = _import_subcommand(name, module_name)
            module.add_arguments(sub_parser)
            finish_help(sub_parser, name)
            modules[name] = module
    finish_help(parser, "")
    return parser, modules


def chosen_parser(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The innermost (sub)parser ``args`` went through: ``toposcope advise revert ...``
    gives the parser of ``advise revert``, so that its usage goes with a usage error.
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and action.choices:
            chosen = getattr(args, action.dest, None)
            if isinstance(chosen, str) and chosen in action.choices:
                return chosen_parser(action.choices[chosen], args)
    return parser


def _parse(parser: argparse.ArgumentParser, words: list[str]) -> argparse.Namespace:
    """``parser.parse_args(words)``, but an unknown option is reported, with its usage, by
    the subcommand it was given to rather than by the top-level parser.
    """
    args, unknown = parser.parse_known_args(words)
    if unknown:
        chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _silence_stdout() -> None:
    """Point standard output at /dev/null, so that flushing it at exit fails no more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line's subcommand; a closed standard output ends it quietly (141).

    Once here for every subcommand, as the Python documentation advises for a
    ``BrokenPipeError``: ``toposcope advise --list-policies | head -3`` prints no traceback.
    """
    try:
        try:
            code = _main(argv)
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    return code


def _main(argv: Sequence[str] | None) -> int:
    """Parse arguments, run the subcommand and map errors to exit codes."""
    words = list(sys.argv[1:] if argv is None else argv)
    command = command_of(words)
    try:
        parser, modules = build_parser([command] if command in SUBCOMMANDS else [])
    except UsageError as exc:
        print(f"toposcope: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args = _parse(parser, words)
    configure_logging(args)
    if not args.command:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return modules[args.command].run(args)
    except (UsageError, ConfigError) as exc:
        print(f"toposcope {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SourceError as exc:
        cause = f" ({exc.__cause__})" if exc.__cause__ else ""
        print(f"toposcope {args.command}: error: {exc}{cause}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
