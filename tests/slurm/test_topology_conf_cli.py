"""``toposcope slurm topology-conf``: Slurm's topology.conf written from a fabric source."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import REPO
from toposcope.cli import main
from toposcope.fabric.ibnetdiscover import read_ibnetdiscover
from toposcope.fabric.slurmconf import parse_topology_conf, read_topology_conf

FIXTURES = REPO / "tests" / "fixtures" / "fabric"


@pytest.mark.parametrize("name", ["slurm-tree.conf", "slurm-block.conf"])
def test_slurms_example_written_back_reads_as_the_same_model(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = FIXTURES / name
    assert main(["slurm", "topology-conf", "--slurm-topology", str(path)]) == 0
    written = capsys.readouterr().out
    assert written.startswith(f"# written by toposcope from {path}\n")
    assert parse_topology_conf(written) == read_topology_conf(path)


def test_an_ibnetdiscover_dump_becomes_a_tree(capsys: pytest.CaptureFixture[str]) -> None:
    dump = FIXTURES / "ibnetdiscover-topograph.out"
    assert main(["slurm", "topology-conf", "--ibnetdiscover", str(dump)]) == 0
    written = parse_topology_conf(capsys.readouterr().out)
    fabric = read_ibnetdiscover(dump)
    assert [(s.name, s.level, s.switches, s.nodes) for s in written.switches] == [
        (s.name, s.level, s.switches, s.nodes) for s in fabric.switches
    ]


def test_bad_input_exits_2_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "fabric.yaml"
    path.write_text("switches:\n  - name: a\n    level: -1\n")
    assert main(["slurm", "topology-conf", "--file", str(path)]) == 2
    assert f"{path}:2: switch a: level -1 is not 0-15" in capsys.readouterr().err
