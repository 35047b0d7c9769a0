"""Steering and its undoing: the node affinity toposcope narrows, and the record it keeps.

Node affinity is only ever **narrowed**: the expression ``kubernetes.io/hostname In [node]``
is added to every required node selector term (terms are ORed, expressions ANDed), or
becomes the one term when there is none. That is the only change the API server allows on a
gated pod's affinity (KEP-3838, ``pkg/apis/core/validation``), and on an owner's pod
template it keeps every constraint the user wrote.

Whatever toposcope changes on an owner (Deployment, StatefulSet, Kubeflow Notebook) it
records in the owner's ``toposcope.io/undo`` annotation as JSON: the request, the workload
(``namespace/pod``), what was done (``steer``, ``scale`` or ``stop``) and what was there
before (the template's affinity, the replicas). A revert in another process finds the
record by workload and restores what it says; one record per owner at a time.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass
from typing import Any

from toposcope.kube.annotations import HOSTNAME_LABEL, UNDO

STEER = "steer"
SCALE = "scale"
STOP = "stop"


def narrowed(affinity: dict[str, Any] | None, node: str) -> dict[str, Any]:
    """``affinity`` with every required node selector term narrowed to ``node``."""
    result = copy.deepcopy(affinity) if affinity else {}
    expression = {"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}
    node_affinity = result.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term["matchExpressions"] = [*(term.get("matchExpressions") or []), expression]
    required["nodeSelectorTerms"] = terms
    return result


@dataclass(frozen=True)
class UndoRecord:
    """What toposcope changed on an owner and what was there before (module docstring)."""

    request_id: str
    workload: str
    action: str
    node: str
    affinity: dict[str, Any] | None = None
    replicas: int | None = None

    def to_annotation(self) -> str:
        """The record as the annotation's JSON text."""
        return json.dumps(asdict(self), sort_keys=True)


def record_of(owner: dict[str, Any]) -> UndoRecord | None:
    """The record on ``owner``; ``None`` when there is none or it is not toposcope's JSON."""
    text = (owner.get("metadata", {}).get("annotations") or {}).get(UNDO)
    if not isinstance(text, str):
        return None
    try:
        data = json.loads(text)
        record = UndoRecord(**data)
    except (ValueError, TypeError):
        return None
    return record if isinstance(record.workload, str) else None
