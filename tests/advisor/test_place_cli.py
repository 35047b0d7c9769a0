"""``toposcope place``: NUMA locality breaks ties, the columns are explained (under the
table and in ``--help``), and an unknown node is told apart from a node without room.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.advisor.builders import cluster, gpu, links_from_groups, numa_nodes
from tests.advisor.conftest import ExporterScrape
from tests.advisor.fakes import ExpositionPrometheus, FakeServer
from toposcope.advisor.gpu_sets import place
from toposcope.advisor.model import NodeModel
from toposcope.advisor.place_cli import COLUMNS
from toposcope.cli import main

LABELS = {"job": "toposcope", "instance": "10.1.2.3:9400"}


@pytest.fixture
def prometheus(exporter_scrape: ExporterScrape) -> Iterator[FakeServer]:
    with FakeServer(ExpositionPrometheus(exporter_scrape.text, LABELS)).run() as fake:
        yield fake


def test_a_tie_goes_to_the_set_on_one_numa_node() -> None:
    # one PCIe switch for all four GPUs, whose NUMA nodes alternate: every pair is PIX with
    # the same fragmentation, so only locality tells {0,2} (NUMA 0) from {0,1} (NUMA 0 and 1)
    placement = {0: 0, 1: 1, 2: 0, 3: 1}
    node = NodeModel(
        "n1",
        numa_nodes(),
        tuple(gpu(g, n) for g, n in placement.items()),
        links_from_groups(placement, [(0, 1, 2, 3)]),
    )
    ranked = place(cluster([node]), 2, top=6)
    assert [p.gpus for p in ranked[:2]] == [(0, 2), (1, 3)]
    assert all(len(p.numa_nodes) == 2 for p in ranked[2:])


def test_the_table_explains_its_columns(
    prometheus: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["place", "--gpus", "2", "--prometheus", prometheus.url]) == 0
    out = capsys.readouterr().out
    table, _, legend = out.rpartition("\n\n")
    assert "LINK SUM" in table and "BROKEN" in table and "STRANDED" in table
    for name, meaning in COLUMNS:
        assert f"\n{name} " in f"\n{legend}", name
        assert " ".join(meaning.split()[:3]) in " ".join(legend.split()), name


def test_help_explains_the_columns(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["place", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    columns = out[out.index("columns:") :]
    for name, _ in COLUMNS:
        assert f"\n  {name} " in columns, name


def test_an_unknown_node_is_not_a_full_node(
    prometheus: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    source = ["--prometheus", prometheus.url]
    assert main(["place", "--gpus", "1", "--node", "zz", *source]) == 2
    unknown = capsys.readouterr().err
    assert "unknown node 'zz': not in the metrics (known: n1)" in unknown
    assert main(["place", "--gpus", "4", "--node", "n1", *source]) == 0
    full = capsys.readouterr().err
    assert "no 4 free GPU(s) on node n1: n1 has 3 of its 4 GPU(s) free" in full
