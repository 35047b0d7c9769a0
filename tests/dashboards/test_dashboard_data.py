"""Every dashboard query returns data from a real exporter and a real Prometheus.

Setup: an hwloc snapshot root (4 packages, 8 NUMA nodes) copied to a temporary folder with a
generated workload tree (sim/fsgen.py) added, so that the workload panels have workloads;
the fake NVML's DGX A100 description with its first two GPU processes given the pids of
two generated workloads, so that workloads hold GPU memory; the exporter on a free loopback
port with ``--hostname`` fixed; Prometheus scraping it every second with every rule file of
alerts/ loaded.

Variables are replaced the way Grafana would fill them for this host: ``$hostname`` by the
host name the exporter reports, ``$instance`` by its scrape target, ``$gpu`` by ``0``,
``$workload`` by two workloads as Grafana writes a multi-value choice, ``(a|b)`` with regex
characters escaped: the one holding GPU 0 and one without GPUs (the snapshot's PCI bus has
no GPUs, so the exporter knows no NUMA node for the fake GPUs and reports no locality ratio
for workloads holding them), ``$__rate_interval`` by ``1m`` (enough for rate() from the
second scrape at a 1 s interval). Every query is evaluated as an instant
query at the current time; NO_DATA lists the panels whose data cannot exist here, and those
must still evaluate and must indeed return nothing (else the entry is stale).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.alerts.test_rules import RULE_FILES
from tests.dashboards.panels import Query, dashboards, label_values, queries, substitute, variables
from tests.helpers import REPO
from tests.procs import Prometheus, free_port, http_get, poll, running
from toposcope.sim.fsgen import write_workload_tree

pytestmark = pytest.mark.integration

SNAPSHOT = "64amd64-4s2n4ca2co"
HOSTNAME = "dashboards-test-node"
#: the cluster label the scrape adds (as a multi-cluster setup would) and the scrape job
CLUSTER = "eu-1"
JOB = "toposcope"
SPEC = REPO / "toposcope" / "fake_nvml" / "specs" / "dgx-a100.yaml"
ADVISOR = "the advisor's own /metrics series; no advisor runs in this test"
SLURM = "toposcope slurm exporter series; tests/slurm checks them against a real Slurm"
#: the Slurm queue dashboard, whose series need a Slurm cluster (none runs in this test)
SLURM_QUEUE = "toposcope-slurm-queue"
#: the network fabric dashboard, whose per-job and fabric series need the cluster-level
#: exporter with a fabric (tests/dash/test_fabric_page.py reads them from canned answers)
FABRIC = "toposcope-fabric"
FABRIC_EXPORTER = "toposcope_job_fabric_* and toposcope_fabric_* series; no fabric exporter here"
#: (dashboard uid, panel title) -> why it has no data in this setup.
NO_DATA: dict[tuple[str, str], str] = {
    (SLURM_QUEUE, "Free GPUs"): SLURM,
    (SLURM_QUEUE, "Fragmented GPUs"): SLURM,
    (SLURM_QUEUE, "Largest free block"): SLURM,
    (SLURM_QUEUE, "Pending jobs by reason"): SLURM,
    (SLURM_QUEUE, "GPUs asked for against GPUs free"): SLURM,
    (SLURM_QUEUE, "Wait of pending jobs"): SLURM,
    (SLURM_QUEUE, "Pending jobs by the scheduler's reason"): SLURM,
    (SLURM_QUEUE, "GPUs held per account"): SLURM,
    (SLURM_QUEUE, "Accounts against their fair share"): SLURM,
    (FABRIC, "Multi-node jobs and their spread"): FABRIC_EXPORTER,
    (FABRIC, "Domains spanned beyond need"): FABRIC_EXPORTER,
    (FABRIC, "Network traffic of multi-node jobs"): FABRIC_EXPORTER,
    (FABRIC, "GPUs held under each leaf"): FABRIC_EXPORTER,
    (FABRIC, "GPUs held in each block"): FABRIC_EXPORTER,
    (FABRIC, "NIC-far GPUs of multi-node jobs"): FABRIC_EXPORTER,
    ("toposcope-advisor", "Advisors up"): ADVISOR,
    ("toposcope-advisor", "Open recommendations"): ADVISOR,
    ("toposcope-advisor", "Open recommendations by kind and severity"): ADVISOR,
    ("toposcope-advisor", "Age of open recommendations"): ADVISOR,
    ("toposcope-advisor", "Expected gain of open recommendations"): ADVISOR,
    ("toposcope-advisor", "Actions in the last hour by kind and result"): ADVISOR,
    ("toposcope-advisor", "Verdicts by kind"): ADVISOR,
    ("toposcope-advisor", "Verdicts over time"): ADVISOR,
    ("toposcope-node-detail", "GPU XID errors (10 minutes)"): (
        "the fake NVML description raises no XID events"
    ),
    ("toposcope-cluster-overview", "NUMA allocation misses per node"): (
        "a snapshot's numastat counters never move, and the ratio drops a zero denominator"
    ),
}


def test_no_data_list_names_existing_panels() -> None:
    existing = {(q.dashboard, q.panel) for q in queries()}
    assert set(NO_DATA) <= existing, sorted(set(NO_DATA) - existing)


def fake_nvml_spec(path: Path, pids: list[int]) -> Path:
    """The DGX A100 description with GPU i's process given ``pids[i]``."""
    text = SPEC.read_text(encoding="utf-8")
    for index, pid in enumerate(pids):
        text, count = re.subn(rf"\bpid: {4101 + index}\b", f"pid: {pid}", text)
        assert count == 1, f"{SPEC.name}: expected one process with pid {4101 + index}"
    path.write_text(text, encoding="utf-8")
    return path


def multi_value(names: list[str]) -> str:
    """A multi-value variable as Grafana puts it into a PromQL regex: ``(a|b)``, escaped."""
    return "(" + "|".join(re.escape(name).replace("\\", "\\\\") for name in names) + ")"


def test_every_panel_returns_data(tmp_path: Path, hwloc_root: Callable[[str], Path]) -> None:
    tree = write_workload_tree(
        tmp_path / "root", topology_root=hwloc_root(SNAPSHOT), workloads=6, seed=1
    )
    holders = list(tree.workloads[:2])
    workloads = [holders[0].name, tree.workloads[-1].name]
    spec = fake_nvml_spec(tmp_path / "dgx-a100.yaml", [w.pid for w in holders])
    port = free_port()
    target = f"127.0.0.1:{port}"
    values = {
        "cluster": CLUSTER,
        "job": JOB,
        "hostname": HOSTNAME,
        "instance": target,
        "gpu": "0",
        "workload": multi_value(workloads),
        "partition": "gpu",
    }
    offered = {**values, "workload": workloads[0]}
    exporter = [
        sys.executable, "-m", "toposcope.cli", "exporter",
        "--root", str(tree.root), "--nvml", f"fake:{spec}",
        "--hostname", HOSTNAME, "--listen", target,
    ]  # fmt: skip
    prometheus = Prometheus(
        tmp_path,
        [
            {
                "job_name": JOB,
                "static_configs": [{"targets": [target], "labels": {"cluster": CLUSTER}}],
            }
        ],
        rule_files=[str(path) for path in RULE_FILES],
    )
    expected = [q for q in queries() if (q.dashboard, q.panel) not in NO_DATA]
    excluded = [q for q in queries() if (q.dashboard, q.panel) in NO_DATA]
    with running(exporter, tmp_path / "exporter.log"), prometheus.run() as prom:
        poll(lambda: http_get(f"http://{target}/-/healthy"))
        poll(lambda: prom.query(f'up{{instance="{target}"}} == 1'), deadline_s=30)

        missing: list[Query] = list(expected)

        def all_have_data() -> bool:
            missing[:] = [q for q in missing if not prom.query(substitute(q.expr, values))]
            return not missing

        try:
            poll(all_have_data, deadline_s=60, interval_s=1.0)
        except pytest.fail.Exception:
            pytest.fail(
                "panels without data:\n"
                + "\n".join(f"  {q}: {substitute(q.expr, values)}" for q in missing)
            )

        stale = [
            (q.dashboard, q.panel)
            for q in excluded
            if all(
                prom.query(substitute(other.expr, values))
                for other in excluded
                if (other.dashboard, other.panel) == (q.dashboard, q.panel)
            )
        ]
        assert not stale, f"these panels have data now; remove them from NO_DATA: {stale}"

        for uid, data in dashboards().items():
            for variable in variables(data):
                if variable["type"] != "query" or uid in ("toposcope-advisor", SLURM_QUEUE):
                    continue
                if (uid, variable["name"]) == (FABRIC, "partition"):
                    continue  # the fabric exporter's series
                selector, label = label_values(str(variable["query"]))
                found = {
                    series["metric"].get(label)
                    for series in prom.query(f"count by ({label}) ({substitute(selector, values)})")
                }
                assert offered[variable["name"]] in found, (
                    f"{uid}: variable {variable['name']} offers {sorted(map(str, found))}"
                )
