"""``toposcope advisor serve``: options, start-up errors, a real process stopped by SIGTERM,
and the ``local`` resource manager pinning a real process through the service's API.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.advisor_serve.conftest import API_TOKEN, Bench, Placement, call, host_text, serving
from tests.agent.conftest import allowed_cpus, cpus_allowed, running_child
from tests.procs import free_port, http_get, poll
from toposcope.advisor import serve_cli
from toposcope.advisor.rmclients import make_resource_manager
from toposcope.cli import build_parser
from toposcope.cpulist import format_cpulist
from toposcope.rm import ResourceManager

#: runs ``toposcope advisor ARGS`` the way the top-level command does
MAIN = (
    "import argparse, sys\n"
    "from toposcope.advisor import serve_cli\n"
    "parser = argparse.ArgumentParser(prog='toposcope advisor')\n"
    "serve_cli.add_arguments(parser)\n"
    "sys.exit(serve_cli.run(parser.parse_args(sys.argv[1:])))\n"
)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="toposcope advisor")
    serve_cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_defaults_are_loopback_and_dry_run() -> None:
    args = parse(["serve", "--prometheus", "http://prometheus:9090"])
    assert args.advisor_command == "serve"
    assert args.listen == "127.0.0.1:9849"
    assert args.resource_manager == "dry-run"
    assert args.interval == "60s"
    assert args.api_token_file is None
    assert args.paid_share == 0.5


def test_the_paid_share_keeps_its_earlier_name() -> None:
    base = ["serve", "--prometheus", "http://prometheus:9090"]
    assert parse([*base, "--paid-share", "0.4"]).paid_share == 0.4
    assert parse([*base, "--effective-share", "0.3"]).paid_share == 0.3


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--resource-manager", "sim"], "--rm-url"),
        (["--interval", "0s"], "--interval"),
        (["--window", "an hour"], "duration"),
        (["--api-token-file", "/nonexistent/token"], "token file"),
        (["--harm-threshold", "2"], "harm threshold"),
        (["--paid-share", "0"], "paid share"),
        (["--listen", "nowhere"], "HOST:PORT"),
        (["--progress-metric", 'train-.*=up{job=~"x"}'], "names no {workload}"),
        (["--progress-metric", "train=up{job={workload}} or {workload}"], "label-matcher"),
        (["--reuse-window", "soon"], "--reuse-window"),
    ],
)
def test_start_up_errors_exit_2(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--prometheus", "http://127.0.0.1:1", "--audit-db", str(tmp_path / "a.db")]
    assert serve_cli.run(parse([*argv, *extra])) == 2
    assert message in capsys.readouterr().err


def test_serves_until_sigterm(bench: Bench, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(API_TOKEN)
    token.chmod(0o600)
    port = free_port()
    argv = [
        sys.executable,
        "-c",
        MAIN,
        "serve",
        "--prometheus",
        bench.prometheus.url,
        "--window",
        "10m",
        "--listen",
        f"127.0.0.1:{port}",
        "--interval",
        "1s",
        "--api-token-file",
        str(token),
        "--audit-db",
        str(tmp_path / "audit.sqlite"),
    ]
    url = f"http://127.0.0.1:{port}"
    with open(tmp_path / "serve.log", "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        poll(lambda: http_get(f"{url}/-/ready"))
        text = http_get(f"{url}/metrics").decode()
        assert 'toposcope_advisor_analyses_total{result="success"}' in text
        status, _, body = call(f"{url}/api/v1/recommendations")
        assert status == 200 and body["service"]["resource_manager"] == "dry-run"
        rec_id = body["recommendations"][0]["id"]
        status, _, body = call(f"{url}/api/v1/recommendations/{rec_id}/apply", "POST", API_TOKEN)
        assert status == 200 and body["result"] == "dry-run"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert bench.rm.posts == 0


def test_local_resource_manager_pins_a_real_process(bench: Bench) -> None:
    cpus = allowed_cpus()
    if len(cpus) < 2 or os.sched_getaffinity(0) != set(cpus):
        pytest.skip("needs two CPUs")
    local = make_resource_manager("local")

    def factory(nodes: object, out: object) -> ResourceManager:
        return local

    with running_child() as child:
        start = cpus_allowed(child.pid)
        spread = Placement({0: 0.7, 1: 0.3}, {0: 0.6, 1: 0.4}, pid=child.pid)
        node_cpus = (str(cpus[0]), format_cpulist(cpus[1:]))
        bench.promql.text = host_text({child.workload: spread}, node_cpus)
        service = bench.service(factory=factory, backend_name="local")
        service.analyse_once()
        assert service.report is not None
        [rec] = service.report.recommendations
        assert rec.target.workload == child.workload
        with serving(service) as url:
            apply = f"{url}/api/v1/recommendations/{rec.id}/apply"
            status, _, body = call(apply, "POST", API_TOKEN)
            assert status == 200 and body["result"] == "applied", json.dumps(body)
            assert set(cpus_allowed(child.pid).values()) == {str(cpus[0])}
            revert = f"{url}/api/v1/recommendations/{rec.id}/revert"
            status, _, body = call(revert, "POST", API_TOKEN)
            assert status == 200, json.dumps(body)
        assert cpus_allowed(child.pid) == start


def test_the_api_token_option_says_whose_token_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    parser, _ = build_parser(["advisor"])
    serve = ["advisor", "serve", "--prometheus", "http://prometheus:9090"]
    assert parser.parse_args([*serve, "--api-token-file", "api.token"]).api_token_file == (
        "api.token"
    )
    assert capsys.readouterr().err == ""
    assert parser.parse_args([*serve, "--token-file", "api.token"]).api_token_file == "api.token"
    warning = "toposcope advisor serve: warning: --token-file is deprecated, use --api-token-file"
    assert warning in capsys.readouterr().err
