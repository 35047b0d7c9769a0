"""The simulator never writes or deletes outside its state directory, whatever names arrive.

Job names from trace CSV rows, scenario YAML and direct API calls, node and template names,
and PCI bus ids of imported hwloc topologies all become path components. Each source is
checked against the shared name rules, and every directory the simulator creates or
removes is checked to lie inside its root: each test here puts a decoy next to the state
directory and asserts that it is neither created nor deleted.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers import HWLOC_XML
from toposcope.errors import ConfigError
from toposcope.identity.names import InvalidNameError
from toposcope.sim.cluster import SimCluster
from toposcope.sim.jobs import JobKind, JobSpec, make_job
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.nodetree import NodeTree
from toposcope.sim.paths import UnsafePathError, contained, remove_contained
from toposcope.sim.scenarios import build_cluster, parse_scenario
from toposcope.sim.sysfs_writer import write_topology_sysfs
from toposcope.sim.templates import builtin_template
from toposcope.sim.traces import load_trace

XEON = builtin_template("xeon-2s")
NODE = "nodes:\n  - {name: n1, template: xeon-2s}\n"


def up_to(base: Path, start: Path) -> str:
    """The ``../`` prefix that leads from ``start`` back to ``base``."""
    return "../" * len(start.relative_to(base).parts)


def test_trace_job_name_that_leaves_the_tree_is_refused_with_file_line_column(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "evil.csv"
    trace.write_text(
        "name,submit_time,gpus,duration,job_type\n"
        "fine,0,0,10,cpu-train\n"
        "../../../../../../../../escaped.scope,0,0,10,cpu-train\n"
    )
    with pytest.raises(ConfigError) as info:
        parse_scenario(NODE + "trace: evil.csv\n", "s.yaml", tmp_path)
    message = str(info.value)
    assert message.startswith(f"s.yaml:3: trace: {trace}:3: column name: job name '../")
    assert "is not 1-63 letters" in message
    with pytest.raises(ConfigError, match=r"evil\.csv:3: column name: job name"):
        load_trace(trace)


@pytest.mark.parametrize("name", ["../escaped", "a/b", "..", ".hidden", "x" * 64])
def test_yaml_job_names_follow_the_same_rule(name: str) -> None:
    text = NODE + f"jobs:\n  - {{name: {name!r}, type: cpu-train}}\n"
    with pytest.raises(ConfigError, match=r"^s\.yaml:4: jobs\[0\]\.name: job name "):
        parse_scenario(text, "s.yaml", Path("."))


def test_template_names_that_leave_the_tree_are_refused(tmp_path: Path) -> None:
    xml = HWLOC_XML / "32em64t-2n8c2t-pci-normalio.xml"
    (tmp_path / "box.xml").write_bytes(xml.read_bytes())
    text = "templates:\n  ../../escaped: {hwloc_xml: box.xml}\n" + NODE
    with pytest.raises(ConfigError, match=r"^s\.yaml:2: templates\.\.\./\.\./escaped: template"):
        parse_scenario(text, "s.yaml", tmp_path)


def test_the_cluster_refuses_names_from_any_source() -> None:
    cluster = SimCluster()
    with pytest.raises(InvalidNameError):
        cluster.add_node("../escaped", XEON)
    cluster.add_node("n1", XEON)
    evil = JobSpec(name="../../../escaped.scope", kind=JobKind.CPU_TRAIN, threads=2)
    with pytest.raises(InvalidNameError):
        cluster.submit(evil)
    with pytest.raises(InvalidNameError):
        make_job("../escaped", JobKind.CPU_TRAIN)
    assert cluster.workloads() == []


def test_node_tree_never_writes_or_removes_outside_its_root(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A workload named to climb out of the cgroup tree is left out (and logged); the decoy
    directory it aims at keeps its file, even after the workload is gone again.
    """
    decoy = tmp_path / "decoy.scope"
    decoy.mkdir()
    (decoy / "keep").write_text("precious\n")
    cluster = SimCluster()
    cluster.add_node("n1", XEON)
    cluster.submit(make_job("good", JobKind.CPU_TRAIN, threads=2))
    snapshot = cluster.node_snapshot("n1")
    root = tmp_path / "state" / "nodes" / "n1"
    tree = NodeTree(root, XEON, tmp_path / "state" / "templates" / "xeon-2s")
    slice_dir = root / "sys/fs/cgroup/system.slice"
    evil_name = up_to(tmp_path, slice_dir) + "decoy.scope"
    evil = replace(snapshot.workloads[0], name=evil_name)
    with caplog.at_level(logging.ERROR, logger="toposcope.sim"):
        tree.update(replace(snapshot, workloads=(evil,)))
        tree.update(replace(snapshot, workloads=(), now=snapshot.now + 1))
    assert sorted(p.name for p in decoy.iterdir()) == ["keep"]
    assert (decoy / "keep").read_text() == "precious\n"
    assert "outside" in caplog.text and "decoy.scope" in caplog.text
    assert not (tmp_path / "state" / "nodes" / "n1" / "proc" / str(evil.pid)).exists()


def test_contained_refuses_paths_outside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "inside").mkdir(parents=True)
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "keep").write_text("x")
    (root / "link").symlink_to(decoy)
    assert contained(root, root / "inside" / "new") == (root / "inside" / "new").resolve()
    for escape in (root / ".." / "decoy", root / "link", root / "link" / "keep", root):
        with pytest.raises(UnsafePathError, match="outside"):
            contained(root, escape)
        with pytest.raises(UnsafePathError):
            remove_contained(root, escape)
    assert (decoy / "keep").read_text() == "x"
    remove_contained(root, root / "inside")
    assert not (root / "inside").exists()


def test_pci_bus_id_from_an_imported_topology_cannot_leave_the_tree(tmp_path: Path) -> None:
    """hwloc XML is imported as given; a ``pci_busid`` of ``../..`` must not become a path."""
    pci = tmp_path / "state" / "templates" / "box" / "pci-devices"
    evil_id = up_to(tmp_path, pci) + "escaped"
    evil = replace(XEON.topology.pci_devices[0], bus_id=evil_id)
    topology = replace(XEON.topology, pci_devices=(*XEON.topology.pci_devices, evil))
    with pytest.raises(UnsafePathError, match="outside"):
        write_topology_sysfs(
            tmp_path / "state" / "nodes" / "n1",
            topology,
            cpu_dir=tmp_path / "state" / "templates" / "box" / "cpu",
            pci_dir=pci,
        )
    assert not (tmp_path / "escaped").exists()


def test_imported_template_with_an_escaping_bus_id_writes_nothing_outside(
    tmp_path: Path,
) -> None:
    xml = (HWLOC_XML / "32em64t-2n8c2t-pci-normalio.xml").read_text()
    state = tmp_path / "state"
    pci = state / "templates" / "box" / "pci-devices"
    evil = xml.replace('pci_busid="', f'pci_busid="{up_to(tmp_path, pci)}escaped', 1)
    (tmp_path / "box.xml").write_text(evil)
    scenario = parse_scenario(
        "templates:\n  box: {hwloc_xml: box.xml}\nnodes:\n  - {name: lab, template: box}\n",
        "s.yaml",
        tmp_path,
    )
    exporters = SimExporters(build_cluster(scenario), state, background=False)
    try:
        with pytest.raises(UnsafePathError, match="outside"):
            exporters.scrape("lab")
    finally:
        exporters.close()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("escaped")] == []
