"""``toposcope rules export DIR``: write the alert rules, rendered with a configuration.

``--format rules`` (the default) writes one Prometheus rule file per group
(``exporter.rules.yml``, ...), as in the repository's ``alerts/``; ``--format prometheusrule``
writes ``prometheusrule.yaml``, one Prometheus Operator object holding every group, with
``--label KEY=VALUE`` labels for the operator's ruleSelector (kube-prometheus-stack selects
``release=<its release name>``). ``--config FILE`` changes job selectors, the cluster label,
thresholds and durations (docs/runbooks.md, "Configuration"). ``--check`` writes nothing and
exits 1 when a file in DIR differs from what would be written. DIR ``-`` prints the
PrometheusRule instead of writing it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from toposcope.errors import UsageError
from toposcope.exportfiles import add_export_parser, write_or_check
from toposcope.rules import prometheusrule
from toposcope.rules.config import load_config
from toposcope.rules.render import render_all, rule_groups

#: File name of the ``--format prometheusrule`` output.
PROMETHEUSRULE_FILE = "prometheusrule.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``toposcope rules export`` and its options."""
    export = add_export_parser(
        parser,
        "rules_command",
        "write the rule files (or a PrometheusRule) into DIR",
        "write the alert rules, rendered with a configuration (--config), into DIR",
    )
    export.add_argument(
        "--config",
        type=Path,
        help="YAML file overriding the default rules configuration (only the keys it changes)",
    )
    export.add_argument(
        "--format",
        choices=["rules", "prometheusrule"],
        default="rules",
        help="rule files for Prometheus, or one PrometheusRule for the Prometheus Operator",
    )
    export.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="label of the PrometheusRule (repeatable), e.g. release=kube-prometheus-stack",
    )
    export.add_argument(
        "--namespace",
        default=prometheusrule.DEFAULT_NAMESPACE,
        help=f"namespace of the PrometheusRule (default {prometheusrule.DEFAULT_NAMESPACE})",
    )
    export.add_argument(
        "--name",
        default=prometheusrule.DEFAULT_NAME,
        help=f"name of the PrometheusRule (default {prometheusrule.DEFAULT_NAME})",
    )


def exported_files(args: argparse.Namespace) -> dict[str, str]:
    """File name -> text of what ``export`` writes for ``args``."""
    rendered = render_all(load_config(args.config))
    if args.format == "rules":
        if args.label or args.namespace != prometheusrule.DEFAULT_NAMESPACE:
            raise UsageError("--label and --namespace apply to --format prometheusrule only")
        return rendered
    obj = prometheusrule.build(
        rule_groups(rendered),
        name=prometheusrule.check_object_name(args.name, "--name"),
        namespace=prometheusrule.check_object_name(args.namespace, "--namespace"),
        labels=prometheusrule.parse_labels(args.label),
    )
    return {PROMETHEUSRULE_FILE: prometheusrule.render(obj)}


def run(args: argparse.Namespace) -> int:
    """Render and write (or compare) the rules; 1 when ``--check`` finds a stale file."""
    files = exported_files(args)
    if args.directory == "-":
        if args.format != "prometheusrule" or args.check:
            raise UsageError("DIR '-' prints a PrometheusRule: use --format prometheusrule")
        sys.stdout.write(files[PROMETHEUSRULE_FILE])
        return 0
    return write_or_check(Path(args.directory), files, "toposcope rules export", args.check)
