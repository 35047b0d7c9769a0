"""The agent names pods through the kubelet where it can (a real pod-resources server on a
unix socket and the runtime state of tests/fixtures/podresources), and by path where not.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.agent.conftest import Child, allowed_cpus, cpus_allowed
from tests.agent.fixture_host import FixtureHost
from tests.podresources.server import PodResourcesServer
from toposcope.agent import cli as agent_cli
from toposcope.agent.local_rm import LocalResourceManager
from toposcope.errors import ConfigError
from toposcope.host.podresources.source import open_kubelet_source
from toposcope.rm import ActionKind, ActionRequest, ResourceManagerError

NODE = Path(__file__).parents[1] / "fixtures" / "podresources" / "node"
TASKS = "run/containerd/io.containerd.runtime.v2.task/k8s.io"
TRAINER = (
    "/kubepods.slice/kubepods-pod1a2b3c4d_5e6f_4a5b_8c7d_0123456789ab.slice/"
    "cri-containerd-a1b2c3d4e5f60000000000000000000000000000000000000000000000000000.scope"
)
NGINX = (
    "/kubepods.slice/kubepods-besteffort.slice/"
    "kubepods-besteffort-pod9f8e7d6c_5b4a_4c3d_9e2f_fedcba987654.slice/"
    "cri-containerd-b0b1b2b3b4b51111111111111111111111111111111111111111111111111111.scope"
)


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A directory with a short path: unix socket paths are limited to 107 bytes."""
    directory = Path(tempfile.mkdtemp(prefix="agent-podres-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def node_host(root: Path, cgroup: str, child: Child) -> FixtureHost:
    """A host tree whose containerd state is the GPU node's, with ``child`` in ``cgroup``."""
    host = FixtureHost(root)
    shutil.copytree(NODE / TASKS, root / TASKS)
    host.add_cgroup(cgroup, allowed_cpus(), [0], [child.pid])
    return host


@contextmanager
def build(host: FixtureHost, *extra: str) -> Iterator[LocalResourceManager]:
    """The agent's resource manager as ``toposcope agent`` builds it (not serving)."""
    parser = argparse.ArgumentParser()
    agent_cli.add_arguments(parser)
    args = parser.parse_args(
        [
            "--listen=127.0.0.1:0",
            "--hostname=n1",
            f"--path.rootfs={host.root}",
            f"--path.procfs={host.proc}",
            "--path.sysfs=/sys",
            *extra,
        ]
    )
    kubelet = open_kubelet_source(args.pod_resources_socket)
    try:
        server, manager = agent_cli.build_server(args, kubelet)
        server.close()
        yield manager
    finally:
        kubelet.close()


def pin(workload: str) -> ActionRequest:
    return ActionRequest("r1", ActionKind.PIN, workload, "n1", [allowed_cpus()[0]])


def test_with_the_kubelet_a_refusal_names_the_pod(
    tmp_path: Path, child: Child, socket_dir: Path
) -> None:
    host = node_host(tmp_path, TRAINER, child)
    socket = socket_dir / "kubelet.sock"
    before = cpus_allowed(child.pid)
    with (
        PodResourcesServer(socket),
        build(host, f"--kubelet.pod-resources-socket={socket}") as manager,
        pytest.raises(ResourceManagerError) as refused,
    ):
        manager.apply(pin("1a2b3c4d-5e6f-4a5b-8c7d-0123456789ab/a1b2c3d4e5f6"))
    assert refused.value.status == 409
    assert "pod research/llm-train-0 container trainer (Guaranteed)" in str(refused.value)
    assert cpus_allowed(child.pid) == before


def test_with_the_kubelet_a_best_effort_pin_names_the_pod(
    tmp_path: Path, child: Child, socket_dir: Path
) -> None:
    host = node_host(tmp_path, NGINX, child)
    socket = socket_dir / "kubelet.sock"
    with (
        PodResourcesServer(socket),
        build(host, f"--kubelet.pod-resources-socket={socket}") as manager,
    ):
        state = manager.apply(pin("9f8e7d6c-5b4a-4c3d-9e2f-fedcba987654/b0b1b2b3b4b5"))
    assert set(cpus_allowed(child.pid).values()) == {str(allowed_cpus()[0])}
    assert "never writes the kubelet's cpuset files" in state.error


def test_without_a_socket_pods_are_named_by_path_and_it_is_said(
    tmp_path: Path, child: Child, caplog: pytest.LogCaptureFixture
) -> None:
    host = node_host(tmp_path, TRAINER, child)
    with (
        caplog.at_level(logging.INFO, logger="toposcope.agent"),
        build(host) as manager,
        pytest.raises(ResourceManagerError) as refused,
    ):
        manager.apply(pin("1a2b3c4d-5e6f-4a5b-8c7d-0123456789ab/a1b2c3d4e5f6"))
    said = [r.getMessage() for r in caplog.records if "not asking the kubelet" in r.getMessage()]
    assert len(said) == 1
    assert "named by their cgroup paths" in said[0]
    assert "pod 1a2b3c4d-5e6f-4a5b-8c7d-0123456789ab container a1b2c3d4e5f6" in str(refused.value)


def test_a_socket_in_a_missing_directory_is_a_config_error(tmp_path: Path) -> None:
    host = FixtureHost(tmp_path)
    socket = tmp_path / "nope" / "kubelet.sock"
    with (
        pytest.raises(ConfigError, match="does not exist"),
        build(host, f"--kubelet.pod-resources-socket={socket}"),
    ):
        pass
