"""The resource-manager contract: one definition for its servers, backends, clients and fakes.

- :mod:`~toposcope.rm.models`: nodes, workloads, allocations, action requests and actions;
- :mod:`~toposcope.rm.fields`: the rules their fields follow (names, ids, bounded CPU lists);
- :mod:`~toposcope.rm.states`: the action state machine;
- :mod:`~toposcope.rm.validation`: checking what crosses a boundary, writing JSON;
- :mod:`~toposcope.rm.idempotency`: the repeat rule (same ``request_id``);
- :mod:`~toposcope.rm.base`: what every backend inherits.

Only resource-manager users import it (it needs pydantic); the exporter does not.
"""

from __future__ import annotations

from toposcope.rm.base import ActionServer, Applied, BaseResourceManager
from toposcope.rm.errors import (
    RETRY_LATER,
    ResourceManagerError,
    RetryLaterError,
    is_retry_later,
)
from toposcope.rm.idempotency import ActionBook, request_key, same_request
from toposcope.rm.models import (
    ActionKind,
    ActionRequest,
    ActionState,
    Allocation,
    NodeView,
    ResourceManager,
    WorkloadState,
    WorkloadView,
)
from toposcope.rm.states import (
    FINAL_STATUSES,
    TRANSITIONS,
    ActionStatus,
    IllegalTransitionError,
    can_move,
    check_transition,
)
from toposcope.rm.validation import (
    InvalidAnswerError,
    check_request,
    parse_answer,
    parse_request,
    require_kind_fields,
    to_json,
)

__all__ = [
    "FINAL_STATUSES",
    "RETRY_LATER",
    "TRANSITIONS",
    "ActionBook",
    "ActionKind",
    "ActionRequest",
    "ActionServer",
    "ActionState",
    "ActionStatus",
    "Allocation",
    "Applied",
    "BaseResourceManager",
    "IllegalTransitionError",
    "InvalidAnswerError",
    "NodeView",
    "ResourceManager",
    "ResourceManagerError",
    "RetryLaterError",
    "WorkloadState",
    "WorkloadView",
    "can_move",
    "check_request",
    "check_transition",
    "is_retry_later",
    "parse_answer",
    "parse_request",
    "request_key",
    "require_kind_fields",
    "same_request",
    "to_json",
]
