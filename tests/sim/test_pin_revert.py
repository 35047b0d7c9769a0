"""A pin that moves a job's threads and memory to another NUMA node, then its revert, with
the node's exporter tree (cgroups, processes, resctrl MON groups) scraped in between: both
run for the time their pages take to move and then succeed, and the tree follows.
"""

from __future__ import annotations

from pathlib import Path

from toposcope.rm import ActionKind, ActionRequest, ActionStatus
from toposcope.sim.cluster import MIGRATE_PAGES_BYTES_PER_SECOND
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.scenarios import build_cluster, load_scenario

JOB = "llm-far-input.service"
NODE = "dgx-01"
#: NUMA node 0's CPUs on the demo's DGX template (its GPUs 0-3 hang off node 0)
NODE0_CPUS = [*range(0, 32), *range(128, 160)]
#: the job's host memory (``memory_gb: 128`` in the demo scenario), all on NUMA node 3
MEMORY = 128 * 1024**3


def cpuset(exporters: SimExporters) -> str:
    """The job's cgroup cpuset as the node's scrape leaves it in the tree."""
    exporters.scrape(NODE)
    cgroup = exporters.state_dir / "nodes" / NODE / "sys/fs/cgroup/system.slice" / JOB
    return (cgroup / "cpuset.cpus.effective").read_text().strip()


def test_a_pin_and_its_revert_both_settle_with_scrapes_in_between(tmp_path: Path) -> None:
    cluster = build_cluster(load_scenario("builtin:demo"))
    exporters = SimExporters(cluster, tmp_path / "state", background=False)
    try:
        before = cluster.workload(JOB).allocation
        assert before is not None and before.mems == [3]
        first = cpuset(exporters)
        seconds = MEMORY / MIGRATE_PAGES_BYTES_PER_SECOND

        pin = cluster.apply(ActionRequest("pin-1", ActionKind.PIN, JOB, NODE, NODE0_CPUS, [0]))
        assert pin.status is ActionStatus.RUNNING and abs(pin.cost_seconds - seconds) < 1e-6
        pinned = cpuset(exporters)
        assert pinned != first
        cluster.advance(seconds + 1)
        assert cluster.action(pin.id).status is ActionStatus.SUCCEEDED

        undo = cluster.apply(
            ActionRequest("revert-pin-1", ActionKind.PIN, JOB, NODE, before.cpus, before.mems)
        )
        assert undo.status is ActionStatus.RUNNING and abs(undo.cost_seconds - seconds) < 1e-6
        assert cpuset(exporters) == first
        cluster.advance(seconds / 2)
        exporters.scrape(NODE)
        assert cluster.action(undo.id).status is ActionStatus.RUNNING
        cluster.advance(seconds / 2 + 1)
        exporters.scrape(NODE)
        assert cluster.action(undo.id).status is ActionStatus.SUCCEEDED
        after = cluster.workload(JOB).allocation
        assert after is not None and (after.cpus, after.mems) == (before.cpus, before.mems)
    finally:
        exporters.close()
