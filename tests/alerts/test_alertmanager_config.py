"""alerts/alertmanager.yml: amtool accepts it, it routes each severity to its receiver, and a
real Alertmanager applies its inhibition rules (a lost GPU and a down target silence the
alerts they explain).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.procs import Alertmanager, free_port, http_get, poll, require_binary

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "alerts" / "alertmanager.yml"
RULE_FILES = sorted((REPO / "alerts").glob("*.rules.yml"))
RECEIVER_BY_SEVERITY = {"critical": "oncall-pager", "warning": "team-chat", "info": "tickets"}


def config() -> dict[str, Any]:
    data = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def alert_rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            rules.extend(rule for rule in group["rules"] if "alert" in rule)
    return rules


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_binary("amtool"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def routed_receiver(labels: dict[str, str]) -> str:
    """The receiver(s) amtool's routing test picks for an alert with ``labels``."""
    result = amtool(
        "config",
        "routes",
        "test",
        f"--config.file={CONFIG.relative_to(REPO)}",
        *(f"{name}={value}" for name, value in labels.items()),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


def test_amtool_check_config() -> None:
    result = amtool("check-config", str(CONFIG.relative_to(REPO)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_critical_gpu_lost_pages_the_on_call() -> None:
    labels = {
        "alertname": "ToposcopeGpuLost",
        "severity": "critical",
        "job": "toposcope-host",
        "instance": "gpu-node-1:9847",
        "gpu": "0",
    }
    assert routed_receiver(labels) == "oncall-pager"


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: str(rule["alert"]))
def test_every_alert_reaches_the_receiver_of_its_severity(rule: dict[str, Any]) -> None:
    severity = str(rule["labels"]["severity"])
    labels = {"alertname": str(rule["alert"]), "severity": severity, "instance": "n:9847"}
    assert routed_receiver(labels) == RECEIVER_BY_SEVERITY[severity]


def test_alerts_are_grouped_by_node() -> None:
    group_by = config()["route"]["group_by"]
    assert "instance" in group_by
    assert "alertname" not in group_by, "one notification per node, not per alert name"


def test_inhibit_rules_name_existing_alerts() -> None:
    names = {str(rule["alert"]) for rule in alert_rules()}
    for inhibit in config()["inhibit_rules"]:
        for matcher in inhibit["source_matchers"]:
            label, _, value = str(matcher).partition("=")
            if label == "alertname":
                assert set(value.strip('"~').split("|")) <= names, matcher


# --- a real Alertmanager ---------------------------------------------------------------------


def alert(name: str, severity: str, **labels: str) -> dict[str, Any]:
    return {
        "labels": {"alertname": name, "severity": severity, "job": "toposcope-host", **labels},
        "annotations": {"summary": name},
    }


@pytest.mark.integration
def test_alertmanager_inhibits_what_a_lost_gpu_or_down_exporter_explains(
    tmp_path: Path,
) -> None:
    # The example's webhook URLs point at a fixed loopback port: aim them at a free one.
    data = config()
    for receiver in data["receivers"]:
        for webhook in receiver.get("webhook_configs", []):
            webhook["url"] = f"http://127.0.0.1:{free_port()}/"
    alertmanager = Alertmanager(tmp_path, yaml.safe_dump(data))
    url = alertmanager.url
    posted = [
        alert("ToposcopeGpuLost", "critical", instance="gpu-node-1:9847", gpu="0"),
        alert("ToposcopeGpuXidFatal", "critical", instance="gpu-node-1:9847", gpu="0", xid="79"),
        alert("ToposcopeGpuThermalThrottling", "warning", instance="gpu-node-1:9847", gpu="1"),
        alert("ToposcopeExporterDown", "warning", instance="gpu-node-2:9847"),
        alert("ToposcopeCollectorFailing", "warning", instance="gpu-node-2:9847", collector="gpu"),
        alert("ToposcopeGpuMemoryNearlyFull", "warning", instance="gpu-node-3:9847", gpu="0"),
    ]
    expected = {
        ("ToposcopeGpuLost", "gpu-node-1:9847"): "active",
        ("ToposcopeGpuXidFatal", "gpu-node-1:9847"): "suppressed",
        ("ToposcopeGpuThermalThrottling", "gpu-node-1:9847"): "active",
        ("ToposcopeExporterDown", "gpu-node-2:9847"): "active",
        ("ToposcopeCollectorFailing", "gpu-node-2:9847"): "suppressed",
        ("ToposcopeGpuMemoryNearlyFull", "gpu-node-3:9847"): "active",
    }

    def states() -> dict[tuple[str, str], str]:
        answer = json.loads(http_get(f"{url}/api/v2/alerts"))
        return {
            (a["labels"]["alertname"], a["labels"]["instance"]): a["status"]["state"]
            for a in answer
        }

    with alertmanager.run():
        request = urllib.request.Request(
            f"{url}/api/v2/alerts",
            data=json.dumps(posted).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200
        poll(lambda: states() == expected, deadline_s=15)
