"""The exporter's reported hostname: --hostname, else $NODE_NAME, else this host's name."""

from __future__ import annotations

import argparse
import socket

import pytest

from tests.workloads.helpers import V2HOST
from toposcope.exporters.cli import (
    DEFAULT_SAMPLE_INTERVAL,
    add_arguments,
    config_from_args,
    default_hostname,
)


def _config_hostname(*argv: str) -> str:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(["--root", str(V2HOST), *argv])).hostname


def test_node_name_comes_first_as_dcgm_exporter_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    assert _config_hostname() == "gpu-node-7"
    assert _config_hostname("--hostname", "given") == "given"


def test_without_node_name_the_host_name_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert _config_hostname() == socket.gethostname()
    monkeypatch.setenv("NODE_NAME", "  ")
    assert default_hostname() == socket.gethostname()


def test_the_sample_interval_flag_reaches_the_workload_settings() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--root", str(V2HOST)])
    assert config_from_args(args).workloads.sample_interval == DEFAULT_SAMPLE_INTERVAL == 15.0
    args = parser.parse_args(["--root", str(V2HOST), "--collector.workloads.sample-interval", "0"])
    assert config_from_args(args).workloads.sample_interval == 0.0
