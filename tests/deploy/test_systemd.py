"""deploy/systemd/toposcope-exporter.service: a valid unit with the intended sandbox.

The unit must parse as INI and carry the hardening settings below whatever machine runs the
tests; where ``systemd-analyze`` exists it must also pass ``verify`` (on a copy whose
ExecStart names an executable present here, since ``/usr/local/bin/toposcope`` usually is
not) and score a low exposure in ``security``.
"""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO

UNIT = REPO / "deploy" / "systemd" / "toposcope-exporter.service"
EXEC_START = "/usr/local/bin/toposcope exporter --listen :9847"
CAPABILITIES = {"CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"}
#: Settings whose value is fixed (single-valued keys).
HARDENING = {
    "DynamicUser": "yes",
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "read-only",
    "PrivateTmp": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectControlGroups": "yes",
    "ProtectClock": "yes",
    "ProtectHostname": "yes",
    "RestrictNamespaces": "yes",
    "RestrictRealtime": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "SystemCallArchitectures": "native",
}
#: Would hide what the exporter reads (other processes, /proc files, GPU device nodes).
MUST_NOT_SET = {"ProtectProc", "ProcSubset", "PrivateDevices", "PrivateUsers"}
#: Highest acceptable `systemd-analyze security` exposure (0 safest, 10 unprotected).
MAX_EXPOSURE = 3.5


def _text() -> str:
    return UNIT.read_text(encoding="utf-8")


def _values(section: str) -> dict[str, list[str]]:
    """Every value of every key in ``section``, in order (systemd keys may repeat)."""
    values: dict[str, list[str]] = {}
    current = None
    for raw in _text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            continue
        if current == section:
            key, _, value = line.partition("=")
            values.setdefault(key.strip(), []).append(value.strip())
    return values


def test_parses_as_ini() -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(_text(), source=UNIT.name)
    assert parser.sections() == ["Unit", "Service", "Install"]
    assert parser["Service"]["ExecStart"] == EXEC_START
    assert parser["Install"]["WantedBy"] == "multi-user.target"


def test_hardening_settings() -> None:
    service = _values("Service")
    for key, value in HARDENING.items():
        assert service.get(key) == [value], key
    assert not MUST_NOT_SET & set(service)
    assert set(service["RestrictAddressFamilies"][0].split()) == {
        "AF_INET",
        "AF_INET6",
        "AF_UNIX",
    }


def test_only_the_two_capabilities_reading_processes_needs() -> None:
    service = _values("Service")
    (bounding,) = service["CapabilityBoundingSet"]
    (ambient,) = service["AmbientCapabilities"]
    assert set(bounding.split()) == CAPABILITIES
    assert set(ambient.split()) <= set(bounding.split())


def test_system_call_filter() -> None:
    filters = _values("Service")["SystemCallFilter"]
    assert filters[0].split()[0] == "@system-service"
    assert any(f.startswith("~") and "@privileged" in f for f in filters)


def _unit_copy(tmp_path: Path) -> Path:
    """The unit with ExecStart's binary replaced by one that exists on this machine."""
    true = shutil.which("true")
    assert true is not None
    copy = tmp_path / UNIT.name
    copy.write_text(_text().replace("/usr/local/bin/toposcope", true), encoding="utf-8")
    return copy


def _systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.skip("systemd-analyze is not installed (the INI checks above still ran)")
    return path


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    result = subprocess.run(
        [_systemd_analyze(), "verify", "--man=no", str(_unit_copy(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert UNIT.name not in result.stderr, result.stderr


def test_systemd_analyze_security_exposure(tmp_path: Path) -> None:
    result = subprocess.run(
        [_systemd_analyze(), "security", "--offline=yes", str(_unit_copy(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    if found is None:
        pytest.skip(f"this systemd-analyze has no offline security check: {result.stderr.strip()}")
    assert float(found.group(1)) <= MAX_EXPOSURE, result.stdout
