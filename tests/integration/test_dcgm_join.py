"""toposcope's GPU series join dcgm-exporter's in a real Prometheus, as docs/metrics.md says.

Prometheus scrapes a toposcope exporter over the fake DGX A100 and, as a second job, series
shaped exactly like dcgm-exporter's documented output for the same GPUs
(``tests/fixtures/dcgm/dgx-a100-default-counters.prom``, which cites its source). The joins
run are the documented ones (:data:`toposcope.catalogue.dcgm_joins.DCGM_JOINS`), and every
join key is checked on value series alone.
"""

from __future__ import annotations

import http.server
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import REPO
from tests.procs import Prometheus, free_port, http_get, poll, running
from toposcope.catalogue import GPU_KEYS
from toposcope.catalogue.dcgm_joins import DCGM_JOINS

pytestmark = pytest.mark.integration

FIXTURE = REPO / "tests" / "fixtures" / "dcgm" / "dgx-a100-default-counters.prom"
SPEC = REPO / "toposcope" / "fake_nvml" / "specs" / "dgx-a100.yaml"
HOSTNAME = "gpu-node-1"
#: NUMA node of each GPU of the fake DGX A100 (its description's numa_node)
NUMA_OF_GPU = {0: 1, 1: 1, 2: 0, 3: 0, 4: 3, 5: 3, 6: 2, 7: 2}


@contextmanager
def serving(body: bytes) -> Iterator[int]:
    """Serve ``body`` as Prometheus text on a loopback port for the length of the block."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def remap_pending_on_gpu2(tmp_path: Path) -> Path:
    """The shipped DGX A100 description with a row remap pending on GPU 2."""
    spec = yaml.safe_load(SPEC.read_text())
    spec["gpus"][2]["row_remapping"] = {"correctable": 1, "uncorrectable": 0, "pending": True}
    path = tmp_path / "dgx-remap-pending.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def by_gpu(result: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {int(s["metric"]["gpu"]): s for s in result}


def test_documented_joins_with_dcgm_exporter(
    tmp_path: Path, hwloc_root: Callable[[str], Path]
) -> None:
    port = free_port()
    exporter = [
        sys.executable, "-m", "toposcope.cli", "exporter",
        "--root", str(hwloc_root("64amd64-4s2n4ca2co")),
        "--nvml", f"fake:{remap_pending_on_gpu2(tmp_path)}", "--collectors", "gpu",
        "--hostname", HOSTNAME, "--listen", f"127.0.0.1:{port}",
    ]  # fmt: skip
    with serving(FIXTURE.read_bytes()) as dcgm_port, running(exporter, tmp_path / "exp.log"):
        poll(lambda: http_get(f"http://127.0.0.1:{port}/-/healthy"))
        prometheus = Prometheus(
            tmp_path,
            [
                {"job_name": "toposcope", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]},
                {
                    "job_name": "dcgm-exporter",
                    "static_configs": [{"targets": [f"127.0.0.1:{dcgm_port}"]}],
                },
            ],
        )
        with prometheus.run() as prom:
            poll(lambda: len(prom.query("toposcope_gpu_info")) == 8 or None)
            poll(lambda: len(prom.query("DCGM_FI_DEV_GPU_UTIL")) == 8 or None)
            locality, by_address, per_node, pending = (
                prom.query(join.promql) for join in DCGM_JOINS
            )
            # each unique key alone (with Hostname), then all of them at once
            keys = [f"Hostname, {key}" for key in ("gpu", "UUID", "pci_bus_id", "device")]
            keyed = {
                key: prom.query(f"DCGM_FI_DEV_POWER_USAGE - on ({key}) toposcope_gpu_power_watts")
                for key in [*keys, ", ".join(GPU_KEYS)]
            }
    # dcgm-exporter's utilisation, toposcope's locality, dcgm-exporter's pod labels kept
    for rows in (locality, by_address):
        assert len(rows) == 8
        for gpu, sample in by_gpu(rows).items():
            assert sample["metric"]["numa_node"] == str(NUMA_OF_GPU[gpu])
            assert float(sample["value"][1]) == 10 * gpu + 5
            assert sample["metric"]["job"] == "dcgm-exporter"
            assert sample["metric"].get("pod") == ("train-0" if gpu < 4 else None)
    assert locality[0]["metric"]["cpu_affinity"]
    means = {s["metric"]["numa_node"]: float(s["value"][1]) for s in per_node}
    assert means == {"1": 10.0, "0": 30.0, "3": 50.0, "2": 70.0}
    assert {s["metric"]["Hostname"] for s in per_node} == {HOSTNAME}
    # the pod on the GPU that needs a reset
    assert [(s["metric"]["gpu"], s["metric"]["pod"]) for s in pending] == [("2", "train-0")]
    # value series join value series on every key, without toposcope_gpu_info
    for key, rows in keyed.items():
        assert len(rows) == 8, key
