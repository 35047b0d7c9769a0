"""The closed loop's served cluster and the real Prometheus that scrapes it.

:func:`serve` serves a simulated cluster on loopback (its exporters, resource-manager API and
pages); :func:`prometheus` runs a Prometheus scraping it, and :func:`await_fresh_scrapes`
holds a round until every target's last scrape succeeded, so that the advisor never reads a
node as gone because a loaded machine's scrape failed.
"""

from __future__ import annotations

import math
import os
import secrets
import sys
from collections.abc import Collection, Container, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from toposcope.devtools.procs import Prometheus, instant_query
from toposcope.sim.cluster import SimCluster
from toposcope.sim.fabric import SimFabric
from toposcope.sim.gang_api import make_sim_api_app
from toposcope.sim.gang_price import cabled_nics
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.scenario_fabric import ScenarioFabric
from toposcope.sim.server import SimServer, file_sd_targets, make_sim_app, write_file_sd
from toposcope.waiting import NotReadyError, wait_until

#: how long a round waits for every target's last scrape to have succeeded
ROUND_READY_S = 30.0
#: simulated nodes scraped every second at most (more: a longer scrape interval)
NODES_PER_SECOND = 16


@contextmanager
def prometheus(
    binary: str,
    workdir: Path,
    targets: Path,
    nodes: int,
    jobs_address: str | None = None,
    fabric_address: str | None = None,
) -> Iterator[str]:
    """A real Prometheus scraping the file_sd ``targets`` every :func:`scrape_interval_s`
    seconds, and the jobs' step counters at ``jobs_address`` (``/jobs/metrics``) and the
    cluster page at ``fabric_address`` when given, each as a scrape job of its own; yields
    its URL once every target (every simulated node, and those pages) has been scraped, so
    that a loaded machine's first round never runs on a Prometheus that has not read the
    fabric yet.
    """
    scrape_configs: list[dict[str, Any]] = [
        {
            "job_name": "toposcope-sim",
            "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}],
        }
    ]
    if jobs_address is not None:
        scrape_configs.append(
            {
                "job_name": "toposcope-sim-jobs",
                "metrics_path": "/jobs/metrics",
                "static_configs": [{"targets": [jobs_address]}],
            }
        )
    if fabric_address is not None:  # the fabric and its multi-node jobs' spread
        scrape_configs.append(
            {
                "job_name": "toposcope-sim-fabric",
                "static_configs": [{"targets": [fabric_address]}],
            }
        )
    server = Prometheus(
        workdir, scrape_configs, interval=f"{scrape_interval_s(nodes)}s", binary=binary
    )
    with server.run():
        expected = scraped_targets(nodes, jobs_address, fabric_address)
        wait_until(
            lambda: every_target_up(server.url, expected),
            60,
            what="every simulated node and cluster page scraped",
        )
        yield server.url


def scrape_interval_s(nodes: int) -> int:
    """Seconds between two scrapes of a node: 1 for up to :data:`NODES_PER_SECOND` nodes,
    then one more second per as many nodes again. Every simulated node's exporter runs in the
    loop's one process; forty of them every second (``large``'s sample) outran two cores,
    scrapes timed out and rounds read nodes as gone.
    """
    return max(1, math.ceil(nodes / NODES_PER_SECOND))


def every_target_up(url: str, expected: int) -> bool:
    """Whether the last scrape of each of the ``expected`` simulated targets (the nodes and
    the loop's own pages) succeeded. A failed scrape marks the target's series stale, so an
    advisor run right after one reads that node as gone ("no series" for everything when
    every scrape failed, as a loaded machine's one-second scrapes can).
    """
    result = instant_query(url, 'count(up{job=~"toposcope-sim.*"} == 1)')
    return bool(result) and int(float(result[0]["value"][1])) == expected


def scraped_targets(nodes: int, *pages: str | None) -> int:
    """How many targets the loop's Prometheus scrapes: the nodes and each page given."""
    return nodes + sum(1 for page in pages if page is not None)


def await_fresh_scrapes(url: str, expected: int, deadline_s: float = ROUND_READY_S) -> None:
    """Wait until every target's last scrape succeeded before a round reads the metrics
    (:func:`every_target_up`); past ``deadline_s`` the round runs on what there is and the
    loop says so on stderr, as a daemon logs and goes on.
    """
    try:
        wait_until(lambda: every_target_up(url, expected), deadline_s, what="fresh scrapes")
    except NotReadyError as exc:
        print(f"closed loop: a round runs on stale targets: {exc}", file=sys.stderr)


def serve(
    cluster: SimCluster,
    workdir: Path,
    fabric: ScenarioFabric | None = None,
    network: Container[str] = frozenset(),
    cabled: Mapping[str, Collection[str]] | None = None,
) -> tuple[SimServer, SimExporters, Path, str]:
    """Serve the cluster on loopback (with ``fabric``'s families on ``/metrics``; the NICs
    carry the traffic of the workloads in ``network`` through those ``fabric``, else
    ``cabled``, cables to a switch): (server, exporters, token file, address).
    """
    served = SimFabric(fabric) if fabric is not None else None
    if fabric is not None:
        cabled = cabled_nics(fabric.fabric)
    exporters = SimExporters(
        cluster, workdir / "state", background=False, network=network, cabled=cabled
    )
    token = secrets.token_hex(16)
    token_file = workdir / "token"
    token_file.write_text(token + "\n")
    os.chmod(token_file, 0o600)
    server = SimServer(
        make_sim_app(cluster, exporters, make_sim_api_app(cluster, token), fabric=served),
        "127.0.0.1:0",
    )
    address = server.address
    api = make_sim_api_app(cluster, token)
    server.set_app(make_sim_app(cluster, exporters, api, address, fabric=served))
    server.start()
    write_file_sd(workdir / "targets.json", file_sd_targets(cluster.node_names(), address))
    return server, exporters, token_file, address
