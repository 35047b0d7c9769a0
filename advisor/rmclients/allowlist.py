"""The agent allow-list the ``agent`` backend's options describe: a map, or Kubernetes.

See :mod:`.endpoints` for why node names alone never choose where the agents' token goes.
"""

from __future__ import annotations

from toposcope.advisor.rmclients.endpoints import (
    NODE_PLACEHOLDER,
    EndpointResolver,
    UrlTemplate,
    parse_url_map,
)
from toposcope.advisor.rmclients.k8s_endpoints import (
    Fetch,
    KubernetesEndpoints,
    in_cluster_fetch,
    parse_kubernetes_spec,
)
from toposcope.auth.tokens import Token
from toposcope.errors import ConfigError


def resolver_from_options(
    *,
    url: str | None,
    url_map: str | None,
    endpoints: str | None,
    token: Token | None,
    allow_insecure_token_file: bool = False,
    fetch: Fetch | None = None,
) -> EndpointResolver:
    """The agent allow-list the ``agent`` backend's options describe (``ConfigError`` if none)."""
    if url_map and endpoints:
        raise ConfigError("give either --rm-url-map or --rm-endpoints, not both")
    if url_map:
        return parse_url_map(
            url_map,
            template=url,
            token=token,
            allow_insecure_token_file=allow_insecure_token_file,
        )
    if endpoints:
        namespace, service = parse_kubernetes_spec(endpoints)
        if not url:
            raise ConfigError(
                f"--rm-endpoints needs --rm-url with {NODE_PLACEHOLDER} for the scheme, port "
                "and path, e.g. http://{node}:9848/api/v1"
            )
        return KubernetesEndpoints(
            namespace, service, UrlTemplate.parse(url), token, fetch or in_cluster_fetch()
        )
    raise ConfigError(
        "--resource-manager agent needs an allow-list of agents: --rm-url-map FILE (or "
        "NODE=URL,...), or --rm-endpoints kubernetes:NAMESPACE/SERVICE; node names from "
        "metrics alone never choose where the token is sent"
    )
