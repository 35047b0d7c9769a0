"""Create or update the node's NodeResourceTopology through the API server.

One :meth:`NrtWriter.write` call:

1. reads the object (``GET .../noderesourcetopologies/NAME``);
2. absent: creates it (``POST``); another writer creating it first (409) sends us back to 1;
3. present and another writer's (:func:`~toposcope.exporters.nrt.ownership.other_writer`):
   refuses, and says who owns it;
4. present, ours, and already saying what we would write: nothing is sent;
5. else replaces it (``PUT``) naming the ``metadata.resourceVersion`` read in 1, keeping the
   labels and annotations others added; a 409 (changed since) re-reads once (back to 1).

Every write names toposcope's field manager and asks for strict field validation, so that a
field the CRD does not know is an error rather than silently dropped.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from toposcope.exporters.nrt.builder import GROUP_VERSION
from toposcope.exporters.nrt.ownership import FIELD_MANAGER, other_writer
from toposcope.identity.names import is_node_name
from toposcope.kubeapi.client import KubeApi, KubeApiError, KubeApiStatusError

COLLECTION = f"/apis/{GROUP_VERSION}/noderesourcetopologies"
WRITE_QUERY = urllib.parse.urlencode({"fieldManager": FIELD_MANAGER, "fieldValidation": "Strict"})
#: the fields compared to decide whether an update is needed
_CONTENT = ("attributes", "zones")


class Outcome(StrEnum):
    """What one write did."""

    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    REFUSED = "refused"


class NrtWriter:
    """Writes NodeResourceTopology objects through ``api`` (module docstring)."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        #: why the last write was refused (empty otherwise)
        self.refusal = ""

    def node_uid(self, node: str) -> str:
        """The uid of Node ``node`` (the owner reference needs it)."""
        answer = self.api.get(f"/api/v1/nodes/{_path_name(node)}")
        meta = answer.get("metadata") if isinstance(answer, Mapping) else None
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        if not isinstance(uid, str) or not uid or len(uid) > 128:
            raise KubeApiError(f"Kubernetes API: Node {node!r} answered without a uid")
        return uid

    def write(self, body: Mapping[str, Any]) -> Outcome:
        """Create or update the object ``body`` names; :class:`KubeApiError` on failures."""
        self.refusal = ""
        try:
            return self._attempt(body)
        except KubeApiStatusError as exc:
            if exc.code != 409:
                raise
        return self._attempt(body)

    def _attempt(self, body: Mapping[str, Any]) -> Outcome:
        """Steps 1 to 5 of the module docstring, once."""
        name = body["metadata"]["name"]
        path = f"{COLLECTION}/{_path_name(name)}"
        existing = self._read(path)
        if existing is None:
            self.api.request("POST", f"{COLLECTION}?{WRITE_QUERY}", body)
            return Outcome.CREATED
        owner = other_writer(existing)
        if owner is not None:
            self.refusal = f"NodeResourceTopology {name!r} left alone: {owner}"
            return Outcome.REFUSED
        same = all(existing.get(key) == body.get(key) for key in _CONTENT)
        if same and _owners(existing) == _owners(body):
            return Outcome.UNCHANGED
        self.api.request("PUT", f"{path}?{WRITE_QUERY}", _replacement(existing, body))
        return Outcome.UPDATED

    def _read(self, path: str) -> Mapping[str, Any] | None:
        try:
            answer = self.api.get(path)
        except KubeApiStatusError as exc:
            if exc.code == 404:
                return None
            raise
        if not isinstance(answer, Mapping):
            raise KubeApiError(f"Kubernetes API {path}: answer is not an object")
        return answer


def _path_name(name: str) -> str:
    if not is_node_name(name):
        raise KubeApiError(f"{name[:80]!r} is not a valid node name")
    return urllib.parse.quote(name)


def _owners(obj: Mapping[str, Any]) -> object:
    meta = obj.get("metadata")
    return meta.get("ownerReferences") if isinstance(meta, Mapping) else None


def _replacement(existing: Mapping[str, Any], body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` as a replacement of ``existing``: its resourceVersion, others' labels kept."""
    old = existing.get("metadata")
    old_meta: Mapping[str, Any] = old if isinstance(old, Mapping) else {}
    meta = dict(body["metadata"])
    for key in ("labels", "annotations"):
        kept = old_meta.get(key)
        merged = {**kept} if isinstance(kept, Mapping) else {}
        merged.update(meta.get(key) or {})
        if merged:
            meta[key] = merged
    meta["resourceVersion"] = old_meta.get("resourceVersion")
    return {**body, "metadata": meta}
