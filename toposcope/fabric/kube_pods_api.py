"""The running pods of a cluster, read from the Kubernetes API for ``toposcope fabric jobs``.

``GET /api/v1/pods`` (or ``/api/v1/namespaces/<ns>/pods``) with
``fieldSelector=status.phase=Running``, in pages of :data:`POD_PAGE` (``limit`` and
``continue``, as ``kubectl`` pages), at most :data:`MAX_POD_PAGES` pages; each answer is
bounded by the client (:class:`~toposcope.kubeapi.client.KubeApi`). Only reads: the RBAC
needed is ``list`` on ``pods``. The pods are checked by :mod:`toposcope.fabric.kube_jobs`.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from toposcope.identity.names import is_object_name
from toposcope.kubeapi.client import KubeApi, KubeApiError, KubeApiStatusError, continue_token

POD_PAGE = 500
MAX_POD_PAGES = 2_000


def list_running_pods(api: KubeApi, namespace: str | None = None) -> list[Any]:
    """Every running pod (of ``namespace``, else of all namespaces), page by page."""
    if namespace is not None and not is_object_name(namespace):
        raise KubeApiError(f"namespace {namespace[:80]!r} is not a Kubernetes name")
    base = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    pods: list[Any] = []
    token = ""
    for _ in range(MAX_POD_PAGES):
        query = {"fieldSelector": "status.phase=Running", "limit": str(POD_PAGE)}
        if token:
            query["continue"] = token
        path = f"{base}?{urllib.parse.urlencode(query)}"
        try:
            answer = api.get(path)
        except KubeApiStatusError as exc:
            if exc.code in (401, 403):
                raise KubeApiError(
                    f"Kubernetes API {path}: {exc.code}: the credentials need 'list' on 'pods'"
                ) from None
            raise
        items = answer.get("items") if isinstance(answer, Mapping) else None
        if not isinstance(items, list):
            raise KubeApiError(f"Kubernetes API {path}: the answer has no list of items")
        pods.extend(items)
        token = continue_token(answer, path)
        if not token:
            return pods
    raise KubeApiError(f"Kubernetes API {base}: more than {MAX_POD_PAGES} pages of pods")
