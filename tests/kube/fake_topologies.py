"""The contract server with Kueue ``Topology`` objects and node lists as a client pages them.

Only what :mod:`toposcope.fabric.kubernetes_api` relies on, each rule from its upstream source:

* **Discovery** (k8s.io/apiserver ``pkg/endpoints/discovery/group.go``): ``GET /apis/GROUP``
  answers an ``APIGroup`` with the served ``versions`` and the ``preferredVersion``; a group
  that is not installed is 404.
* **Topology** (kubernetes-sigs/kueue ``apis/kueue/v1beta1/topology_types.go``, cluster
  scoped, plural ``topologies``): served only in the versions :attr:`served` names (404 for
  another, as for a CRD version that is not served); get by name (404 ``NotFound``) and list.
* **Node lists** (``staging/src/k8s.io/apiserver/pkg/storage/...`` ``limit``/``continue``;
  ``labels.Parse`` for ``labelSelector``): equality (``k=v``, ``k==v``, ``k!=v``) and
  existence (``k``, ``!k``) requirements joined by commas; at most ``limit`` items per page,
  in name order, with ``metadata.continue`` naming where the next page starts.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from tests.kube.fake_apiserver import ApiFailure, FakeApiServer

GROUP = "kueue.x-k8s.io"
_TOPOLOGY = re.compile(
    r"^/apis/kueue\.x-k8s\.io/(?P<version>v[0-9a-z]+)/topologies(?:/(?P<name>[a-z0-9.-]+))?$"
)


def _selected(selector: str, labels: dict[str, str]) -> bool:
    """Whether ``labels`` meet every requirement of ``selector`` (module docstring)."""
    for requirement in filter(None, (r.strip() for r in selector.split(","))):
        if "!=" in requirement:
            key, value = requirement.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in requirement:
            key, value = requirement.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif requirement.startswith("!"):
            if requirement[1:] in labels:
                return False
        elif requirement not in labels:
            return False
    return True


@dataclass
class TopologyApiServer(FakeApiServer):
    """:class:`FakeApiServer` serving Kueue Topologies and paged node lists (module docstring)."""

    served: tuple[str, ...] = ("v1beta1", "v1alpha1")
    topologies: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: paths answered 403 Forbidden, as for a user without the RBAC rule
    forbidden: set[str] = field(default_factory=set)

    def add_topology(self, name: str, *labels: str) -> None:
        """Store a Topology called ``name`` with ``labels`` as its levels, highest first."""
        self.topologies[name] = {
            "metadata": {"name": name, "uid": f"uid-topology-{name}"},
            "spec": {"levels": [{"nodeLabel": label} for label in labels]},
        }

    def add_node(self, name: str, labels: dict[str, str]) -> None:
        """Store a Node called ``name`` with ``labels``."""
        self.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        if path in self.forbidden:
            raise ApiFailure(
                403,
                "Forbidden",
                f'User "system:serviceaccount:default:toposcope" cannot get {path}',
            )
        if method == "GET" and path == f"/apis/{GROUP}":
            return self._group()
        found = _TOPOLOGY.match(path)
        if found is not None and method == "GET":
            return self._topology(found["version"], found["name"])
        if method == "GET" and path == "/api/v1/nodes":
            return self._nodes(query)
        return super()._route(method, path, query, body)

    def _group(self) -> tuple[int, Any]:
        if not self.served:
            raise ApiFailure(404, "NotFound", "the server could not find the requested resource")
        versions = [{"groupVersion": f"{GROUP}/{v}", "version": v} for v in self.served]
        return 200, {
            "kind": "APIGroup", "apiVersion": "v1", "name": GROUP,
            "versions": versions, "preferredVersion": versions[0],
        }  # fmt: skip

    def _topology(self, version: str, name: str | None) -> tuple[int, Any]:
        if version not in self.served:
            raise ApiFailure(404, "NotFound", "the server could not find the requested resource")

        def shaped(stored: dict[str, Any]) -> dict[str, Any]:
            obj = copy.deepcopy(stored)
            return {"apiVersion": f"{GROUP}/{version}", "kind": "Topology", **obj}

        if name is None:
            items = [shaped(t) for _, t in sorted(self.topologies.items())]
            return 200, {
                "apiVersion": f"{GROUP}/{version}", "kind": "TopologyList",
                "metadata": {"resourceVersion": str(self.version)}, "items": items,
            }  # fmt: skip
        if name not in self.topologies:
            raise ApiFailure(404, "NotFound", f'topologies.{GROUP} "{name}" not found')
        return 200, shaped(self.topologies[name])

    def _nodes(self, query: dict[str, list[str]]) -> tuple[int, Any]:
        selector = (query.get("labelSelector") or [""])[0]
        limit = int((query.get("limit") or ["0"])[0])
        start = (query.get("continue") or [""])[0]
        nodes = sorted(
            (o for (p, _, n), o in self.objects.items() if p == "nodes" and n > start),
            key=lambda o: str(o["metadata"]["name"]),
        )
        nodes = [n for n in nodes if _selected(selector, n["metadata"].get("labels") or {})]
        page = nodes[:limit] if limit else nodes
        more = bool(limit) and len(nodes) > limit
        meta: dict[str, Any] = {"resourceVersion": str(self.version)}
        if more:
            meta["continue"] = page[-1]["metadata"]["name"]
        return 200, {"apiVersion": "v1", "kind": "NodeList", "metadata": meta, "items": page}
