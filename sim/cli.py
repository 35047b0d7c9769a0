"""``toposcope sim``: run a simulated cluster behind one HTTP server.

Serves every simulated node's exporter output at ``/nodes/<name>/metrics``, ground truth at
``/truth/metrics`` and the resource-manager API under ``/api/``, writes a Prometheus file_sd
targets file, and runs until SIGINT or SIGTERM. Simulated time runs ``--speed`` times
faster than real time.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from toposcope.auth.tokens import add_token_file_options, load_token
from toposcope.errors import ConfigError, UsageError
from toposcope.rm.api import make_api_app
from toposcope.serving.webflags import add_web_arguments, apply_web_arguments
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.fabric import SimFabric
from toposcope.sim.gang_api import make_sim_api_app
from toposcope.sim.gang_price import cabled_nics
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.paths import remove_tree
from toposcope.sim.scenarios import build_cluster, builtin_scenarios, load_scenario
from toposcope.sim.server import SimServer, WsgiApp, file_sd_targets, make_sim_app, write_file_sd
from toposcope.sim.slurm_mode import add_slurm_arguments, build_mirrored, describe, start_mirror
from toposcope.sim.stopping import StopRequested, StopSignals

LOG = logging.getLogger("toposcope.sim")

DEFAULT_LISTEN = "127.0.0.1:9850"
#: Seconds the clean-up after a stop request may take (threads, GPU sources, the state
#: directory; a tree too large to delete in time is finished by a detached process).
STOP_SECONDS = 3.0
#: why a web configuration's basic_auth_users cannot apply to the simulator
BEARER_ONLY = (
    "the simulator's resource-manager API authenticates with a bearer token (--token-file) "
    "in the same Authorization header"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the simulator's options."""
    parser.add_argument(
        "--scenario",
        default="builtin:demo",
        metavar="SCENARIO",
        help=f"builtin:NAME ({', '.join(builtin_scenarios())}) or a scenario YAML file "
        "(default builtin:demo)",
    )
    add_web_arguments(
        parser,
        DEFAULT_LISTEN,
        f"address to serve on (default {DEFAULT_LISTEN}; port 0 picks a free one)",
    )
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="simulated seconds per real second (default 1; 0 freezes time)",
    )
    parser.add_argument(
        "--file-sd", metavar="PATH", help="write Prometheus file_sd targets (JSON) here"
    )
    parser.add_argument(
        "--file-sd-address",
        metavar="HOST:PORT",
        help="address the targets name (default: the listen address)",
    )
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help="bearer token guarding the API's state changes (without it they are refused)",
    )
    add_token_file_options(parser)
    parser.add_argument("--seed", type=int, help="random seed (default: the scenario's own seed)")
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="where the simulated nodes' trees live (default: a temporary directory, removed "
        "at exit)",
    )
    add_slurm_arguments(parser)


def _api_app(cluster: Any, token_file: str | None, allow_insecure: bool = False) -> WsgiApp:
    """The resource-manager API app; state changes are refused unless a token is given."""
    token = load_token(token_file, allow_insecure=allow_insecure) if token_file else None
    if isinstance(cluster, SimCluster):  # multi-node jobs move whole (sim/gang_api.py)
        sim_app: WsgiApp = make_sim_api_app(cluster, token)
        return sim_app
    app: WsgiApp = make_api_app(cluster, token)
    return app


def run(args: argparse.Namespace) -> int:
    """Build the scenario's cluster, serve it until SIGTERM or SIGINT, clean up.

    A stop signal is honoured at any moment, also while the scenario loads or the trees are
    still being written in the background: the simulator exits (0) within
    :data:`STOP_SECONDS` plus a second, removing the state directory it created.
    """
    if args.speed < 0:
        raise UsageError("--speed must be 0 or more")
    with StopSignals() as signals:
        try:
            return _serve(args, signals)
        except StopRequested as stop:
            LOG.info("stopped (signal %d)", stop.signum)
            return 0


def _serve(args: argparse.Namespace, signals: StopSignals) -> int:
    scenario = load_scenario(args.scenario, seed=args.seed)
    if args.slurm_describe:
        describe(scenario, args.slurm_describe)
        return 0
    clock = SimClock(seed=scenario.seed, speed=args.speed)
    slurm = args.scheduler == "slurm"
    mirrored = build_mirrored(scenario, clock) if slurm else None
    cluster = mirrored if mirrored is not None else build_cluster(scenario, clock)
    stop_mirror = start_mirror(args, scenario, mirrored) if mirrored is not None else None
    fabric = SimFabric(scenario.fabric) if scenario.fabric is not None else None
    owned = args.state_dir is None
    state_dir: Path | None = None
    exporters: SimExporters | None = None
    server: SimServer | None = None
    stop = threading.Event()
    preparing: threading.Thread | None = None
    try:
        with signals.deferred():
            state_dir = Path(args.state_dir or tempfile.mkdtemp(prefix="toposcope-sim-"))
        network = frozenset(
            part for parts in (fabric.multi_node_jobs.values() if fabric else ()) for part in parts
        )
        cabled = cabled_nics(scenario.fabric.fabric) if scenario.fabric is not None else None
        exporters = SimExporters(cluster, state_dir, network=network, cabled=cabled)
        # with Slurm scheduling, actions go to Slurm: the simulator's API only reads
        token_file = None if slurm else args.token_file
        api = _api_app(cluster, token_file, args.allow_insecure_token_file)
        placeholder = make_sim_app(cluster, exporters, api, fabric=fabric)
        server = SimServer(placeholder, args.listen)
        address = args.file_sd_address or server.address
        server.set_app(make_sim_app(cluster, exporters, api, address, fabric))
        apply_web_arguments(server, args, users=BEARER_ONLY)
        if exporters.eager:
            preparing = threading.Thread(
                target=exporters.prepare, args=(stop,), daemon=True, name="sim-prepare"
            )
            preparing.start()
        if args.file_sd:
            write_file_sd(args.file_sd, file_sd_targets(cluster.node_names(), address))
        LOG.info(
            "scenario %s: %d nodes, %d workloads; serving on %s (speed %g, state %s; %s)",
            scenario.name,
            len(scenario.nodes),
            len(scenario.jobs),
            address,
            args.speed,
            state_dir,
            "trees written ahead" if exporters.eager else "each tree written on first scrape",
        )
        server.serve_forever()
    finally:
        if stop_mirror is not None:
            stop_mirror()
        _clean_up(stop, preparing, server, exporters, state_dir if owned else None)
    return 0


def _clean_up(
    stop: threading.Event,
    preparing: threading.Thread | None,
    server: SimServer | None,
    exporters: SimExporters | None,
    remove: Path | None,
) -> None:
    """Stop writing trees and serving, then remove the state directory (when ours), all
    within :data:`STOP_SECONDS`.
    """
    deadline = time.monotonic() + STOP_SECONDS
    stop.set()
    if server is not None:
        server.close()
    if preparing is not None and preparing.is_alive():
        preparing.join(timeout=max(deadline - time.monotonic() - 2.0, 0.5))
    if exporters is not None:
        exporters.close(timeout=max(deadline - time.monotonic() - 2.0, 0.5))
    if remove is not None:
        remove_tree(remove, max(deadline - time.monotonic(), 0.5))


def main(argv: list[str] | None = None) -> int:
    """``python -m toposcope.sim.cli``: the same as ``toposcope sim``."""
    parser = argparse.ArgumentParser(prog="toposcope sim", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return run(args)
    except (UsageError, ConfigError) as exc:
        print(f"toposcope sim: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
