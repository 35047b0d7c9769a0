"""The ``slurm_gres`` collector: a node's gres.conf against the GPU lines of its topology.

The machine is the simulator's ``pcie-4gpu`` template written as a sysfs tree (2 sockets x 24
cores x 2 threads, GPUs 0-1 on socket 0 and 2-3 on socket 1, no NVLink), the shape of the
``toposcope slurm gres-conf`` tests; the hwloc corpus's Linux snapshots hold no NVIDIA GPU.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.exporters.text_registry import parsed
from toposcope.cli import main
from toposcope.config import ExporterConfig, HostPaths
from toposcope.errors import ConfigError
from toposcope.exporters.app import build_runner
from toposcope.exporters.collectors import default_table
from toposcope.sim.fsgen import write_topology_sysfs
from toposcope.sim.templates import builtin_template
from toposcope.topology.gresconf import GpuGres
from toposcope.topology.gresconf_file import check_gres, parse_gres_conf

CLUSTER_CONF = """\
# cluster-wide gres.conf, as many sites keep it
AutoDetect=off
NodeName=gpu[01-02] Name=gpu File=/dev/nvidia[0-1] Cores=0-23
NodeName=gpu[01-02] Name=gpu File=/dev/nvidia[2-3] Cores=24-47   # socket 1
NodeName=gpu03,big[1-4] Name=gpu Type=a100 File=/dev/nvidia0 Cores=0-3 Links=-1,12
NodeName=big[1-4] name=GPU type=a100 file=/dev/nvidia1 cores=4-7 links=12,-1
NodeName=gpu[01-04] Name=mps Count=400
"""
RIGHT_CONF = """\
Name=gpu File=/dev/nvidia[0-1] Cores=0-23
Name=gpu File=/dev/nvidia2 Cores=24-47
Name=gpu File=/dev/nvidia3 Cores=24-47
"""
WRONG_CONF = """\
NodeName=gpu1 Name=gpu File=/dev/nvidia[0-3] Cores=0-47
"""


@pytest.fixture(scope="module")
def sysfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pcie-4gpu")
    write_topology_sysfs(root, builtin_template("pcie-4gpu").topology)
    return root / "sys"


def scrape(sysfs: Path, gres_conf: Path, hostname: str = "gpu1") -> dict[str, float]:
    """One scrape of topology + slurm_gres, as {sample line without value: value}."""
    config = ExporterConfig(
        paths=HostPaths.from_options(sysfs=str(sysfs)),
        hostname=hostname,
        nvml="off",
        slurm_gres_conf=str(gres_conf),
    )
    runner = build_runner(config, default_table().select(["slurm_gres"]))
    found: dict[str, float] = {}
    for family in parsed(runner.collect()):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}"] = sample.value
    return found


def test_parser_keeps_this_nodes_lines_with_ranges() -> None:
    conf = parse_gres_conf(CLUSTER_CONF, {"gpu02"})
    assert conf.autodetect == "off"
    assert sorted(conf.gpus) == [0, 1, 2, 3]
    assert conf.gpus[1].device_file == "/dev/nvidia1"
    assert conf.gpus[3].cores == tuple(range(24, 48))
    assert conf.gpus[3].links is None
    big = parse_gres_conf(CLUSTER_CONF, {"big3"})
    assert big.gpus[1].gpu_type == "a100"
    assert big.gpus[1].links == (12, -1)
    assert parse_gres_conf(CLUSTER_CONF, {"other"}).gpus == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Name=gpu File=/dev/nvidia[0-1] Cores=0-x", "line 1: malformed Cores="),
        ("Name=gpu File=/dev/nvidia0\nName=gpu File=/dev/nvidia[0-1]", "GPU 0 is declared again"),
        ("NodeName=n[1-2 Name=gpu File=/dev/nvidia0", "leaves a [ open"),
        ("Name=gpu File=nvidia", "no device path"),
        ("Name gpu", "is not Key=Value"),
        ("Name=gpu Type=a;b File=/dev/nvidia0", "malformed Type="),
        ("Name=gpu File=/dev/nvidia0 Cores=0-3 cores=4-7", "line 1: cores is given twice"),
    ],
)
def test_parser_refuses_malformed_lines(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        parse_gres_conf(text, {"n1"}, "gres.conf")


def test_parser_reads_lines_as_slurm_does() -> None:
    """Continued lines, quoted values and comments, as in every Slurm file."""
    text = (
        "# the GPUs of socket 1\n"
        'Name=gpu File="/dev/nvidia[2-3]" \\\n'
        "    Cores=24-47   # socket 1\n"
        "NodeName=n1 Name=gpu File=/dev/nvidia0 Type=a100 Cores=0-3#no space before it\n"
    )
    conf = parse_gres_conf(text, {"n1"}, "gres.conf")
    assert sorted(conf.gpus) == [0, 2, 3]
    assert conf.gpus[2].cores == conf.gpus[3].cores == tuple(range(24, 48))
    assert conf.gpus[2].line_number == conf.gpus[3].line_number == 2
    assert conf.gpus[0].gpu_type == "a100" and conf.gpus[0].cores == (0, 1, 2, 3)


def test_check_compares_cores_and_links() -> None:
    expected = [GpuGres(0, (0, 1, 2, 3), (-1, 12)), GpuGres(1, (4, 5, 6, 7), (12, -1))]
    right = parse_gres_conf(CLUSTER_CONF, {"big1"})
    assert all(c.match and c.source == "gres.conf" for c in check_gres(right, expected))
    wrong_links = parse_gres_conf(CLUSTER_CONF.replace("links=12,-1", "links=0,-1"), {"big1"})
    failed = [(c.gpu, c.field) for c in check_gres(wrong_links, expected) if not c.match]
    assert failed == [(1, "links")]
    missing = check_gres(parse_gres_conf("", {"big1"}), expected)
    assert {(c.gpu, c.field, c.match, c.source) for c in missing} == {
        (0, "cores", False, "missing"),
        (0, "links", False, "missing"),
        (1, "cores", False, "missing"),
        (1, "links", False, "missing"),
    }
    detected = check_gres(parse_gres_conf("AutoDetect=nvml\n", {"big1"}), expected)
    assert all(c.match and c.source == "autodetect" for c in detected)


def test_collector_reports_a_wrong_file_and_the_lines_to_write(sysfs: Path, tmp_path: Path) -> None:
    conf = tmp_path / "gres.conf"
    conf.write_text(WRONG_CONF)
    found = scrape(sysfs, conf, hostname="gpu1.cluster.example")
    match = "toposcope_slurm_gres_config_match"
    assert found[f"{match}{{field=cores,gpu=0,source=gres.conf}}"] == 0.0
    assert found[f"{match}{{field=links,gpu=0,source=gres.conf}}"] == 1.0
    line = "NodeName=gpu1 Name=gpu File=/dev/nvidia2 Cores=24-47"
    assert found[f"toposcope_slurm_gres_expected_info{{gpu=2,line={line}}}"] == 1.0
    assert found["toposcope_scrape_collector_success{collector=slurm_gres}"] == 1.0


def test_collector_accepts_the_right_file(sysfs: Path, tmp_path: Path) -> None:
    conf = tmp_path / "gres.conf"
    conf.write_text(RIGHT_CONF)
    found = scrape(sysfs, conf)
    matches = {k: v for k, v in found.items() if k.startswith("toposcope_slurm_gres_config")}
    assert len(matches) == 8
    assert set(matches.values()) == {1.0}


def test_collector_fails_cleanly_on_a_bad_or_missing_file(
    sysfs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = tmp_path / "gres.conf"
    bad.write_text("Name=gpu File=/dev/nvidia0 Cores=banana\n")
    with caplog.at_level(logging.ERROR, logger="toposcope.exporter"):
        found = scrape(sysfs, bad)
    assert found["toposcope_scrape_collector_success{collector=slurm_gres}"] == 0.0
    assert "malformed Cores=" in caplog.text
    missing = scrape(sysfs, tmp_path / "absent.conf")
    assert missing["toposcope_scrape_collector_success{collector=slurm_gres}"] == 0.0
    assert not any(k.startswith("toposcope_slurm_gres_config") for k in missing)


def test_exporter_print_shows_the_mismatch(
    sysfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "gres.conf"
    conf.write_text(WRONG_CONF)
    args = ["exporter", "--print", "--nvml", "off", "--hostname", "gpu1", "--path.sysfs"]
    assert main([*args, str(sysfs), "--collector.slurm_gres", "--slurm.gres-conf", str(conf)]) == 0
    out = capsys.readouterr().out
    assert 'toposcope_slurm_gres_config_match{field="cores",gpu="3",source="gres.conf"} 0.0' in out
    assert 'line="NodeName=gpu1 Name=gpu File=/dev/nvidia3 Cores=24-47"' in out
