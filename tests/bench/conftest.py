"""The trace replay's test bench: the benchmark scripts importable, a tiny seeded trace on a
small heterogeneous cluster, and every policy's replay of it (built once).
"""

from __future__ import annotations

import argparse
import sys

import pytest

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "bench"))

import trace_engine
import trace_replay
from trace_policies import POLICIES

from toposcope.sim.jobs import JobSpec
from toposcope.sim.templates import NodeTemplate
from toposcope.sim.trace_gen import DAY_S

#: one node of each GPU machine the replay knows: NVSwitch, PCIe switches, plain PCIe
CLUSTER = "dgx-a100=1,pcie-8gpu-2sw=1,pcie-4gpu=2"
#: a seed, span and load whose trace (80 jobs) makes toposcope wait for better sets and move
#: a job twice, and gandiva migrate
SEED, DAYS, LOAD = 1, 0.5, 1.2
#: long enough after the last arrival for the longest job (2 days) behind a queue
DRAIN_S = 5 * DAY_S


@pytest.fixture(scope="session")
def templates() -> dict[str, NodeTemplate]:
    """The small cluster's nodes."""
    return trace_replay.build_cluster(CLUSTER)


@pytest.fixture(scope="session")
def jobs(templates: dict[str, NodeTemplate]) -> list[JobSpec]:
    """The seeded synthetic trace's jobs."""
    args = argparse.Namespace(trace=None, seed=SEED, days=DAYS, load=LOAD, cluster=CLUSTER)
    total = sum(len(t.gpus) for t in templates.values())
    return trace_replay.trace_jobs(args, total, max(len(t.gpus) for t in templates.values()))


@pytest.fixture(scope="session")
def runs(templates: dict[str, NodeTemplate], jobs: list[JobSpec]) -> dict[str, trace_engine.Replay]:
    """Each policy's replay of the trace, by policy name."""
    stop = max(j.submit_time for j in jobs) + DRAIN_S
    return {p.name: trace_engine.replay(p, templates, jobs, stop) for p in POLICIES}
