"""Actuators: resource-manager clients and the applier, the only code that acts.

Backends: ``dry-run`` (the default: print the calls), ``sim`` (the simulator's API at one
URL), ``agent`` (a node agent per node, at the endpoints the operator allowed: see
:mod:`.endpoints`) and ``local`` (this host:
affinity, cpusets, migrate_pages; see :mod:`.local`). ``kubernetes`` is not implemented yet.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from toposcope.advisor.actuators.allowlist import resolver_from_options
from toposcope.advisor.actuators.applier import Applier, Outcome, inverse_request
from toposcope.advisor.actuators.dry_run import DryRunResourceManager
from toposcope.advisor.actuators.endpoints import EndpointResolver
from toposcope.advisor.actuators.http import AgentResourceManager, HttpResourceManager
from toposcope.advisor.actuators.local import local_resource_manager
from toposcope.errors import ConfigError
from toposcope.resources import ResourceManager
from toposcope.tokens import load_token

BACKENDS = ("dry-run", "sim", "agent", "local")


def read_token(path: str | Path | None, allow_insecure: bool = False) -> str | None:
    """The bearer token in ``path`` (surrounding whitespace removed); ``None`` without a path."""
    return None if path is None else load_token(path, allow_insecure=allow_insecure)


def make_resource_manager(
    backend: str,
    *,
    url: str | None = None,
    token: str | None = None,
    nodes: Iterable[str] = (),
    out: TextIO | None = None,
    timeout: float = 30.0,
    agents: EndpointResolver | None = None,
) -> ResourceManager:
    """The resource manager for ``backend`` (``ConfigError`` for missing options).

    ``agents`` is the allow-list of node agents the ``agent`` backend may call (see
    :func:`~.endpoints.resolver_from_options`).
    """
    if backend == "dry-run":
        return DryRunResourceManager(out)
    if backend not in BACKENDS:
        raise ConfigError(f"unknown resource manager {backend!r}; known: {', '.join(BACKENDS)}")
    if backend == "local":
        return local_resource_manager()
    if backend == "agent":
        if agents is None:
            agents = resolver_from_options(url=url, url_map=None, endpoints=None, token=token)
        return AgentResourceManager(agents, nodes, timeout=timeout)
    if not url:
        raise ConfigError(f"--resource-manager {backend} needs --rm-url")
    return HttpResourceManager(url, token, timeout=timeout)


__all__ = [
    "BACKENDS",
    "AgentResourceManager",
    "Applier",
    "DryRunResourceManager",
    "EndpointResolver",
    "HttpResourceManager",
    "Outcome",
    "inverse_request",
    "local_resource_manager",
    "make_resource_manager",
    "read_token",
    "resolver_from_options",
]
