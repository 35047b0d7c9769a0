"""Agent endpoints in Kubernetes: each node's agent pod, as the API server lists it.

The agents' headless Service has EndpointSlices that the API server fills with each ready
agent pod's IP and the node it runs on; :class:`KubernetesEndpoints` maps node names to those
IPs (refreshed at most every ``ttl`` seconds) and builds the URL from the ``--rm-url``
template's scheme, port and path. It reads the API as the pod's service account, through the
core's :mod:`toposcope.kubeapi.client`.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from toposcope.advisor.rmclients.endpoints import AgentEndpoint, UrlTemplate
from toposcope.auth.tokens import Token
from toposcope.errors import ConfigError
from toposcope.identity.names import is_node_name
from toposcope.kubeapi.client import SERVICE_ACCOUNT_DIR, KubeApiError, in_cluster

LOG = logging.getLogger("toposcope.advisor.endpoints")

Fetch = Callable[[str], Any]


class KubernetesEndpoints:
    """The agent DaemonSet's Service endpoints: node name -> ready agent pod IP.

    Read from ``discovery.k8s.io/v1`` EndpointSlices labelled with the Service's name (the API
    server, not the pods, says which node each agent runs on), refreshed at most every
    ``ttl`` seconds. The URL keeps the ``--rm-url`` template's scheme, port and path.
    """

    def __init__(
        self,
        namespace: str,
        service: str,
        template: UrlTemplate,
        token: Token | None,
        fetch: Fetch,
        *,
        ttl: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.namespace = namespace
        self.service = service
        self.template = template
        self.token = token
        self.fetch = fetch
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._ips: dict[str, str] = {}

    def _path(self) -> str:
        selector = urllib.parse.quote(f"kubernetes.io/service-name={self.service}", safe="")
        namespace = urllib.parse.quote(self.namespace, safe="")
        return (
            f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
            f"?labelSelector={selector}"
        )

    def _refresh(self) -> dict[str, str]:
        with self._lock:
            now = self.clock()
            if self._read_at is not None and now - self._read_at < self.ttl:
                return self._ips
            self._ips = node_ips_from_slices(self.fetch(self._path()))
            self._read_at = now
            return self._ips

    def resolve(self, node: str) -> AgentEndpoint | None:
        """The agent pod of ``node``, when the API server lists a ready one."""
        ip = self._refresh().get(node)
        return None if ip is None else AgentEndpoint(node, self.template.for_host(ip), self.token)

    def allowed_nodes(self) -> list[str]:
        """Nodes with a ready agent pod."""
        return sorted(self._refresh())


def node_ips_from_slices(data: object) -> dict[str, str]:
    """``{node name: pod IP}`` of the ready endpoints in an EndpointSliceList answer.

    Entries with an invalid node name or address are skipped with a warning: the API server is
    trusted, but not to the point of putting anything it returns into a URL unchecked.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("items"), list):
        raise ConfigError("Kubernetes answered the EndpointSlice list without items")
    found: dict[str, str] = {}
    for item in data["items"]:
        endpoints = item.get("endpoints") if isinstance(item, Mapping) else None
        for endpoint in endpoints or []:
            if not isinstance(endpoint, Mapping):
                continue
            conditions = endpoint.get("conditions") or {}
            if isinstance(conditions, Mapping) and conditions.get("ready") is False:
                continue
            node = endpoint.get("nodeName")
            addresses = endpoint.get("addresses") or []
            address = addresses[0] if isinstance(addresses, list) and addresses else None
            if not is_node_name(node) or not _is_ip(address):
                LOG.warning("skipping agent endpoint %r on node %r", address, node)
                continue
            assert isinstance(node, str) and isinstance(address, str)
            found[node] = address
    return found


def _is_ip(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def in_cluster_fetch(
    account_dir: Path = SERVICE_ACCOUNT_DIR,
    api_url: str | None = None,
    timeout: float = 10.0,
) -> Fetch:
    """GET from the API server as the pod's service account (the core's
    :func:`~toposcope.kubeapi.client.in_cluster`: its token and CA bundle, bounded answers).

    ``api_url`` defaults to ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``.
    """
    try:
        return in_cluster(account_dir, api_url, timeout).get
    except KubeApiError as exc:
        raise ConfigError(f"--rm-endpoints kubernetes: {exc}") from None


def parse_kubernetes_spec(spec: str) -> tuple[str, str]:
    """``(namespace, service)`` from ``kubernetes:NAMESPACE/SERVICE``."""
    _, sep, rest = spec.partition("kubernetes:")
    namespace, slash, service = rest.partition("/")
    if not sep or not slash or not is_node_name(namespace) or not is_node_name(service):
        raise ConfigError(f"--rm-endpoints {spec!r}: expected kubernetes:NAMESPACE/SERVICE")
    return namespace, service
