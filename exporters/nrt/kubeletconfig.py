"""The kubelet's Topology Manager settings, read from where the kubelet states them.

A NodeResourceTopology carries ``topologyManagerPolicy`` and ``topologyManagerScope``; the
scheduler trusts them to predict the kubelet's admission, so they are read, never assumed:

* from the kubelet's ``/configz`` endpoint through the API server's node proxy
  (``GET /api/v1/nodes/NAME/proxy/configz``, RBAC ``nodes/proxy get``): the configuration
  the kubelet runs with, flags and defaults included (``{"kubeletconfig": {...}}``);
* or from the kubelet's configuration file (``KubeletConfiguration``,
  ``kubelet.config.k8s.io/v1beta1``) given by the operator: right only when the kubelet takes
  no ``--topology-manager-*`` flags, which override the file.

A setting the source does not state, or states with a value the kubelet would not accept, is
left out (and the caller says so): the policy is never guessed.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toposcope.boundedread import load_yaml_mapping
from toposcope.errors import ConfigError
from toposcope.identity.names import is_node_name
from toposcope.kubeapi.client import KubeApi

#: values the kubelet accepts (pkg/kubelet/cm/topologymanager, Kubernetes 1.30)
POLICIES = frozenset({"none", "best-effort", "restricted", "single-numa-node"})
SCOPES = frozenset({"container", "pod"})
#: the largest kubelet configuration file read
MAX_CONFIG_FILE = 1024 * 1024


@dataclass(frozen=True)
class TopologyManagerConfig:
    """The kubelet's Topology Manager policy and scope; ``None`` where not stated.

    ``source`` says where they were read (``configz``, or the file's path), for the logs.
    """

    policy: str | None
    scope: str | None
    source: str

    def missing(self) -> list[str]:
        """The settings the source did not state (or stated with a value out of range)."""
        return [
            name
            for name, value in (("topologyManagerPolicy", self.policy),
                                ("topologyManagerScope", self.scope))
            if value is None
        ]  # fmt: skip


def from_kubelet_config(config: Mapping[str, Any], source: str) -> TopologyManagerConfig:
    """The settings in a ``KubeletConfiguration`` mapping (the file, or configz's content)."""
    policy = config.get("topologyManagerPolicy")
    scope = config.get("topologyManagerScope")
    return TopologyManagerConfig(
        policy if policy in POLICIES else None,
        scope if scope in SCOPES else None,
        source,
    )


def from_configz(answer: object) -> TopologyManagerConfig:
    """The settings in a ``/configz`` answer; :class:`ConfigError` when it is not one."""
    config = answer.get("kubeletconfig") if isinstance(answer, Mapping) else None
    if not isinstance(config, Mapping):
        raise ConfigError("the kubelet's /configz answer has no 'kubeletconfig' mapping")
    return from_kubelet_config(config, "configz")


def read_configz(api: KubeApi, node: str) -> TopologyManagerConfig:
    """Ask the kubelet of ``node`` through the API server's node proxy."""
    if not is_node_name(node):
        raise ConfigError(f"{node[:80]!r} is not a valid node name")
    return from_configz(api.get(f"/api/v1/nodes/{urllib.parse.quote(node)}/proxy/configz"))


def read_config_file(path: Path) -> TopologyManagerConfig:
    """The settings of a kubelet configuration file; :class:`ConfigError` when unreadable."""
    where = f"kubelet configuration {path}"
    config = load_yaml_mapping(path, MAX_CONFIG_FILE, where, "a KubeletConfiguration")
    if config.get("kind") != "KubeletConfiguration":
        raise ConfigError(f"{where}: not a KubeletConfiguration")
    return from_kubelet_config(config, str(path))
