"""The command line of the automatic loop: ``toposcope advisor serve --auto-apply ...``.

``--auto-apply`` turns the loop on (it is off without it); ``--auto-apply-config FILE``
reads the policy (:mod:`.config`), and the flags for the common limits override the file's
values. A bad file or flag is a usage error: ``advisor serve`` exits 2 naming it.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from toposcope.advisor.autoapply.config import AUTOMATIC_KINDS, AutoApplyPolicy, load_policy
from toposcope.advisor.loaders.base import parse_duration
from toposcope.errors import ConfigError, UsageError


def add_auto_apply_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``--auto-apply`` and its options on ``parser``."""
    group = parser.add_argument_group(
        "automatic apply",
        "apply recommendations without a person, within limits (off by default; see "
        "docs/advisor.md, 'Automatic apply'). Example: --auto-apply --auto-apply-config "
        "auto.yaml --auto-apply-max-per-hour 3 --auto-apply-kill-switch /run/toposcope/stop",
    )
    group.add_argument(
        "--auto-apply",
        action="store_true",
        help="apply recommendations on its own within the policy (default: off)",
    )
    group.add_argument(
        "--auto-apply-config",
        metavar="FILE",
        help="the policy, a YAML file: kinds, minimum confidence and gain, include/exclude, "
        "limits, blackouts, dry_run_first, kill_switch_file",
    )
    group.add_argument(
        "--auto-apply-kinds",
        metavar="KIND,...",
        help=f"kinds it may apply, among {', '.join(sorted(AUTOMATIC_KINDS))} "
        "(default pin,migrate-memory)",
    )
    group.add_argument(
        "--auto-apply-min-confidence", type=float, metavar="X", help="0..1 (default 0.8)"
    )
    group.add_argument(
        "--auto-apply-min-gain",
        type=float,
        metavar="X",
        help="the least calibrated estimated gain (default 0.10)",
    )
    group.add_argument(
        "--auto-apply-max-per-hour", type=int, metavar="N", help="actions per hour (default 5)"
    )
    group.add_argument(
        "--auto-apply-max-per-node",
        type=int,
        metavar="N",
        help="actions per node per hour (default 1)",
    )
    group.add_argument(
        "--auto-apply-max-per-namespace",
        type=int,
        metavar="N",
        help="actions per namespace or Slurm account per hour (default 2)",
    )
    group.add_argument(
        "--auto-apply-cooldown",
        metavar="DURATION",
        help="the least time between two actions on one workload (default 6h)",
    )
    group.add_argument(
        "--auto-apply-kill-switch",
        metavar="FILE",
        help="while this file exists the loop applies nothing",
    )


def policy_from_args(args: argparse.Namespace) -> AutoApplyPolicy | None:
    """The loop's policy, or ``None`` without ``--auto-apply`` (:class:`UsageError` for an
    option given without it, or a bad value).
    """
    given = [
        name
        for name in vars(args)
        if name.startswith("auto_apply_") and getattr(args, name) is not None
    ]
    if not args.auto_apply:
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise UsageError(f"{flag} needs --auto-apply")
        return None
    try:
        policy = load_policy(args.auto_apply_config) if args.auto_apply_config else None
        policy = policy or AutoApplyPolicy()
        if args.auto_apply_kinds is not None:
            kinds = frozenset(k.strip() for k in args.auto_apply_kinds.split(",") if k.strip())
            policy = replace(policy, kinds=kinds)
        if args.auto_apply_min_confidence is not None:
            policy = replace(policy, min_confidence=float(args.auto_apply_min_confidence))
        if args.auto_apply_min_gain is not None:
            policy = replace(policy, min_gain=float(args.auto_apply_min_gain))
        if args.auto_apply_max_per_hour is not None:
            policy = replace(policy, per_hour=int(args.auto_apply_max_per_hour))
        if args.auto_apply_max_per_node is not None:
            policy = replace(policy, per_node=int(args.auto_apply_max_per_node))
        if args.auto_apply_max_per_namespace is not None:
            policy = replace(policy, per_namespace=int(args.auto_apply_max_per_namespace))
        if args.auto_apply_cooldown is not None:
            policy = replace(policy, cooldown=parse_duration(args.auto_apply_cooldown))
        if args.auto_apply_kill_switch is not None:
            policy = replace(policy, kill_switch_file=Path(args.auto_apply_kill_switch))
    except ConfigError as exc:
        raise UsageError(f"--auto-apply: {exc}") from exc
    return policy
