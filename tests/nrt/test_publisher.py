"""``toposcope exporter --kubernetes.publish-nrt``: the kubelet served on a unix socket, the
host tree of the GPU node, the contract server on loopback; nothing of ours replaced.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kube.fake_apiserver import Running, kubeconfig
from tests.kube.fake_nrt import NrtApiServer
from tests.nrt.conftest import KUBELET_CONFIG, NODE
from tests.podresources.server import NODE_ROOT, PodResourcesServer
from tests.procs import poll
from toposcope.cli import main
from toposcope.config import ExporterConfig, HostPaths
from toposcope.errors import ConfigError
from toposcope.exporters.context import CollectorContext
from toposcope.exporters.kubelet_attach import attach_kubelet
from toposcope.exporters.nrt_publisher import NrtSettings, open_publisher
from toposcope.host.podresources.source import KubeletSource


@pytest.fixture
def config_file(apiserver: Running, tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig(apiserver.url), encoding="utf-8")
    return path


def context_for(socket: Path) -> CollectorContext:
    config = ExporterConfig(
        paths=HostPaths.under(NODE_ROOT), hostname=NODE, pod_resources_socket=str(socket)
    )
    context = CollectorContext(config)
    attach_kubelet(context)
    return context


def test_it_publishes_then_logs_and_goes_on_when_the_kubelet_config_is_unreadable(
    kubelet: PodResourcesServer,
    fake: NrtApiServer,
    config_file: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    context = context_for(kubelet.socket)
    publisher = open_publisher(NrtSettings(NODE, str(config_file)), context)
    try:
        assert publisher.publish_once() == "created"
        assert publisher.publish_once() == "unchanged"
        fake.kubelet_configs.clear()
        with caplog.at_level(logging.WARNING, "toposcope.exporter.nrt"):
            assert publisher.publish_once() is None
            assert publisher.publish_once() is None
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, warnings  # said once
        assert "configz" in warnings[0]
        assert "HTTP 503" in warnings[0]
        fake.kubelet_configs[NODE] = {**KUBELET_CONFIG, "topologyManagerPolicy": "restricted"}
        assert publisher.publish_once() == "updated"
    finally:
        context.kubelet.close()  # type: ignore[union-attr]
    stored = fake.nrt(NODE)
    assert stored is not None
    assert {"name": "topologyManagerPolicy", "value": "restricted"} in stored["attributes"]
    assert fake.invalid == []


def test_the_background_thread_publishes_and_stops(
    kubelet: PodResourcesServer, fake: NrtApiServer, config_file: Path
) -> None:
    context = context_for(kubelet.socket)
    publisher = open_publisher(NrtSettings(NODE, str(config_file), interval=1), context)
    context.background.append(publisher)
    context.start_background()
    try:
        poll(lambda: fake.nrt(NODE), deadline_s=20, what="the NodeResourceTopology")
    finally:
        assert context.stop_background()
        context.kubelet.close()  # type: ignore[union-attr]


def test_the_command_line_publishes_with_a_kubelet_config_file(
    kubelet: PodResourcesServer,
    fake: NrtApiServer,
    config_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubelet_config = tmp_path / "kubelet.yaml"
    kubelet_config.write_text(
        "kind: KubeletConfiguration\ntopologyManagerPolicy: best-effort\n", encoding="utf-8"
    )
    code = main([
        "exporter", "--root", str(NODE_ROOT), "--nvml", "off", "--print",
        "--kubelet.pod-resources-socket", str(kubelet.socket),
        "--publish-nrt", "--kubernetes.kubeconfig", str(config_file),
        "--kubernetes.node-name", NODE, "--kubernetes.kubelet-config", str(kubelet_config),
    ])  # fmt: skip
    assert code == 0
    assert "toposcope_" in capsys.readouterr().out
    stored = fake.nrt(NODE)
    assert stored is not None
    assert stored["attributes"][0] == {"name": "topologyManagerPolicy", "value": "best-effort"}
    assert [a["name"] for a in stored["attributes"]] == [
        "topologyManagerPolicy",
        "nodeTopologyPodsFingerprint",
        "nodeTopologyPodsFingerprintMethod",
    ]


def test_without_a_kubelet_it_refuses_to_start(config_file: Path) -> None:
    context = CollectorContext(ExporterConfig(paths=HostPaths.under(NODE_ROOT), hostname=NODE))
    context.kubelet = KubeletSource(None, "no kubelet socket at /var/lib/kubelet")
    with pytest.raises(ConfigError, match="pod-resources API: no kubelet socket"):
        open_publisher(NrtSettings(NODE, str(config_file)), context)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kubernetes.kubelet-config", "k.yaml"], "needs --kubernetes.publish-nrt"),
        (["--publish-nrt", "--kubernetes.node-name", "bad/name"], "not a valid node name"),
        (["--publish-nrt", "--kubernetes.nrt-interval", "0"], "at least 1 second"),
    ],
)
def test_bad_flags_exit_2_with_the_reason(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["exporter", "--root", str(NODE_ROOT), "--nvml", "off", "--print", *argv])
    assert code == 2
    assert message in capsys.readouterr().err


def test_the_lean_exporter_never_imports_the_fingerprint_library() -> None:
    probe = (
        "import sys\n"
        "from toposcope.cli import main\n"
        f"code = main(['exporter', '--root', {str(NODE_ROOT)!r}, '--nvml', 'off', '--print'])\n"
        "assert code == 0\n"
        "assert 'xxhash' not in sys.modules, 'xxhash imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
