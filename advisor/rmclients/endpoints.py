"""Where the node agent of a node listens, from sources the operator controls, never from metrics.

Node names reach the advisor through scraped labels, which anyone who can run an exporter can
set. The ``agent`` backend sends its bearer token to the agent of each node it asks, so the
address of that agent must never be derived from a label alone: a label such as
``127.0.0.1:8000/x?`` pasted into ``http://{node}:9848`` would hand the token to another
listener. Here a node's endpoint is *resolved* from an allow-list:

- a map file or inline list (``--rm-url-map``): each allowed node with its URL, optionally its
  own token file, or the node names to combine with an ``--rm-url`` template;
- Kubernetes (``--rm-endpoints kubernetes:NAMESPACE/SERVICE``): the ready endpoints of the
  agent DaemonSet's Service, read from the API server, give each node's agent pod IP.

A node that is not on the list gets no request and no token. Node names are checked against
:mod:`toposcope.identity.names`'s host-name grammar, and URLs are assembled from parsed parts (the
host
slot of a template is replaced by a validated name or IP, never by text substitution).
"""

from __future__ import annotations

import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from toposcope.auth.tokens import Token, TokenFile
from toposcope.boundedread import load_yaml_mapping
from toposcope.errors import ConfigError
from toposcope.identity.names import InvalidNameError, check_node_name, is_node_name
from toposcope.kubeapi.client import check_api_url, url_host

LOG = logging.getLogger("toposcope.advisor.endpoints")

NODE_PLACEHOLDER = "{node}"
MAX_MAP_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class AgentEndpoint:
    """One allowed agent: the node it acts on, its API URL and the token it expects (a
    :class:`~toposcope.auth.tokens.TokenFile` is read again when it changes).
    """

    node: str
    url: str
    token: Token | None = field(default=None, repr=False)


class EndpointResolver(Protocol):
    """Resolves a node to its allowed agent endpoint (``None``: not allowed)."""

    def resolve(self, node: str) -> AgentEndpoint | None:
        """The endpoint of ``node``'s agent, or ``None`` when the operator did not allow one."""

    def allowed_nodes(self) -> list[str]:
        """Every node with an allowed endpoint (for listings that do not name a node)."""


@dataclass(frozen=True)
class UrlTemplate:
    """An agent URL with ``{node}`` as its host, e.g. ``http://{node}:9848/api/v1``.

    Parsed once; :meth:`for_host` puts a validated host name or IP address in the host slot
    and keeps scheme, port and path from the template.
    """

    scheme: str
    port: int | None
    path: str

    @classmethod
    def parse(cls, template: str) -> UrlTemplate:
        """Check ``template`` (``ConfigError`` naming what is wrong)."""
        parts = urllib.parse.urlsplit(template)
        if parts.scheme not in ("http", "https"):
            raise ConfigError(
                f"agent URL template {template!r} must start with http:// or https://"
            )
        if not parts.netloc.startswith(NODE_PLACEHOLDER):
            raise ConfigError(
                f"agent URL template {template!r}: {NODE_PLACEHOLDER} must be the whole host "
                f"(e.g. http://{NODE_PLACEHOLDER}:9848/api/v1)"
            )
        port_text = parts.netloc[len(NODE_PLACEHOLDER) :]
        port: int | None = None
        if port_text:
            if not port_text.startswith(":") or not port_text[1:].isdigit():
                raise ConfigError(f"agent URL template {template!r}: bad port {port_text!r}")
            port = int(port_text[1:])
            if not 0 < port < 65536:
                raise ConfigError(f"agent URL template {template!r}: port {port} out of range")
        if NODE_PLACEHOLDER in parts.path or parts.query or parts.fragment:
            raise ConfigError(
                f"agent URL template {template!r}: no {NODE_PLACEHOLDER}, query or fragment "
                "after the host"
            )
        return cls(parts.scheme, port, parts.path)

    def for_host(self, host: str) -> str:
        """The URL with ``host`` (a node name or an IP address) in the host slot."""
        netloc = host_part(host)
        if self.port is not None:
            netloc = f"{netloc}:{self.port}"
        return urllib.parse.urlunsplit((self.scheme, netloc, self.path, "", ""))


def check_agent_url(url: str, where: str) -> str:
    """``url`` when it is a plain ``http(s)://host[:port]/path`` (no credentials or query,
    the core's :func:`~toposcope.kubeapi.client.check_api_url`) with no node placeholder left.
    """
    if NODE_PLACEHOLDER in url:
        raise ConfigError(f"{where}: {url!r} still holds {NODE_PLACEHOLDER}")
    check_api_url(url, where)
    return url


class StaticEndpoints:
    """The allow-list from a map file or an inline ``NODE=URL`` list."""

    def __init__(self, endpoints: Mapping[str, AgentEndpoint]) -> None:
        self.endpoints = dict(endpoints)

    def resolve(self, node: str) -> AgentEndpoint | None:
        """The listed endpoint of ``node``."""
        return self.endpoints.get(node)

    def allowed_nodes(self) -> list[str]:
        """The listed nodes."""
        return sorted(self.endpoints)


def parse_url_map(
    spec: str,
    *,
    template: str | None,
    token: Token | None,
    allow_insecure_token_file: bool = False,
) -> StaticEndpoints:
    """The allow-list ``--rm-url-map`` names: a file, or inline ``NODE=URL[,NODE=URL...]``.

    The file is YAML (or JSON): ``nodes`` is either a list of node names, combined with the
    ``template`` (the file's own ``template`` key, else ``--rm-url``), or a mapping of node
    name to URL or to ``{url, token_file}`` (a per-node token; the others use ``token``).
    """
    if "=" in spec and not Path(spec).exists():
        return _inline_map(spec, token)
    path = Path(spec)
    data = load_yaml_mapping(path, MAX_MAP_BYTES, f"--rm-url-map {path}", "a map of nodes")
    where = str(path)
    unknown = sorted(set(data) - {"template", "nodes"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: template, nodes)")
    file_template = data.get("template", template)
    if file_template is not None and not isinstance(file_template, str):
        raise ConfigError(f"{where}: template: expected a URL with {NODE_PLACEHOLDER}")
    nodes = data.get("nodes")
    endpoints: dict[str, AgentEndpoint] = {}
    if isinstance(nodes, list):
        if file_template is None:
            raise ConfigError(
                f"{where}: nodes is a list of names, so a template (in the file or --rm-url "
                f"with {NODE_PLACEHOLDER}) is needed"
            )
        parsed = UrlTemplate.parse(file_template)
        for i, name in enumerate(nodes):
            node = _node(name, f"{where}: nodes[{i}]")
            endpoints[node] = AgentEndpoint(node, parsed.for_host(node), token)
    elif isinstance(nodes, Mapping):
        for name, value in nodes.items():
            node = _node(name, f"{where}: nodes")
            endpoints[node] = _mapped_endpoint(
                node, value, f"{where}: nodes.{node}", token, allow_insecure_token_file
            )
    else:
        raise ConfigError(f"{where}: nodes: expected a list of node names or a mapping to URLs")
    if not endpoints:
        raise ConfigError(f"{where}: no nodes listed")
    return StaticEndpoints(endpoints)


def _inline_map(spec: str, token: Token | None) -> StaticEndpoints:
    endpoints: dict[str, AgentEndpoint] = {}
    for item in spec.split(","):
        name, sep, url = item.strip().partition("=")
        if not sep:
            raise ConfigError(f"--rm-url-map: {item!r} is not NODE=URL")
        node = _node(name, "--rm-url-map")
        endpoints[node] = AgentEndpoint(node, check_agent_url(url, f"--rm-url-map {node}"), token)
    return StaticEndpoints(endpoints)


def _mapped_endpoint(
    node: str, value: object, where: str, token: Token | None, allow_insecure: bool
) -> AgentEndpoint:
    if isinstance(value, str):
        return AgentEndpoint(node, check_agent_url(value, where), token)
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a URL or {{url, token_file}}")
    unknown = sorted(str(k) for k in set(value) - {"url", "token_file"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: url, token_file)")
    url = value.get("url")
    if not isinstance(url, str):
        raise ConfigError(f"{where}.url: expected a URL")
    token_file = value.get("token_file")
    if token_file is not None:
        if not isinstance(token_file, str):
            raise ConfigError(f"{where}.token_file: expected a file name")
        token = TokenFile(token_file, allow_insecure=allow_insecure)
    return AgentEndpoint(node, check_agent_url(url, f"{where}.url"), token)


def _node(name: object, where: str) -> str:
    try:
        return check_node_name(name)
    except InvalidNameError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def host_part(host: str) -> str:
    """``host`` as a URL host (IPv6 in brackets); ``ConfigError`` unless a host name or IP."""
    return url_host(host)


def nodes_allowed(resolver: EndpointResolver, nodes: Iterable[str]) -> list[str]:
    """The subset of ``nodes`` the resolver allows (others are logged once per call)."""
    allowed: list[str] = []
    refused: list[str] = []
    for node in sorted(set(nodes)):
        (allowed if is_node_name(node) and resolver.resolve(node) else refused).append(node)
    if refused:
        LOG.warning(
            "no allowed agent endpoint for %d node(s), not contacted: %s",
            len(refused),
            ", ".join(repr(n)[:80] for n in refused[:5]),
        )
    return allowed
