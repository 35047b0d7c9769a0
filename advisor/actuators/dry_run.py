"""The ``dry-run`` resource manager: prints each call it would make and changes nothing."""

from __future__ import annotations

import json
import sys
from typing import TextIO

from toposcope.advisor.actuators.http import request_body
from toposcope.resources import (
    ActionRequest,
    ActionState,
    ActionStatus,
    NodeView,
    ResourceManagerError,
    WorkloadView,
)


class DryRunResourceManager:
    """Implements the resource-manager protocol by printing ``POST /actions`` bodies."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out if out is not None else sys.stdout
        self.calls: list[ActionRequest] = []

    def nodes(self) -> list[NodeView]:
        """No nodes: a dry run knows nothing beyond the report."""
        return []

    def workloads(self) -> list[WorkloadView]:
        """No workloads (so no before-state is recorded)."""
        return []

    def apply(self, request: ActionRequest) -> ActionState:
        """Print the call and answer "pending" without doing anything."""
        self.calls.append(request)
        body = json.dumps(request_body(request), sort_keys=True)
        self.out.write(f"dry-run: POST /api/v1/actions {body}\n")
        return ActionState(f"dry-run:{request.request_id}", request, ActionStatus.PENDING)

    def action(self, action_id: str) -> ActionState:
        """A dry run keeps no actions."""
        raise ResourceManagerError(f"dry run: no action {action_id}", 404)
