"""The placement gate's admission decision: an AdmissionReview in, an AdmissionReview out.

The API server sends a mutating webhook an ``admission.k8s.io/v1`` AdmissionReview for each
pod it is about to create; the answer allows the pod and, for pods that opted in, carries a
base64 JSONPatch (RFC 6902) adding the ``toposcope.io/placement`` scheduling gate, so the
scheduler leaves the pod pending until the advisor chooses its node and removes the gate.

A pod gets the gate when all of these hold, else it is allowed unchanged:

* the request is a ``CREATE`` of a core ``v1`` ``Pod`` (a gate can only be set at creation:
  the API server refuses adding one later);
* the pod carries the label ``toposcope.io/placement: gate`` (a label, not an annotation, so
  that the MutatingWebhookConfiguration's ``objectSelector`` sends only those pods here);
* it is not bound yet (no ``spec.nodeName``: the API server rejects gates on a bound pod);
* its namespace is not ``kube-system``;
* it does not carry the gate already (the answer is the same for the same pod: idempotent
  when the API server calls the webhook again, ``reinvocationPolicy: IfNeeded``).

A review that is not one (wrong ``apiVersion``/``kind``, no ``request.uid``, a pod that is not
an object...) raises :class:`AdmissionError` with a message naming the field, which the
server answers with 400.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toposcope.kube.annotations import PLACEMENT_GATE

#: the label that opts a pod in, and its value
OPT_IN_LABEL = PLACEMENT_GATE
OPT_IN_VALUE = "gate"
#: namespaces whose pods are never gated
EXEMPT_NAMESPACES = frozenset({"kube-system"})
#: the AdmissionReview version the webhook speaks
REVIEW_API_VERSION = "admission.k8s.io/v1"


class AdmissionError(ValueError):
    """A request body that is not a usable AdmissionReview; the message says what is wrong."""


class _Kind(BaseModel):
    """The group, version and kind of the object under review."""

    model_config = ConfigDict(extra="ignore")
    group: str
    version: str
    kind: str


class AdmissionRequest(BaseModel):
    """The fields of ``AdmissionReview.request`` the decision reads (the rest is ignored)."""

    model_config = ConfigDict(extra="ignore")
    uid: Annotated[str, Field(min_length=1, max_length=256)]
    kind: _Kind
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    namespace: Annotated[str, Field(max_length=63)] = ""
    object: dict[str, Any] | None = None


class _Review(BaseModel):
    """An ``admission.k8s.io/v1`` AdmissionReview as the API server sends it."""

    model_config = ConfigDict(extra="ignore")
    apiVersion: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


def _problems(error: ValidationError) -> str:
    """Pydantic's complaints as ``field.path: message`` pairs."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(body)'}: {e['msg']}" for e in error.errors()
    )


def parse_review(body: object) -> AdmissionRequest:
    """The request of an AdmissionReview (:class:`AdmissionError` naming what is wrong)."""
    try:
        return _Review.model_validate(body).request
    except ValidationError as exc:
        message = f"not an {REVIEW_API_VERSION} AdmissionReview: {_problems(exc)}"
        raise AdmissionError(message) from None


def _section(pod: dict[str, Any], key: str) -> dict[str, Any]:
    value = pod.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AdmissionError(f"request.object.{key} is not an object")
    return value


def gate_patch(request: AdmissionRequest) -> list[dict[str, Any]]:
    """The JSONPatch operations the pod under review needs (empty: leave it as it is)."""
    kind = request.kind
    if (kind.group, kind.version, kind.kind) != ("", "v1", "Pod") or request.operation != "CREATE":
        return []
    pod = request.object
    if pod is None:
        raise AdmissionError("request.object is missing from a CREATE of a Pod")
    labels = _section(pod, "metadata").get("labels") or {}
    if not isinstance(labels, dict) or labels.get(OPT_IN_LABEL) != OPT_IN_VALUE:
        return []
    namespace = request.namespace or str(_section(pod, "metadata").get("namespace") or "")
    spec = _section(pod, "spec")
    if namespace in EXEMPT_NAMESPACES or spec.get("nodeName"):
        return []
    gates = spec.get("schedulingGates")
    if gates is None:
        return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": PLACEMENT_GATE}]}]
    if not isinstance(gates, list):
        raise AdmissionError("request.object.spec.schedulingGates is not a list")
    if any(isinstance(g, dict) and g.get("name") == PLACEMENT_GATE for g in gates):
        return []
    return [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": PLACEMENT_GATE}}]


def review_answer(body: object) -> dict[str, Any]:
    """The AdmissionReview that answers ``body``: allowed, with the gate patch if any."""
    request = parse_review(body)
    response: dict[str, Any] = {"uid": request.uid, "allowed": True}
    patch = gate_patch(request)
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": response}


__all__ = [
    "EXEMPT_NAMESPACES",
    "OPT_IN_LABEL",
    "OPT_IN_VALUE",
    "AdmissionError",
    "AdmissionRequest",
    "gate_patch",
    "parse_review",
    "review_answer",
]
