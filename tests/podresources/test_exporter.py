"""The exporter on the GPU node fixture with the kubelet's pod-resources socket.

``toposcope exporter --root NODE --nvml fake:pcie-4gpu --kubelet.pod-resources-socket SOCK
--print`` against the in-process pod-resources server: workload series carry
``namespace``/``pod``/``container``, GPUs are joined to their holders by UUID, and the
exporter keeps serving cgroup attribution when the kubelet is missing, gone or unreadable.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.podresources.server import NODE_ROOT, PodResourcesServer
from toposcope.cli import main
from toposcope.config import ExporterConfig, HostPaths
from toposcope.exporters.app import build_runner, render
from toposcope.exporters.collectors import default_table
from toposcope.exporters.context import CollectorContext
from toposcope.host.podresources.source import open_kubelet_source

UID_A = "1a2b3c4d-5e6f-4a5b-8c7d-0123456789ab"
UID_B = "9f8e7d6c-5b4a-4c3d-9e2f-fedcba987654"
TRAINER = f"{UID_A}/a1b2c3d4e5f6"
NGINX = f"{UID_B}/b0b1b2b3b4b5"
#: NVML indices of the fake pcie-4gpu GPUs whose UUIDs the kubelet gave the trainer
TRAINER_GPUS = {
    "GPU-9e7c3a10-cab2-4c55-8d21-6f0a1b2c3d03": "2",
    "GPU-9e7c3a10-e1b2-4c55-8d21-6f0a1b2c3d04": "3",
}

Rows = dict[str, list[tuple[dict[str, str], float]]]


def parse(text: str) -> Rows:
    rows: Rows = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            rows.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return rows


def exporter(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, Rows, str]:
    code = main(
        ["exporter", "--root", str(NODE_ROOT), "--nvml", "fake:pcie-4gpu", *extra, "--print"]
    )
    out, err = capsys.readouterr()
    return code, parse(out), err


def who_of(rows: Rows, workload: str) -> set[tuple[str, str, str]]:
    """The (namespace, pod, container) on every per-workload series of one workload."""
    return {
        (labels["namespace"], labels["pod"], labels["container"])
        for name, samples in rows.items()
        if name.startswith("toposcope_workload_")
        for labels, _ in samples
        if labels.get("workload") == workload
    }


def success(rows: Rows, collector: str) -> float:
    (value,) = [
        v
        for labels, v in rows["toposcope_scrape_collector_success"]
        if labels["collector"] == collector
    ]
    return value


def test_workload_series_carry_pod_labels_and_gpus_their_holders(
    kubelet: PodResourcesServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, rows, _ = exporter(capsys, "--kubelet.pod-resources-socket", str(kubelet.socket))
    assert code == 0
    assert who_of(rows, TRAINER) == {("research", "llm-train-0", "trainer")}
    assert who_of(rows, NGINX) == {("default", "nginx-debug", "nginx")}
    # every per-workload family is there for the trainer, each with its labels
    families = {
        name
        for name, samples in rows.items()
        for labels, _ in samples
        if labels.get("workload") == TRAINER
    }
    assert {
        "toposcope_workload_info",
        "toposcope_workload_cpu_seconds_total",
        "toposcope_workload_threads",
        "toposcope_workload_memory_bytes",
        "toposcope_workload_gpu_info",
        "toposcope_workload_locality_ratio",
    } <= families
    held = {
        labels["device_id"]: (labels["gpu"], labels["numa_node"], labels["pod"])
        for labels, _ in rows["toposcope_kubelet_device_allocation_info"]
    }
    assert held == {uuid: (gpu, "1", "llm-train-0") for uuid, gpu in TRAINER_GPUS.items()}
    exclusive = {
        (labels["pod"], labels["numa_node"]): v
        for labels, v in rows["toposcope_kubelet_exclusive_cpus"]
    }
    assert exclusive == {("llm-train-0", "1"): 4.0}
    allocatable = {
        (labels["resource"], labels["numa_node"]): v
        for labels, v in rows["toposcope_kubelet_allocatable"]
    }
    assert allocatable == {
        ("nvidia.com/gpu", "0"): 2.0,
        ("nvidia.com/gpu", "1"): 2.0,
        ("cpu", "0"): 3.0,
        ("cpu", "1"): 4.0,
    }
    assert success(rows, "kubelet") == 1.0


def test_without_runtime_state_only_exclusive_cpus_tie_workloads_to_the_kubelet(
    kubelet: PodResourcesServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, rows, _ = exporter(
        capsys,
        "--kubelet.pod-resources-socket",
        str(kubelet.socket),
        "--path.runtime-state",
        "/no/such/state",
    )
    assert code == 0
    assert who_of(rows, TRAINER) == {("research", "llm-train-0", "trainer")}
    assert who_of(rows, NGINX) == {("", "", "")}


def test_a_missing_socket_keeps_cgroup_attribution_and_is_said_once(
    socket_dir: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="toposcope")
    code, rows, _ = exporter(
        capsys,
        "--kubelet.pod-resources-socket",
        str(socket_dir / "kubelet.sock"),
        "--path.runtime-state",
        "/no/such/state",
    )
    assert code == 0
    assert who_of(rows, TRAINER) == {("", "", "")}
    assert success(rows, "kubelet") == 0.0
    assert success(rows, "workloads") == 1.0
    said = [r.getMessage() for r in caplog.records if "pod-resources unavailable" in r.getMessage()]
    assert len(said) == 1
    assert "no kubelet socket at" in said[0]


def test_a_socket_in_a_missing_directory_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = exporter(capsys, "--kubelet.pod-resources-socket", "/no/such/dir/kubelet.sock")
    assert code == 2
    assert "--kubelet.pod-resources-socket" in err and "/no/such/dir" in err
    assert "Traceback" not in err


def test_a_kubelet_that_dies_between_scrapes_and_comes_back(socket_dir: Path) -> None:
    socket = socket_dir / "kubelet.sock"
    config = ExporterConfig(
        paths=HostPaths.under(NODE_ROOT),
        hostname="gpu-node",
        nvml="off",
        pod_resources_socket=str(socket),
        runtime_state=("/no/such/state",),
    )
    context = CollectorContext(config)
    context.kubelet = open_kubelet_source(str(socket), max_age=0.0)
    entries = default_table().select(["workloads", "kubelet"])
    runner = build_runner(config, entries, context)
    server = PodResourcesServer(socket).start()
    try:
        first = parse(render(runner, "gpu-node").decode())
        server.stop()
        second = parse(render(runner, "gpu-node").decode())
        server.start()
        third = parse(render(runner, "gpu-node").decode())
    finally:
        server.stop()
        context.kubelet.close()
    assert success(first, "kubelet") == 1.0
    assert success(second, "kubelet") == 0.0
    assert success(third, "kubelet") == 1.0
    assert "toposcope_kubelet_exclusive_cpus" not in second
    assert third["toposcope_kubelet_exclusive_cpus"] == first["toposcope_kubelet_exclusive_cpus"]
    # the workloads stay, and a name once found stays with its container
    for rows in (first, second, third):
        assert success(rows, "workloads") == 1.0
        assert who_of(rows, TRAINER) == {("research", "llm-train-0", "trainer")}


def _run(probe: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )


def test_without_the_kubernetes_extra_the_exporter_says_so_once_and_serves(
    kubelet: PodResourcesServer,
) -> None:
    probe = (
        "import sys\n"
        "class Missing:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('grpc', 'google'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Missing())\n"
        "from toposcope.cli import main\n"
        f"sys.exit(main(['exporter', '--root', {str(NODE_ROOT)!r}, '--nvml', 'off',\n"
        f"  '--kubelet.pod-resources-socket', {str(kubelet.socket)!r}, '--print']))\n"
    )
    done = _run(probe)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("toposcope[kubernetes]") == 1
    assert "Traceback" not in done.stderr
    # names from the runtime state need no gRPC
    assert who_of(parse(done.stdout), TRAINER) == {("research", "llm-train-0", "trainer")}
    assert kubelet.calls == []


def test_the_exporter_imports_no_grpc_until_it_has_a_kubelet() -> None:
    probe = (
        "import sys\n"
        "from toposcope.cli import main\n"
        "try:\n"
        "    main(['exporter', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'google')))\n"
    )
    done = _run(probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
