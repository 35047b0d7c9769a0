"""The ``dry-run`` resource manager: prints each call it would make and changes nothing.

It is a backend like any other (:class:`toposcope.rm.base.BaseResourceManager`): requests
are checked the same way, a repeated request is answered with its first (``pending``)
action without being printed again, and a ``request_id`` reused for another request is a 409.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from toposcope.rm import (
    ActionRequest,
    ActionState,
    ActionStatus,
    BaseResourceManager,
    NodeView,
    WorkloadView,
    to_json,
)


class DryRunResourceManager(BaseResourceManager):
    """Implements the resource-manager protocol by printing ``POST /actions`` bodies."""

    def __init__(self, out: TextIO | None = None) -> None:
        super().__init__()
        self.out = out if out is not None else sys.stdout
        self.calls: list[ActionRequest] = []

    def nodes(self) -> list[NodeView]:
        """No nodes: a dry run knows nothing beyond the report."""
        return []

    def workloads(self) -> list[WorkloadView]:
        """No workloads (so no before-state is recorded)."""
        return []

    def _carry_out(self, request: ActionRequest) -> ActionState:
        """Print the call and answer "pending" without doing anything."""
        self.calls.append(request)
        body = json.dumps(to_json(request), sort_keys=True)
        self.out.write(f"dry-run: POST /api/v1/actions {body}\n")
        return ActionState(f"dry-run:{request.request_id}", request, ActionStatus.PENDING)
