"""``toposcope slurm gres-conf``: gres.conf lines from a topology, and Slurm accepting them.

The machines are the simulator's templates written as sysfs trees (``pcie-4gpu``: 2 sockets x
24 cores x 2 threads, 4 PCIe GPUs; ``dgx-a100``: 8 NVLinked GPUs over 4 NUMA nodes), with
their ``nvidia-smi topo -m`` outputs for the links, and an hwloc XML whose CPUs are numbered
across sockets (even CPUs on socket 0), where Slurm's core indices are not CPU ids.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, HWLOC_XML
from tests.slurm.conftest import require_slurm, state_dir, wait_running
from toposcope.cli import main
from toposcope.errors import ConfigError
from toposcope.sim.fsgen import write_topology_sysfs
from toposcope.sim.templates import builtin_template
from toposcope.slurm.clusterfiles import ClusterSpec, NodeShape
from toposcope.slurm.localcluster import LocalCluster
from toposcope.slurm.scontrol import parse_job_details
from toposcope.topology.gresconf import gres_conf_lines, slurm_core_indices
from toposcope.topology.nvidia_smi import build_from_nvidia_smi_topo

NVIDIA_SMI = FIXTURES / "nvidia-smi"


def machine(tmp_path: Path, template: str) -> Path:
    """A sysfs snapshot root of a simulator template."""
    root = tmp_path / template
    write_topology_sysfs(root, builtin_template(template).topology)
    return root


def gres_conf(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert main(["slurm", "gres-conf", *args]) == 0
    return capsys.readouterr().out.splitlines()


def test_pcie_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = machine(tmp_path, "pcie-4gpu")
    lines = gres_conf(capsys, "--path.sysfs", str(root / "sys"), "--node", "gpu1")
    assert lines[1] == (
        "# slurm.conf: NodeName=gpu1 Sockets=2 CoresPerSocket=24 ThreadsPerCore=2 Gres=gpu:4"
    )
    assert [line for line in lines if not line.startswith("#")] == [
        "NodeName=gpu1 Name=gpu File=/dev/nvidia0 Cores=0-23",
        "NodeName=gpu1 Name=gpu File=/dev/nvidia1 Cores=0-23",
        "NodeName=gpu1 Name=gpu File=/dev/nvidia2 Cores=24-47",
        "NodeName=gpu1 Name=gpu File=/dev/nvidia3 Cores=24-47",
    ]
    # PCIe paths only: no NVLink, so no Links= even with the link matrix
    with_matrix = gres_conf(
        capsys,
        "--root",
        str(root),
        "--nvidia-smi-topo",
        str(NVIDIA_SMI / "pcie-4gpu-2socket.txt"),
    )
    assert not any("Links=" in line for line in with_matrix)


def test_nvlinked_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = machine(tmp_path, "dgx-a100")
    lines = gres_conf(
        capsys,
        "--root",
        str(root),
        "--nvidia-smi-topo",
        str(NVIDIA_SMI / "dgx-a100.txt"),
        "--type",
        "a100",
    )
    gpus = [line for line in lines if not line.startswith("#")]
    assert len(gpus) == 8
    assert gpus[0] == (
        "Name=gpu Type=a100 File=/dev/nvidia0 Cores=32-63 Links=-1,12,12,12,12,12,12,12"
    )
    assert gpus[7].endswith("Links=12,12,12,12,12,12,12,-1")
    assert "Gres=gpu:a100:8" in lines[1]


def test_cores_are_not_cpu_ids(capsys: pytest.CaptureFixture[str]) -> None:
    """Socket 0 holds the even CPUs: its 6 cores are Slurm cores 0-5, whatever their CPU ids."""
    lines = gres_conf(capsys, "--hwloc-xml", str(HWLOC_XML / "24em64t-2n6c2t-pci.xml"))
    assert [line for line in lines if not line.startswith("#")] == [
        "Name=gpu File=/dev/nvidia0 Cores=0-5",
        "Name=gpu File=/dev/nvidia1 Cores=6-11",
        "Name=gpu File=/dev/nvidia2 Cores=6-11",
    ]


def test_a_machine_without_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    lines = gres_conf(capsys, "--hwloc-xml", str(HWLOC_XML / "16em64t-4s2c2t.xml"))
    assert lines[-1] == "# no GPU found: nothing to declare"


def test_core_indices_need_the_cores_of_the_cpus() -> None:
    text = (NVIDIA_SMI / "pcie-4gpu-2socket.txt").read_text()
    topology = build_from_nvidia_smi_topo(text)
    with pytest.raises(ConfigError, match="lists no CPUs with their cores"):
        slurm_core_indices(topology)
    with pytest.raises(ConfigError, match="must contain"):
        gres_conf_lines(topology, device_file="/dev/nvidia0")
    with pytest.raises(ConfigError, match="GPU type"):
        gres_conf_lines(topology, gpu_type="a 100")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--path.sysfs", "/nonexistent"], "sysfs root /nonexistent does not exist"),
        (["--hwloc-xml", "/nonexistent.xml"], "does not exist"),
        (["--root", "{root}", "--node", "bad name"], "--node 'bad name' is not a host name"),
        (["--root", "{root}", "--device-file", "/dev/gpu"], "must contain {index}"),
        (["--root", "{root}", "--nvidia-smi-topo", "/nonexistent"], "cannot read /nonexistent"),
    ],
)
def test_bad_input_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    root = str(machine(tmp_path, "pcie-4gpu"))
    assert main(["slurm", "gres-conf", *(root if a == "{root}" else a for a in args)]) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error


def test_a_link_matrix_of_another_machine_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = machine(tmp_path, "pcie-4gpu")
    assert (
        main(
            [
                "slurm",
                "gres-conf",
                "--root",
                str(root),
                "--nvidia-smi-topo",
                str(NVIDIA_SMI / "dgx-a100.txt"),
            ]
        )
        == 2
    )
    assert "shows 8 GPUs but the topology" in capsys.readouterr().err


@contextmanager
def _accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], template: str, shape: NodeShape, *extra: str
) -> Iterator[LocalCluster]:
    """A running one-node cluster whose gres.conf is the command's output for ``template``."""
    require_slurm()
    root = state_dir("gres")
    spec = ClusterSpec(nodes=1, shape=shape, node_prefix=f"g{os.getpid()}n", rest=False)
    node = spec.node_names[0]
    lines = gres_conf(
        capsys,
        "--root",
        str(machine(tmp_path, template)),
        "--node",
        node,
        "--device-file",
        f"{root}/dev/nvidia{{index}}",
        *extra,
    )
    cluster = LocalCluster(root, spec)
    cluster.start(gres_conf="AutoDetect=off\n" + "\n".join(lines) + "\n")
    try:
        yield cluster
    finally:
        cluster.stop()


def _slurmd_gres(cluster: LocalCluster) -> list[str]:
    """What ``slurmd -G`` makes of the node's gres.conf (one line per GPU)."""
    done = subprocess.run(
        ["slurmd", "-N", cluster.node_names[0], "-G", "-f", str(cluster.layout.slurm_conf)],
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return [line for line in done.stderr.splitlines() if "Gres Name=gpu" in line]


def test_slurm_accepts_the_lines_and_binds_gpus_to_their_socket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shape = NodeShape(sockets=2, cores_per_socket=24, threads_per_core=2, gpus=4)
    with _accepted(tmp_path, capsys, "pcie-4gpu", shape) as cluster:
        node = cluster.node_names[0]
        shown = cluster.command("scontrol", "show", "node", node)
        assert "Gres=gpu:4(S:0-1)" in shown and "State=IDLE" in shown
        cores = [re.search(r" Cores=(\S+) ", line) for line in _slurmd_gres(cluster)]
        assert [m.group(1) if m else None for m in cores] == ["0-23", "0-23", "24-47", "24-47"]
        job = cluster.sbatch(
            "--gres=gpu:2", "--gres-flags=enforce-binding", "-c", "4", "--wrap", "sleep 600"
        )
        wait_running(cluster, job)
        detail = cluster.command("scontrol", "-d", "show", "job", str(job))
        _, (allocation,) = parse_job_details(detail)[job]
        assert len(allocation.gpus) == 2 and len(allocation.cpus) == 4
        # Slurm's CPU ids: 48 per socket (24 cores x 2 threads); GPUs 0-1 on socket 0
        assert {cpu // 48 for cpu in allocation.cpus} == {gpu // 2 for gpu in allocation.gpus}


def test_slurm_accepts_the_links_of_an_nvlinked_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shape = NodeShape(sockets=2, cores_per_socket=64, threads_per_core=2, gpus=8)
    matrix = str(NVIDIA_SMI / "dgx-a100.txt")
    with _accepted(tmp_path, capsys, "dgx-a100", shape, "--nvidia-smi-topo", matrix) as cluster:
        parsed = _slurmd_gres(cluster)
        assert len(parsed) == 8
        assert " Cores=32-63 " in parsed[0] and parsed[0].endswith(" Links=-1,12,12,12,12,12,12,12")
        assert "Gres=gpu:8(S:0-1)" in cluster.command(
            "scontrol", "show", "node", cluster.node_names[0]
        )
