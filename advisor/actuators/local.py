"""The ``local`` backend: this host's processes and cgroups, changed by the advisor itself.

The code that acts lives on the node side, in :mod:`toposcope.exporters.local_rm` (the node
agent serves the same object over HTTP). The advisor otherwise talks to the exporters only
over the wire, so this bridge imports that module when ``--resource-manager local`` is
chosen, never at start-up.
"""

from __future__ import annotations

import importlib
from typing import cast

from toposcope.resources import ResourceManager

LOCAL_MODULE = "toposcope.exporters.local_rm"


def local_resource_manager(node_name: str | None = None) -> ResourceManager:
    """A :class:`~toposcope.exporters.local_rm.LocalResourceManager` for this host.

    ``node_name`` is the node it reports (default: the hostname).
    """
    module = importlib.import_module(LOCAL_MODULE)
    return cast(ResourceManager, module.LocalResourceManager(node_name=node_name))
