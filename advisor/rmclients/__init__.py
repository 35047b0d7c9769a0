"""Clients of resource managers: the backends the advisor applies through.

Backends: ``dry-run`` (the default: print the calls), ``sim`` (the simulator's API at one
URL), ``agent`` (a node agent per node, at the endpoints the operator allowed: see
:mod:`.endpoints`) and ``local`` (this host:
affinity, cpusets, migrate_pages; see :mod:`.local`). ``kubernetes`` is not implemented yet.

:data:`BACKENDS` is the explicit table of the backends the advisor builds itself (name ->
factory). Backends whose code lives in other parts (``local``: the node agent's; ``slurm``;
``kubernetes``) are found by name under the ``toposcope.resource_managers`` entry points
(:mod:`.local`), because the advisor must not import those parts (tests/core/test_layering.py);
entry points are for such backends only, and they may declare their options under
``toposcope.resource_manager_options`` (a function ``(parser, *, suppress)`` adding options
named ``--<backend>-...``): :func:`backend_names` lists them for the command line,
:func:`add_backend_options` declares their options and :func:`backend_options` hands the
parsed values to the backend's factory.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TextIO

from toposcope.advisor.rmclients.allowlist import resolver_from_options
from toposcope.advisor.rmclients.clienttls import ClientTls
from toposcope.advisor.rmclients.dry_run import DryRunResourceManager
from toposcope.advisor.rmclients.endpoints import EndpointResolver
from toposcope.advisor.rmclients.http import AgentResourceManager, HttpResourceManager
from toposcope.advisor.rmclients.local import (
    ENTRY_POINT_GROUP,
    local_resource_manager,
    registered_backend,
)
from toposcope.auth.tokens import Token, TokenFile, load_token
from toposcope.errors import ConfigError
from toposcope.rm import ResourceManager


@dataclass(frozen=True)
class BackendSettings:
    """What :func:`make_resource_manager` was given, for a backend's factory to pick from."""

    url: str | None
    token: Token | None
    nodes: Iterable[str]
    out: TextIO | None
    timeout: float
    agents: EndpointResolver | None
    tls: ClientTls | None


BackendFactory = Callable[[BackendSettings], ResourceManager]


def _dry_run(settings: BackendSettings) -> ResourceManager:
    return DryRunResourceManager(settings.out)


def _local(settings: BackendSettings) -> ResourceManager:
    return local_resource_manager()


def _agent(settings: BackendSettings) -> ResourceManager:
    agents = settings.agents
    if agents is None:
        agents = resolver_from_options(
            url=settings.url, url_map=None, endpoints=None, token=settings.token
        )
    return AgentResourceManager(agents, settings.nodes, timeout=settings.timeout, tls=settings.tls)


def _sim(settings: BackendSettings) -> ResourceManager:
    if not settings.url:
        raise ConfigError("--resource-manager sim needs --rm-url")
    return HttpResourceManager(
        settings.url, settings.token, timeout=settings.timeout, tls=settings.tls
    )


#: the backends the advisor builds itself, in the order ``--resource-manager`` lists them
#: (``local`` runs the node agent's code, found through its entry point)
BACKENDS: Mapping[str, BackendFactory] = {
    "dry-run": _dry_run,
    "sim": _sim,
    "agent": _agent,
    "local": _local,
}

#: entry points declaring a registered backend's command-line options
OPTIONS_GROUP = "toposcope.resource_manager_options"


def registered_names() -> tuple[str, ...]:
    """The backends other parts registered (``local``, ``slurm``...), sorted."""
    return tuple(sorted({e.name for e in entry_points(group=ENTRY_POINT_GROUP)}))


def backend_names() -> tuple[str, ...]:
    """Every backend ``--resource-manager`` accepts: :data:`BACKENDS`, then registered ones."""
    return tuple(BACKENDS) + tuple(n for n in registered_names() if n not in BACKENDS)


def add_backend_options(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """Declare the options of every registered backend that has some (``--slurm-url``...)."""
    declared = {entry.name: entry for entry in entry_points(group=OPTIONS_GROUP)}
    for name in sorted(declared):
        declared[name].load()(parser, suppress=suppress)


def backend_options(backend: str, args: argparse.Namespace) -> dict[str, object]:
    """The parsed options of a registered ``backend`` (``slurm_*``), for its factory."""
    prefix = f"{backend.replace('-', '_')}_"
    return {
        key: value
        for key, value in vars(args).items()
        if key.startswith(prefix) or key == "allow_insecure_token_file"
    }


def read_token(path: str | Path | None, allow_insecure: bool = False) -> str | None:
    """The bearer token in ``path`` (surrounding whitespace removed); ``None`` without a path."""
    return None if path is None else load_token(path, allow_insecure=allow_insecure)


def rotating_token(path: str | Path | None, allow_insecure: bool = False) -> TokenFile | None:
    """The bearer token in ``path``, read again whenever the file changes (a projected
    ServiceAccount token the kubelet rotates); ``None`` without a path. A long-running client
    (the advisor service) uses this, so it never sends a token the kubelet has replaced.
    """
    return None if path is None else TokenFile(path, allow_insecure=allow_insecure)


def make_resource_manager(
    backend: str,
    *,
    url: str | None = None,
    token: Token | None = None,
    nodes: Iterable[str] = (),
    out: TextIO | None = None,
    timeout: float = 30.0,
    agents: EndpointResolver | None = None,
    options: Mapping[str, object] | None = None,
    tls: ClientTls | None = None,
) -> ResourceManager:
    """The resource manager for ``backend`` (``ConfigError`` for missing options).

    ``agents`` is the allow-list of node agents the ``agent`` backend may call (see
    :func:`~.endpoints.resolver_from_options`); ``options`` are what a registered backend's
    factory gets (:func:`backend_options`); ``tls`` how the HTTP backends connect.
    """
    factory = BACKENDS.get(backend)
    if factory is not None:
        return factory(BackendSettings(url, token, nodes, out, timeout, agents, tls))
    if backend in registered_names():
        return registered_backend(backend, **dict(options or {}))
    known = ", ".join(backend_names())
    raise ConfigError(f"unknown resource manager {backend!r}; known: {known}")


__all__ = [
    "BACKENDS",
    "OPTIONS_GROUP",
    "AgentResourceManager",
    "BackendFactory",
    "BackendSettings",
    "ClientTls",
    "DryRunResourceManager",
    "EndpointResolver",
    "HttpResourceManager",
    "add_backend_options",
    "backend_names",
    "backend_options",
    "local_resource_manager",
    "make_resource_manager",
    "read_token",
    "registered_names",
    "resolver_from_options",
    "rotating_token",
]
