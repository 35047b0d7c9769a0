"""Actuators: resource-manager clients and the applier, the only code that acts.

Backends: ``dry-run`` (the default: print the calls), ``sim`` (the simulator's API at one
URL), ``agent`` (a node agent per node, ``{node}`` in the URL) and ``local`` (this host:
affinity, cpusets, migrate_pages; see :mod:`.local`). ``kubernetes`` is not implemented yet.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from toposcope.advisor.actuators.applier import Applier, Outcome, inverse_request
from toposcope.advisor.actuators.dry_run import DryRunResourceManager
from toposcope.advisor.actuators.http import AgentResourceManager, HttpResourceManager
from toposcope.advisor.actuators.local import local_resource_manager
from toposcope.errors import ConfigError
from toposcope.resources import ResourceManager
from toposcope.tokens import load_token

BACKENDS = ("dry-run", "sim", "agent", "local")


def read_token(path: str | Path | None) -> str | None:
    """The bearer token in ``path`` (surrounding whitespace removed); ``None`` without a path."""
    return None if path is None else load_token(path)


def make_resource_manager(
    backend: str,
    *,
    url: str | None = None,
    token: str | None = None,
    nodes: Iterable[str] = (),
    out: TextIO | None = None,
    timeout: float = 30.0,
) -> ResourceManager:
    """The resource manager for ``backend`` (``ConfigError`` for missing options)."""
    if backend == "dry-run":
        return DryRunResourceManager(out)
    if backend not in BACKENDS:
        raise ConfigError(f"unknown resource manager {backend!r}; known: {', '.join(BACKENDS)}")
    if backend == "local":
        return local_resource_manager()
    if not url:
        raise ConfigError(f"--resource-manager {backend} needs --rm-url")
    if backend == "agent":
        return AgentResourceManager(url, token, nodes, timeout=timeout)
    return HttpResourceManager(url, token, timeout=timeout)


__all__ = [
    "BACKENDS",
    "AgentResourceManager",
    "Applier",
    "DryRunResourceManager",
    "HttpResourceManager",
    "Outcome",
    "inverse_request",
    "local_resource_manager",
    "make_resource_manager",
    "read_token",
]
