"""``make up TLS=1``'s configuration, without starting the stack: the certificates chain to
the run's CA and name 127.0.0.1, every daemon gets a web configuration, and Prometheus'
configuration (``scheme: https``, ``tls_config``, ``basic_auth`` for the exporter) passes
``promtool check config``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import REPO
from tests.procs import require_binary
from toposcope.errors import ConfigError

pytestmark = pytest.mark.integration


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.setenv("TOPOSCOPE_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    spec = importlib.util.spec_from_file_location("stack_under_test", REPO / "deploy" / "stack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    module.TLS_MODE["on"] = True
    try:
        module.make_stack_certificates()
    except ConfigError as exc:
        pytest.skip(str(exc))
    yield module


def test_tls_stack_configuration(stack: ModuleType, tmp_path: Path) -> None:
    pki = stack.pki()
    for name in stack.TLS_NAMES:
        verified = subprocess.run(
            [require_binary("openssl"), "verify", "-CAfile", str(pki / "ca.crt"),
             "-verify_ip", "127.0.0.1", str(pki / f"{name}.crt")],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert verified.returncode == 0, verified.stdout + verified.stderr
    exporter = stack.web_config_args("exporter", stack.exporter_users())
    assert exporter[0] == "--web.config.file"
    text = Path(exporter[1]).read_text()
    assert "tls_server_config" in text and f"{stack.SCRAPE_USER}: '$2b$" in text
    sim_text = Path(stack.web_config_args("sim", client_certs=True)[1]).read_text()
    assert "client_ca_file" in sim_text
    assert "--rm-tls-cert-file" in stack.advisor_tls_args()
    ports = {"exporter": 19847, "advisor": 19849, "alertmanager": 19093, "sim": 19850}
    config = stack.stack_prometheus_config(ports)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert {job["scheme"] for job in jobs.values()} == {"https"}
    assert jobs["toposcope-host"]["basic_auth"]["username"] == stack.SCRAPE_USER
    assert "basic_auth" not in jobs["toposcope-sim"]
    (stack.RUN / "sim").mkdir(parents=True, exist_ok=True)
    (stack.RUN / "sim" / "targets.json").write_text("[]")
    path = tmp_path / "prometheus.yml"
    path.write_text(json.dumps(config))
    checked = subprocess.run(
        [require_binary("promtool"), "check", "config", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    stack.TLS_MODE["on"] = False
    plain = stack.stack_prometheus_config(ports)
    assert all("scheme" not in job for job in plain["scrape_configs"])
    assert stack.web_config_args("exporter", stack.exporter_users()) == []
