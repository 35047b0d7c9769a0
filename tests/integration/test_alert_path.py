"""The whole alert path for real: a GPU lost in the fake NVML -> exporter -> Prometheus
evaluating our rules -> Alertmanager -> a webhook receiver gets ``ToposcopeGpuLost``."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO
from tests.procs import (
    Alertmanager,
    Prometheus,
    WebhookReceiver,
    free_port,
    http_get,
    poll,
    running,
)

pytestmark = pytest.mark.integration

SPECS = REPO / "toposcope" / "fake_nvml" / "specs"


def lost_alerts(receiver: WebhookReceiver) -> list[dict[str, Any]]:
    return [
        alert
        for body in receiver.received
        for alert in body["alerts"]
        if alert["labels"].get("alertname") == "ToposcopeGpuLost" and alert["status"] == "firing"
    ]


def test_lost_gpu_reaches_the_webhook(tmp_path: Path, hwloc_root: Callable[[str], Path]) -> None:
    spec = tmp_path / "dgx-gpu3-lost.yaml"
    spec.write_text(
        (SPECS / "dgx-a100.yaml").read_text()
        + '\nfaults:\n  - {call: "*", gpu: 3, error: GPU_IS_LOST, at: 2}\n'
    )
    # The shipped rule waits 1m before firing; the test keeps the expression and labels and
    # only drops the waiting time, as promtool's own unit tests cover the `for:` clause.
    rules = tmp_path / "gpu.rules.yml"
    rules.write_text(
        re.sub(r"(?m)^(\s+)for: .*$", r"\1for: 0s", (REPO / "alerts" / "gpu.rules.yml").read_text())
    )
    port = free_port()
    exporter = [
        sys.executable, "-m", "toposcope.cli", "exporter",
        "--root", str(hwloc_root("64amd64-4s2n4ca2co")),
        "--nvml", f"fake:{spec}", "--collectors", "gpu",
        "--listen", f"127.0.0.1:{port}",
    ]  # fmt: skip
    with WebhookReceiver().run() as receiver, running(exporter, tmp_path / "exporter.log"):
        poll(lambda: http_get(f"http://127.0.0.1:{port}/-/healthy"))
        alertmanager = Alertmanager(
            tmp_path,
            "route: {receiver: hook, group_by: [instance], group_wait: 1s, group_interval: 1s,"
            " repeat_interval: 1h}\n"
            f"receivers: [{{name: hook, webhook_configs: [{{url: '{receiver.url}'}}]}}]\n",
        )
        with alertmanager.run() as am:
            prometheus = Prometheus(
                tmp_path,
                [{"job_name": "toposcope", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}],
                rule_files=[str(rules)],
                alertmanagers=[f"127.0.0.1:{am.port}"],
            )
            with prometheus.run() as prom:
                poll(lambda: prom.query('toposcope_gpu_up{gpu="3"} == 0'), deadline_s=30)
                alerts = poll(lambda: lost_alerts(receiver), deadline_s=60)
                # the other GPUs still report
                assert len(prom.query("toposcope_gpu_up == 1")) == 7
    labels = alerts[0]["labels"]
    assert labels["gpu"] == "3"
    assert labels["severity"] == "critical"
    assert labels["instance"] == f"127.0.0.1:{port}"
    assert alerts[0]["annotations"]["summary"] == f"GPU 3 lost on 127.0.0.1:{port}"
    assert alerts[0]["annotations"]["runbook_url"].endswith("runbooks.md#toposcopegpulost")
