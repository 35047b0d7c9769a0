"""The resource-manager model under its first name, kept so that existing imports still work.

The contract lives in :mod:`toposcope.rm` (models, validation, the repeat rule, the action
state machine, the base every backend inherits); this module only re-exports its types.
"""

from __future__ import annotations

from toposcope.rm import (
    ActionKind,
    ActionRequest,
    ActionState,
    ActionStatus,
    Allocation,
    NodeView,
    ResourceManager,
    ResourceManagerError,
    WorkloadState,
    WorkloadView,
)

__all__ = [
    "ActionKind",
    "ActionRequest",
    "ActionState",
    "ActionStatus",
    "Allocation",
    "NodeView",
    "ResourceManager",
    "ResourceManagerError",
    "WorkloadState",
    "WorkloadView",
]
