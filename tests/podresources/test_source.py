"""The exporter's kubelet source: when it talks to a kubelet, sharing answers, saying once."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.podresources.server import PodResourcesServer
from toposcope.errors import ConfigError
from toposcope.host.podresources.client import PodResourcesClient
from toposcope.host.podresources.source import KubeletSource, open_kubelet_source


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_answer_serves_every_reader_within_max_age(kubelet: PodResourcesServer) -> None:
    clock = Clock()
    source = KubeletSource(PodResourcesClient(str(kubelet.socket)), max_age=5.0, clock=clock)
    first = source.answer()
    assert first is not None and source.answer() is first
    assert kubelet.calls == ["List", "GetAllocatableResources"]
    clock.now += 5.0
    assert source.answer() is not first
    assert kubelet.calls.count("List") == 2


def test_an_outage_is_said_once_and_the_return_once(
    socket_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    socket = socket_dir / "kubelet.sock"
    source = KubeletSource(PodResourcesClient(str(socket)), max_age=0.0)
    with caplog.at_level(logging.INFO, logger="toposcope"):
        for _ in range(3):
            assert source.answer() is None
        assert "no kubelet socket" in source.reason
        with PodResourcesServer(socket):
            assert source.answer() is not None
            assert source.answer() is not None
    messages = [r.getMessage() for r in caplog.records]
    assert sum("unavailable" in m for m in messages) == 1
    assert sum("answers again" in m for m in messages) == 1
    assert source.reason == ""


def test_no_socket_option_and_no_default_socket_means_no_kubelet() -> None:
    if Path("/var/lib/kubelet/pod-resources/kubelet.sock").exists():
        pytest.skip("this machine runs a kubelet")
    source = open_kubelet_source(None)
    assert not source.enabled
    assert source.answer() is None
    assert "no kubelet socket at /var/lib/kubelet/pod-resources/kubelet.sock" in source.reason


def test_a_given_socket_is_used_even_before_it_exists(socket_dir: Path) -> None:
    source = open_kubelet_source(str(socket_dir / "kubelet.sock"))
    assert source.enabled
    with PodResourcesServer(socket_dir / "kubelet.sock"):
        assert source.answer() is not None
    source.close()


def test_a_given_socket_in_a_missing_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mount the kubelet's pod-resources directory"):
        open_kubelet_source(str(tmp_path / "absent" / "kubelet.sock"))
