"""The contract server with ``coordination.k8s.io/v1`` Leases, the lock of leader election.

Only what the advisor's :class:`~toposcope.advisor.leader_locks.LeaseLock` relies on, each
rule from its upstream source (k8s.io/kubernetes, release-1.30):

* **The resource** (``pkg/apis/coordination/types.go``, namespaced): every written Lease is
  validated against the official schema with ``kubernetes-validate`` (422 Invalid otherwise).
* **Create** (``staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go``
  ``Create``): an existing name is 409 AlreadyExists; a body naming a
  ``metadata.resourceVersion`` is refused ("resourceVersion should not be set on objects to
  be created", ``staging/src/k8s.io/apiserver/pkg/registry/rest/create.go``).
* **Update** (``store.go`` ``Update``/``GuaranteedUpdate``; ``pkg/registry/coordination/
  lease/strategy.go``: no create on update): an absent Lease is 404; a body naming another
  ``metadata.resourceVersion`` than the stored one is 409 Conflict, which is what lets only
  one of two racing candidates take a lease; the body's name must be the URL's.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from tests.kube.fake_apiserver import ApiFailure, FakeApiServer

PLURAL = "leases"
_LEASE = re.compile(
    r"^/apis/coordination\.k8s\.io/v1/namespaces/(?P<ns>[a-z0-9-]+)/leases"
    r"(?:/(?P<name>[a-z0-9.-]+))?$"
)


@dataclass
class LeaseApiServer(FakeApiServer):
    """:class:`FakeApiServer` with the Lease rules (module docstring)."""

    def lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored Lease, if any (a copy)."""
        with self.lock:
            stored = self.objects.get((PLURAL, namespace, name))
            return copy.deepcopy(stored) if stored is not None else None

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        found = _LEASE.match(path)
        if found is None:
            return super()._route(method, path, query, body)
        namespace, name = found["ns"], found["name"]
        if method == "GET" and name is not None:
            stored = self.objects.get((PLURAL, namespace, name))
            if stored is None:
                raise ApiFailure(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
            return 200, stored
        if method == "POST" and name is None:
            return self._create(namespace, body)
        if method == "PUT" and name is not None:
            return self._update(namespace, name, body)
        raise ApiFailure(405, "MethodNotAllowed", method)

    def _checked(self, namespace: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or body.get("kind") != "Lease":
            raise ApiFailure(400, "BadRequest", "the body is not a Lease")
        meta = body.get("metadata") or {}
        if meta.get("namespace", namespace) != namespace:
            raise ApiFailure(400, "BadRequest", "the namespace of the body does not match")
        self._validate("Lease", body)
        return copy.deepcopy(body)

    def _create(self, namespace: str, body: Any) -> tuple[int, Any]:
        lease = self._checked(namespace, body)
        meta = lease["metadata"]
        if meta.get("resourceVersion"):
            raise ApiFailure(
                422, "Invalid", "resourceVersion should not be set on objects to be created"
            )
        key = (PLURAL, namespace, meta["name"])
        if key in self.objects:
            raise ApiFailure(
                409, "AlreadyExists", f'leases.coordination.k8s.io "{meta["name"]}" already exists'
            )
        meta["namespace"] = namespace
        self.version += 1
        meta["uid"] = f"uid-{self.version}"
        return 201, self._store(key, lease, False)

    def _update(self, namespace: str, name: str, body: Any) -> tuple[int, Any]:
        lease = self._checked(namespace, body)
        if lease["metadata"].get("name") != name:
            raise ApiFailure(400, "BadRequest", "the name of the body does not match the URL")
        key = (PLURAL, namespace, name)
        stored = self.objects.get(key)
        if stored is None:
            raise ApiFailure(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
        self._check_version(stored, lease)
        lease["metadata"]["uid"] = stored["metadata"]["uid"]
        return 200, self._store(key, lease, False)
