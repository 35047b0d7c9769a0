"""The closed loop's command line: its options, their checks, and what they select.

:func:`parse_args` reads ``bench/closed_loop.py``'s options (``--rm slurm`` adds its own:
:func:`closed_loop_slurm.add_arguments`) and refuses out-of-range ones with a usage error
(exit status 2); :func:`scenario_ref`, :func:`progress_modes` and :func:`carried` say what
they select: the scenarios to load, the ways of measuring progress to run, and whether the
seeds share what they learned.
"""

from __future__ import annotations

import argparse
import shutil

import closed_loop_slurm

from toposcope.sim.judge import DEFAULT_HORIZON_S
from toposcope.sim.scenarios import builtin_scenarios
from toposcope.sim.truth_perturb import check_fraction

#: the ways of measuring progress ``--progress both`` runs, the first the headline
PROGRESS_MODES = ("counter", "proxies")


def scenario_ref(name: str) -> str:
    """``builtin:NAME`` for a built-in scenario's name, else the path as given."""
    return f"builtin:{name}" if name in builtin_scenarios() else name


def parse_args(description: str) -> argparse.Namespace:
    """The command line (see ``bench/closed_loop.py``'s docstring), its help headed by
    ``description``.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--scenario",
        action="append",
        default=[],
        help="a built-in scenario's name or a scenario file (repeatable; default: built-ins)",
    )
    parser.add_argument("--window", type=int, default=15, help="advisor window, seconds (15)")
    parser.add_argument("--rounds", type=int, default=6, help="most advisor rounds (6)")
    parser.add_argument("--max-actions", type=int, default=50)
    parser.add_argument("--max-actions-per-node", type=int, default=8)
    parser.add_argument(
        "--perturb",
        type=float,
        default=0.0,
        metavar="F",
        help="scale every truth parameter by a factor drawn from [1-F, 1+F] (0)",
    )
    parser.add_argument("--seeds", type=int, default=1, help="perturbed runs per scenario (1)")
    parser.add_argument(
        "--harm-free-bound",
        action="store_true",
        help="on scenarios with gang jobs, also search the best allocation that slows no job "
        "from the start and report the advisor's gain over it (ratio_to_harm_free, beside "
        "the ratio; it costs one more search of --oracle-budget per run)",
    )
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        metavar="K",
        help="number of the first perturbed run, so that runs K.. can be added later or one "
        "run repeated alone (0)",
    )
    parser.add_argument(
        "--horizon",
        type=float,
        default=DEFAULT_HORIZON_S,
        help="seconds a job's gain is integrated over, at most its remaining time (3600)",
    )
    parser.add_argument(
        "--oracle-budget", type=float, default=60.0, help="seconds for the oracle's chains (60)"
    )
    parser.add_argument(
        "--sample-nodes",
        type=int,
        default=40,
        help="nodes of large judged (a seeded random sample with their workloads; 40)",
    )
    parser.add_argument("--prometheus-binary", default=shutil.which("prometheus") or "prometheus")
    parser.add_argument("--keep-reports", metavar="DIR", help="write each round's report here")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument(
        "--learn",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="verify each round's applied actions from the metrics, as the advisor service "
        "does, and run the next round with --calibrate-from those outcomes (default: on; the "
        "simulator's loop only)",
    )
    parser.add_argument(
        "--learn-across-seeds",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="keep the outcomes learned in one seed for the next, as a deployment keeps its "
        "audit log from job to job: seed N's rounds calibrate from every earlier seed's "
        "verdicts too, and the calibration target counts rounds over the seeds (default: "
        "off, each seed learns alone)",
    )
    parser.add_argument(
        "--measure-p2p",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="measure each node's PCIe peer bandwidth as a bandwidth test would "
        "(toposcope.sim.p2p_measure) and give it to the advisor as --p2p-bandwidth "
        "(default: off)",
    )
    parser.add_argument(
        "--measure-memory",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="measure each node's memory bandwidth between NUMA nodes as a single-thread "
        "STREAM run would (toposcope.sim.memory_measure) and give it to the advisor as "
        "--memory-bandwidth (default: off)",
    )
    parser.add_argument(
        "--progress",
        choices=["counter", "proxies", "both"],
        default="both",
        help="what the loop's verdicts measure a job's progress by: its step counter (as a "
        "--progress-metric), the default proxies alone, or both, reported side by side "
        "(default: both; each scenario then runs twice)",
    )
    parser.add_argument(
        "--rm",
        choices=["sim", "slurm"],
        default="sim",
        help="who applies: the simulator (default) or a real Slurm (bench/closed_loop_slurm.py)",
    )
    closed_loop_slurm.add_arguments(parser)
    args = parser.parse_args()
    try:
        check_fraction(args.perturb)
    except ValueError as exc:
        parser.error(str(exc))
    if not 1 <= args.seeds <= 1000 or args.window < 1 or args.horizon <= 0:
        parser.error("--seeds must be 1 to 1000, --window at least 1, --horizon above 0")
    if not 0 <= args.first_seed <= 1_000_000:
        parser.error("--first-seed must be 0 to 1000000")
    if not 1 <= args.sample_nodes <= 1000:
        parser.error("--sample-nodes must be 1 to 1000")
    return args


def progress_modes(args: argparse.Namespace) -> list[str]:
    """The ways of measuring progress to run, the headline first (one without learning:
    nothing is verified, so there is nothing to measure progress for).
    """
    if not args.learn:
        return ["proxies"]
    return list(PROGRESS_MODES) if args.progress == "both" else [args.progress]


def carried(args: argparse.Namespace) -> bool:
    """Whether ``--learn-across-seeds`` carries the outcomes from seed to seed (learning on)."""
    return bool(args.learn and getattr(args, "learn_across_seeds", False))
