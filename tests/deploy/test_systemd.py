"""deploy/systemd/: the exporter, agent and advisor units, valid and with the intended sandbox.

Each unit must parse as INI, carry its hardening settings whatever machine runs the tests,
and start a command line the real ``toposcope`` parser accepts; where ``systemd-analyze``
exists it must also pass ``verify`` (on a copy whose ExecStart names an executable present
here, since ``/usr/local/bin/toposcope`` usually is not) and score a low exposure in
``security``. The agent relaxes exactly what its job needs (cgroup writes, the
``@resources`` system calls, CAP_SYS_NICE); the advisor needs no privilege at all.
"""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.cliargs import parse_cli
from tests.helpers import REPO

SYSTEMD = REPO / "deploy" / "systemd"
UNIT = SYSTEMD / "toposcope-exporter.service"
AGENT = SYSTEMD / "toposcope-agent.service"
ADVISOR = SYSTEMD / "toposcope-advisor.service"
UNITS = [UNIT, AGENT, ADVISOR]
BINARY = "/usr/local/bin/toposcope"
EXEC_START = f"{BINARY} exporter --listen :9847"
#: what systemd puts in for the directory variables of ExecStart
CREDENTIALS = "/run/credentials/UNIT"
STATE = "/var/lib/toposcope"
#: settings every unit carries
COMMON_HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "PrivateTmp": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectClock": "yes",
    "ProtectHostname": "yes",
    "RestrictNamespaces": "yes",
    "RestrictRealtime": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "SystemCallArchitectures": "native",
    "UMask": "0077",
}
#: the agent's system calls: sched_setaffinity (pin) and migrate_pages (migrate-memory)
AGENT_SYSCALLS = {"sched_setaffinity", "migrate_pages"}
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


def _text(unit: Path = UNIT) -> str:
    return unit.read_text(encoding="utf-8")


def _values(section: str, unit: Path = UNIT) -> dict[str, list[str]]:
    """Every value of every key in ``section``, in order (systemd keys may repeat)."""
    values: dict[str, list[str]] = {}
    current = None
    for raw in _text(unit).splitlines():
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


def _argv(command: str) -> list[str]:
    """An ExecStart command line split as systemd does, its variables filled in."""
    words = shlex.split(
        command.replace("${CREDENTIALS_DIRECTORY}", CREDENTIALS).replace(
            "${STATE_DIRECTORY}", STATE
        )
    )
    assert words[0] == BINARY
    assert not any("$" in w for w in words), words
    return words[1:]


def _credential(unit: Path, path: str) -> str:
    """The source file of the LoadCredential= that ``path`` (in the credentials dir) names."""
    name = path.removeprefix(CREDENTIALS + "/")
    assert name != path, f"{path} is not in $CREDENTIALS_DIRECTORY"
    sources = dict(v.split(":", 1) for v in _values("Service", unit).get("LoadCredential", []))
    assert name in sources, f"{unit.name} loads no credential {name!r}"
    return sources[name]


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_parses_as_ini(unit: Path) -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(_text(unit), source=unit.name)
    assert parser.sections() == ["Unit", "Service", "Install"]
    assert parser["Install"]["WantedBy"] == "multi-user.target"
    assert _values("Service")["ExecStart"] == [EXEC_START]


@pytest.mark.parametrize(
    ("unit", "command"),
    [(UNIT, "exporter"), (AGENT, "agent"), (ADVISOR, "advisor")],
    ids=lambda v: v.name if isinstance(v, Path) else v,
)
def test_exec_start_parses_with_the_cli(unit: Path, command: str) -> None:
    (exec_start,) = _values("Service", unit)["ExecStart"]
    args = parse_cli(_argv(exec_start))
    assert args.command == command


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_common_hardening(unit: Path) -> None:
    service = _values("Service", unit)
    for key, value in COMMON_HARDENING.items():
        assert service.get(key) == [value], f"{unit.name}: {key}"
    assert set(service["RestrictAddressFamilies"][0].split()) == {
        "AF_INET",
        "AF_INET6",
        "AF_UNIX",
    }
    assert service["SystemCallFilter"][0].split()[0] == "@system-service"
    assert any(f.startswith("~") and "@privileged" in f for f in service["SystemCallFilter"])
    ambient = service.get("AmbientCapabilities", [""])[0].split()
    assert set(ambient) <= set(service["CapabilityBoundingSet"][0].split())


def test_agent_token_is_a_credential() -> None:
    (exec_start,) = _values("Service", AGENT)["ExecStart"]
    args = parse_cli(_argv(exec_start))
    assert args.token_file, "an agent without a token refuses every change"
    assert _credential(AGENT, args.token_file) == "/etc/toposcope/agent.token"
    assert "EnvironmentFile" not in _values("Service", AGENT)


def test_agent_listens_on_the_port_the_advisor_calls() -> None:
    (exec_start,) = _values("Service", AGENT)["ExecStart"]
    assert parse_cli(_argv(exec_start)).listen == ":9848"
    text = _text(ADVISOR)
    assert "--rm-url https://{node}:9848/api/v1" in text
    assert "--rm-url-map /etc/toposcope/agents.yaml" in text  # the agents' allow-list


def test_agent_privileges_are_the_ones_its_job_needs() -> None:
    service = _values("Service", AGENT)
    assert set(service["CapabilityBoundingSet"][0].split()) == {"CAP_SYS_NICE", "CAP_SYS_PTRACE"}
    assert set(service["AmbientCapabilities"][0].split()) == {"CAP_SYS_NICE", "CAP_SYS_PTRACE"}
    # the cgroup hierarchy is the one writable place: cpuset.cpus / cpuset.mems
    assert service["ProtectControlGroups"] == ["no"]
    assert service["ReadWritePaths"] == ["/sys/fs/cgroup"]
    # it must see every process of the host, with the host's credentials
    assert not {"ProtectProc", "ProcSubset", "PrivateUsers", "DynamicUser"} & set(service)
    denied = " ".join(f for f in service["SystemCallFilter"] if f.startswith("~"))
    assert "@resources" not in denied  # sched_setaffinity and migrate_pages live there
    for relaxed in ("ProtectControlGroups", "@resources", "CAP_SYS_NICE", "CAP_SYS_PTRACE"):
        assert relaxed in _text(AGENT).split("[Unit]")[0], f"{relaxed} is not explained"


def test_advisor_keeps_its_audit_log_in_the_state_directory() -> None:
    service = _values("Service", ADVISOR)
    (exec_start,) = service["ExecStart"]
    args = parse_cli(_argv(exec_start))
    assert args.advisor_command == "serve"
    (state,) = service["StateDirectory"]
    assert Path(args.audit_db).parent == Path("/var/lib") / state == Path(STATE)
    assert _credential(ADVISOR, args.api_token_file) == "/etc/toposcope/advisor.token"
    assert args.resource_manager == "dry-run"  # recommend-only unless a drop-in says otherwise
    assert args.listen.startswith("127.0.0.1:")


def test_advisor_apply_drop_in_parses_with_the_cli() -> None:
    """The drop-in the unit's comment shows (apply through the agents) is a valid command."""
    lines = [line.removeprefix("#").strip() for line in _text(ADVISOR).splitlines()]
    start = lines.index("ExecStart=") + 1
    command = ""
    for line in lines[start:]:
        command += " " + line.removeprefix("ExecStart=").rstrip("\\").strip()
        if not line.endswith("\\"):
            break
    args = parse_cli(_argv(command.strip()))
    assert args.resource_manager == "agent"
    assert "{node}" in args.rm_url
    dropin = [line for line in lines if line.startswith("LoadCredential=")]
    assert args.rm_token_file.removeprefix(CREDENTIALS + "/") in dropin[0]


def test_advisor_needs_no_privilege() -> None:
    service = _values("Service", ADVISOR)
    assert service["CapabilityBoundingSet"] == [""]
    assert "AmbientCapabilities" not in service
    for key in ("DynamicUser", "PrivateDevices", "PrivateUsers", "ProtectHome"):
        assert service[key] == ["yes"], key
    assert service["ProtectProc"] == ["invisible"]
    assert any("@resources" in f for f in service["SystemCallFilter"] if f.startswith("~"))


def test_exporter_hardening_settings() -> None:
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


def _unit_copy(tmp_path: Path, unit: Path = UNIT) -> Path:
    """The unit with ExecStart's binary replaced by one that exists on this machine."""
    true = shutil.which("true")
    assert true is not None
    copy = tmp_path / unit.name
    copy.write_text(_text(unit).replace(BINARY, true), encoding="utf-8")
    return copy


def _systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.skip("systemd-analyze is not installed (the INI checks above still ran)")
    return path


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_systemd_analyze_verify(tmp_path: Path, unit: Path) -> None:
    result = subprocess.run(
        [_systemd_analyze(), "verify", "--man=no", str(_unit_copy(tmp_path, unit))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert unit.name not in result.stderr, result.stderr


def _filter_set(name: str) -> set[str]:
    """The system calls of a ``systemd-analyze syscall-filter`` group, nested groups included."""
    result = subprocess.run(
        [_systemd_analyze(), "syscall-filter", name],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    calls: set[str] = set()
    for line in result.stdout.splitlines()[1:]:
        word = line.strip()
        if word.startswith("@") and word != name:
            calls |= _filter_set(word)
        elif word and not word.startswith(("#", "@")):
            calls.add(word)
    return calls


def test_agent_system_call_filter_allows_its_calls() -> None:
    allowed: set[str] = set()
    denied: set[str] = set()
    for value in _values("Service", AGENT)["SystemCallFilter"]:
        target = denied if value.startswith("~") else allowed
        for item in value.removeprefix("~").split():
            target |= _filter_set(item) if item.startswith("@") else {item}
    assert allowed - denied >= AGENT_SYSCALLS
    # ... where the exporter's filter refuses them
    exporter_denied: set[str] = set()
    for value in _values("Service", UNIT)["SystemCallFilter"]:
        if value.startswith("~"):
            for item in value.removeprefix("~").split():
                exporter_denied |= _filter_set(item)
    assert exporter_denied >= AGENT_SYSCALLS


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_systemd_analyze_security_exposure(tmp_path: Path, unit: Path) -> None:
    result = subprocess.run(
        [_systemd_analyze(), "security", "--offline=yes", str(_unit_copy(tmp_path, unit))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    if found is None:
        pytest.skip(f"this systemd-analyze has no offline security check: {result.stderr.strip()}")
    assert float(found.group(1)) <= MAX_EXPOSURE, result.stdout
