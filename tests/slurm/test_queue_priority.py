"""sprio's priority factors: the parser on captured output, and the exporter on a real cluster.

``fixtures/sprio-multifactor.txt`` is the output of
``sprio -h -o "%i|%r|%A|%B|%F|%J|%P|%Q|%T"`` (the type specifications of sprio(1), Slurm
22.05: job id, partition, weighted age, association, fair-share, job size, partition, QOS and
TRES) on a local Slurm 22.05 cluster with ``PriorityType=priority/multifactor`` and no
slurmdbd, as the live test below builds it. That cluster shows the multifactor plugin works
without accounting: sprio reports the job size, partition and CPU/memory TRES factors (the
fair-share factor stays 0, and GPU TRES weights are refused without slurmdbd).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm.conftest import SHAPE, require_slurm, state_dir
from tests.slurm.test_queue_exporter import Samples, parse, parse_text, value
from toposcope.slurm.accounting import PRIORITY_REQUIRED, accounting_gap, parse_config
from toposcope.slurm.clusterfiles import ClusterSpec
from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.daemons import ClusterError, wait_for
from toposcope.slurm.exporter import QueueCollector
from toposcope.slurm.localcluster import LocalCluster
from toposcope.slurm.queue_priority import SPRIO_FORMAT, parse_sprio
from toposcope.slurm.reader import CommandReader

FIXTURE = Path(__file__).parent / "fixtures" / "sprio-multifactor.txt"
#: slurm.conf lines that turn the multifactor plugin on, without slurmdbd
MULTIFACTOR = (
    "PriorityType=priority/multifactor",
    "PriorityWeightAge=1000",
    "PriorityWeightJobSize=1000",
    "PriorityWeightPartition=300",
    "PriorityWeightTRES=CPU=100,Mem=50",
)
#: sprio -l's columns, named as the catalogue's factor label values
LONG_COLUMNS = {
    "AGE": "age",
    "ASSOC": "assoc",
    "FAIRSHARE": "fairshare",
    "JOBSIZE": "jobsize",
    "PARTITION": "partition",
    "QOS": "qos",
    "TRES": "tres",
}


def test_format_is_the_documented_one() -> None:
    assert SPRIO_FORMAT == "%i|%r|%A|%B|%F|%J|%P|%Q|%T"


def test_parser_reads_captured_sprio_output() -> None:
    rows = parse_sprio(FIXTURE.read_text(encoding="utf-8"))
    assert [(r.job_id, r.partition) for r in rows] == [
        (1, "gpu"),
        (3, "gpu"),
        (4, "gpu"),
        (5, "gpu"),
    ]
    # age, assoc, fairshare, jobsize, partition, qos, tres (cpu=6,mem=50 summed)
    assert rows[0].factors == (0, 0, 0, 531, 300, 0, 56)
    assert rows[2].factors == (0, 0, 0, 375, 300, 0, 31)


def test_parser_skips_bad_rows_with_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    text = "\n".join(
        [
            "x1|gpu|0|0|0|1|1|0|cpu=1",
            "7|gpu|0|0|abc|1|1|0|",
            "8|gpu|1|2",
            "9|gpu|0|0|0|1|1|0|cpu",
            "10|gpu|nan|0|0|1|1|0|",
            "11|gpu|5|0|0|1|2|0|",
            "",
        ]
    )
    with caplog.at_level(logging.WARNING, logger="toposcope.slurm.priority"):
        rows = parse_sprio(text)
    assert [(r.job_id, r.factors) for r in rows] == [(11, (5, 0, 0, 1, 2, 0, 0))]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 5
    assert "job id 'x1'" in messages[0]
    assert "could not convert string to float: 'abc'" in messages[1]
    assert "4 cells, not 9" in messages[2]
    assert "TRES entry 'cpu' is not name=value" in messages[3]
    assert "'nan' is not finite" in messages[4]


def test_priority_gap_names_the_plugin() -> None:
    config = parse_config("PriorityType            = priority/basic\nClusterName = c\n")
    assert accounting_gap(config, PRIORITY_REQUIRED) == (
        "needs PriorityType=priority/multifactor (this cluster: priority/basic)"
    )
    assert accounting_gap({"PriorityType": "priority/multifactor"}, PRIORITY_REQUIRED) is None


def test_extra_conf_must_be_key_value_lines(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "c", ClusterSpec(nodes=1))
    with pytest.raises(ClusterError, match="not one Key=value"):
        cluster.start(extra_conf=["PriorityType=priority/multifactor\nSlurmUser=evil"])


@pytest.fixture(scope="module")
def multifactor() -> Iterator[LocalCluster]:
    """Two nodes with the multifactor plugin and no slurmdbd; pending jobs of two accounts.

    A 2-node job of teama runs; teama's other 2-node job, a 1-node one of teama and two of
    teamb wait behind it.
    """
    require_slurm()
    cluster = LocalCluster(
        state_dir("priority"),
        ClusterSpec(nodes=2, shape=SHAPE, node_prefix=f"p{os.getpid()}n", rest=False),
    )
    cluster.start(extra_conf=MULTIFACTOR)
    try:
        for args in (
            ("-A", "teama", "-N", "2", "--gres=gpu:4"),
            ("-A", "teama", "-N", "2", "--gres=gpu:4", "-c", "4"),
            ("-A", "teama", "--gres=gpu:2", "-c", "2"),
            ("-A", "teamb", "--gres=gpu:1", "-c", "8", "--mem=1000"),
            ("-A", "teamb", "--gres=gpu:1"),
        ):
            cluster.sbatch(*args, "--wrap", "sleep 600")
        wait_for(
            lambda: len(cluster.command("sprio", "-h").splitlines()) == 4,
            "four pending jobs listed by sprio",
            60,
        )
        yield cluster
    finally:
        cluster.stop()


def _sprio_long(cluster: LocalCluster) -> dict[str, list[dict[str, float]]]:
    """``sprio -l``'s factors per account (joined through squeue), read by column name."""
    accounts = dict(
        line.split() for line in cluster.command("squeue", "-h", "-o", "%i %a").splitlines()
    )
    header, *lines = cluster.command("sprio", "-l").splitlines()
    names = header.split()
    found: dict[str, list[dict[str, float]]] = {}
    for line in lines:
        cells = dict(zip(names, line.split(), strict=True))
        tres = sum(float(e.partition("=")[2]) for e in cells["TRES"].split(","))
        factors = {
            label: tres if column == "TRES" else float(cells[column])
            for column, label in LONG_COLUMNS.items()
        }
        found.setdefault(accounts[cells["JOBID"]], []).append(factors)
    return found


def _scrape(cluster: LocalCluster) -> Samples:
    commands = SlurmCommands(cluster.layout.slurm_conf)
    return parse(parse_text(QueueCollector(CommandReader(commands), commands)))


def test_exporter_publishes_factor_means_and_maxima(multifactor: LocalCluster) -> None:
    samples = _scrape(multifactor)
    assert value(samples, "toposcope_scrape_collector_success", collector="slurm_priority") == 1
    expected = _sprio_long(multifactor)
    assert sorted(expected) == ["teama", "teamb"]
    for account, jobs in expected.items():
        where = {"scheduler": "slurm", "partition": "gpu", "account": account}
        assert value(samples, "toposcope_queue_priority_jobs", **where) == len(jobs) == 2
        for factor in LONG_COLUMNS.values():
            column = [job[factor] for job in jobs]
            mean = value(samples, "toposcope_queue_priority_factor_mean", **where, factor=factor)
            peak = value(samples, "toposcope_queue_priority_factor_max", **where, factor=factor)
            assert mean == pytest.approx(sum(column) / len(column)), (account, factor)
            assert peak == max(column), (account, factor)
    # the factors that work without slurmdbd are there
    teama = {"scheduler": "slurm", "partition": "gpu", "account": "teama", "factor": "jobsize"}
    assert value(samples, "toposcope_queue_priority_factor_max", **teama) > 0


def test_priority_is_skipped_with_one_reason_without_the_plugin(
    slurm: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    commands = SlurmCommands(slurm.layout.slurm_conf)
    collector = QueueCollector(CommandReader(commands), commands)
    with caplog.at_level(logging.INFO, logger="toposcope.slurm.exporter"):
        first = parse(parse_text(collector))
        parse_text(collector)
    assert value(first, "toposcope_scrape_collector_success", collector="slurm_queue") == 1
    assert not [k for k in first if k[0].startswith("toposcope_queue_priority_")]
    assert (
        "toposcope_scrape_collector_success",
        frozenset({("collector", "slurm_priority")}),
    ) not in first
    skipped = [r.getMessage() for r in caplog.records if "slurm_priority" in r.getMessage()]
    assert skipped == [
        "collector=slurm_priority skipped: needs PriorityType=priority/multifactor "
        "(this cluster: priority/basic)"
    ]
