"""Every resource-manager backend, each set up with one running workload to pin.

The contract tests run the same requests against all of them: the simulator, the node agent
(on a real child process of this test, its page moves disabled by an architecture whose
``migrate_pages`` is unknown), the API's in-memory fake, the advisor's HTTP fake and the dry
run. Each comes with the workload and node to act on and two CPUs it may pin to.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from tests.advisor.fakes import FakeResourceManager as AdvisorFake
from tests.agent.conftest import allowed_cpus, running_child
from tests.sim_api.fake_rm import FakeResourceManager as ApiFake
from toposcope.advisor.rmclients.dry_run import DryRunResourceManager
from toposcope.agent.local_rm import LocalResourceManager, Syscalls
from toposcope.rm import ActionKind, ActionRequest, Allocation, BaseResourceManager
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.jobs import JobKind, make_job
from toposcope.sim.templates import builtin_template

NAMES = ("simulator", "agent", "api-fake", "advisor-fake", "dry-run")


@dataclass(frozen=True)
class Backend:
    """A backend, the running workload and node to act on, and two CPUs it may pin to."""

    name: str
    rm: BaseResourceManager
    workload: str
    node: str
    cpus: tuple[int, int]

    def pin(self, request_id: str, cpus: list[int]) -> ActionRequest:
        """A pin of the workload to ``cpus``."""
        return ActionRequest(request_id, ActionKind.PIN, self.workload, self.node, cpus)


def _simulator() -> Backend:
    xeon = builtin_template("xeon-2s")
    node0 = list(xeon.node_cpus(0))
    sim = SimCluster(SimClock(seed=1), scheduler="none")
    sim.add_node("cpu-01", xeon)
    sim.submit(
        make_job("cnn", JobKind.CPU_TRAIN, threads=2, memory_gb=0),
        Allocation("cpu-01", node0, [], []),
    )
    return Backend("simulator", sim, "cnn", "cpu-01", (node0[0], node0[1]))


@contextmanager
def backend(name: str) -> Iterator[Backend]:
    """The backend called ``name``, with its workload running until the block ends."""
    if name == "agent":
        cpus = allowed_cpus()
        if len(cpus) < 2:
            pytest.skip("the agent's pins need two CPUs this test may run on")
        with running_child(threads=1) as child:
            rm = LocalResourceManager(node_name="n1", mode="process", syscalls=Syscalls("vax"))
            yield Backend(name, rm, child.workload, "n1", (cpus[0], cpus[1]))
        return
    if name == "simulator":
        yield _simulator()
    elif name == "api-fake":
        yield Backend(name, ApiFake(), "train-a", "node-a", (0, 1))
    elif name == "advisor-fake":
        fake = AdvisorFake("token", {"train": Allocation("n1", [0, 1, 2, 3], [0], [])})
        yield Backend(name, fake, "train", "n1", (0, 1))
    elif name == "dry-run":
        yield Backend(name, DryRunResourceManager(io.StringIO()), "train", "n1", (0, 1))
    else:
        raise ValueError(f"no backend {name!r}")
