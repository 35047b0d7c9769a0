"""The kubelet's Topology Manager settings: from /configz through the node proxy, or a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kube.fake_apiserver import Running
from tests.nrt.conftest import NODE
from toposcope.errors import ConfigError
from toposcope.exporters.nrt.kubeletconfig import (
    from_configz,
    read_config_file,
    read_configz,
)
from toposcope.kubeapi.client import KubeApi, KubeApiError


def test_configz_through_the_api_servers_node_proxy(apiserver: Running) -> None:
    config = read_configz(KubeApi(apiserver.url), NODE)
    assert (config.policy, config.scope, config.source) == ("single-numa-node", "pod", "configz")
    assert config.missing() == []


def test_a_kubelet_that_does_not_answer_is_an_error_not_a_default(apiserver: Running) -> None:
    apiserver.fake.kubelet_configs.clear()  # type: ignore[attr-defined]
    with pytest.raises(KubeApiError, match="HTTP 503"):
        read_configz(KubeApi(apiserver.url), NODE)
    with pytest.raises(ConfigError, match="not a valid node name"):
        read_configz(KubeApi(apiserver.url), "../etc")


def test_values_the_kubelet_would_refuse_and_absent_ones_are_not_stated() -> None:
    config = from_configz({"kubeletconfig": {"topologyManagerPolicy": "single-numa"}})
    assert (config.policy, config.scope) == (None, None)
    assert config.missing() == ["topologyManagerPolicy", "topologyManagerScope"]
    with pytest.raises(ConfigError, match="no 'kubeletconfig'"):
        from_configz({"kind": "Status"})


def test_a_kubelet_configuration_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "topologyManagerPolicy: restricted\n",
        encoding="utf-8",
    )
    config = read_config_file(path)
    assert (config.policy, config.scope, config.source) == ("restricted", None, str(path))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: Pod\n", "not a KubeletConfiguration"),
        ("a: [\n", "not valid YAML"),
        (None, "cannot read"),
    ],
)
def test_bad_kubelet_configuration_files_are_named(
    tmp_path: Path, text: str | None, message: str
) -> None:
    path = tmp_path / "config.yaml"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        read_config_file(path)
