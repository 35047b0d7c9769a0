"""Resource-manager backends that live in other parts, found by name at run time.

``--resource-manager local`` acts on the advisor's own host with the node agent's code
(:mod:`toposcope.agent`). The advisor talks to every other part only over the wire and never
imports it; the agent registers its factory under the ``toposcope.resource_managers`` entry
point group (pyproject.toml), which is looked up here when the backend is chosen, never at
start-up. An install without the agent says which extra to add.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import cast

from toposcope.errors import ConfigError
from toposcope.extras import load_with_extra
from toposcope.rm import ResourceManager

ENTRY_POINT_GROUP = "toposcope.resource_managers"
#: backend -> the install extra that brings its libraries
BACKEND_EXTRAS = {"local": "agent", "slurm": "slurm", "kubernetes": "kube"}


def registered_backend(name: str, **options: object) -> ResourceManager:
    """The resource manager the entry point ``name`` of the group builds with ``options``."""
    found = entry_points(group=ENTRY_POINT_GROUP, name=name)
    if not found:
        raise ConfigError(
            f"--resource-manager {name}: no such backend is installed (the local backend "
            "comes with the node agent: pip install 'toposcope[agent]')"
        )
    entry = next(iter(found))
    factory = load_with_extra(
        entry.load, f"--resource-manager {name}", BACKEND_EXTRAS.get(name, "all"), ConfigError
    )
    return cast(ResourceManager, factory(**options))


def local_resource_manager(node_name: str | None = None) -> ResourceManager:
    """This host's resource manager (the node agent's code, in-process).

    ``node_name`` is the node it reports (default: the hostname).
    """
    return registered_backend("local", node_name=node_name)
