"""``toposcope sim --scheduler slurm``: a real Slurm schedules, the simulator is the hardware.

Two steps, because the simulator may not start Slurm itself (Slurm's files are written by the
Slurm part):

1. ``toposcope sim --scenario S --slurm-describe FILE`` writes the scenario's nodes as the
   neutral description of :mod:`toposcope.sim.slurm_description` and exits; the Slurm part
   runs a cluster of exactly those nodes from it;
2. ``toposcope sim --scenario S --scheduler slurm --slurm-conf SLURM_CONF`` serves the nodes'
   metrics and ground truth as usual while :class:`~toposcope.sim.slurm_mirror.SlurmMirror`
   submits the scenario's jobs to that Slurm and mirrors its allocations. The simulator's own
   resource-manager API then only reads: actions go to Slurm (``--resource-manager slurm``).
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable

from toposcope.errors import ConfigError, UsageError
from toposcope.sim.clock import SimClock
from toposcope.sim.scenarios import Scenario
from toposcope.sim.slurm_cluster import SlurmMirroredCluster
from toposcope.sim.slurm_description import write_description
from toposcope.sim.slurm_mirror import SlurmMirror, SlurmRunner

#: Seconds between two reads of Slurm.
POLL_SECONDS = 1.0
#: The longest lead ``--slurm-announce`` accepts (a day).
MAX_ANNOUNCE_S = 86400.0


def add_slurm_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``--scheduler``, ``--slurm-conf`` and ``--slurm-describe``."""
    parser.add_argument(
        "--scheduler",
        choices=["scenario", "slurm"],
        default="scenario",
        help="who places jobs: the scenario's own scheduler (default) or a real Slurm "
        "(--slurm-conf)",
    )
    parser.add_argument(
        "--slurm-conf",
        metavar="FILE",
        help="slurm.conf of the Slurm that schedules (--scheduler slurm)",
    )
    parser.add_argument(
        "--slurm-announce",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="submit jobs due within SECONDS (simulated) at once, with --begin at their "
        "arrival, so that they wait in Slurm's queue where the advisor can steer them "
        "(--scheduler slurm; default 0: submit each job when it arrives)",
    )
    parser.add_argument(
        "--slurm-describe",
        metavar="FILE",
        help="write the scenario's nodes as a description a Slurm cluster is built from, and exit",
    )


def build_mirrored(scenario: Scenario, clock: SimClock) -> SlurmMirroredCluster:
    """The scenario's nodes, with no job yet (the mirror submits them to Slurm)."""
    cluster = SlurmMirroredCluster(clock)
    for node in scenario.nodes:
        cluster.add_node(node.name, node.template, node.labels)
    return cluster


def describe(scenario: Scenario, path: str) -> None:
    """Write the description of the scenario's nodes to ``path`` (:class:`ConfigError`)."""
    try:
        write_description(build_mirrored(scenario, SimClock(seed=scenario.seed)), path)
    except OSError as exc:
        raise ConfigError(f"cannot write the node description {path}: {exc}") from None


def start_mirror(
    args: argparse.Namespace, scenario: Scenario, cluster: SlurmMirroredCluster
) -> Callable[[], None]:
    """Start mirroring Slurm in a thread; returns the function that stops it."""
    if not args.slurm_conf:
        raise UsageError("--scheduler slurm needs --slurm-conf (the Slurm cluster's slurm.conf)")
    if not 0 <= args.slurm_announce <= MAX_ANNOUNCE_S:
        raise UsageError(f"--slurm-announce must be from 0 to {MAX_ANNOUNCE_S:g} seconds")
    runner = SlurmRunner(args.slurm_conf)
    mirror = SlurmMirror(
        cluster, [job.spec for job in scenario.jobs], runner, announce_s=args.slurm_announce
    )
    stop = threading.Event()
    thread = threading.Thread(
        target=mirror.run, args=(stop, POLL_SECONDS), daemon=True, name="sim-slurm-mirror"
    )
    thread.start()

    def stopping() -> None:
        stop.set()
        thread.join(timeout=runner.timeout_s)

    return stopping
