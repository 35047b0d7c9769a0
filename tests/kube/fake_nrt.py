"""The contract server with NodeResourceTopology objects and the kubelet's ``/configz``.

Only what ``toposcope exporter --kubernetes.publish-nrt`` relies on, each rule from its
upstream source (k8s.io/kubernetes, release-1.30, unless said):

* **The resource** is the CRD of ``tests/fixtures/nrt/crd.yaml`` (noderesourcetopology-api,
  ``topology.node.k8s.io/v1alpha2``, cluster-scoped): every written object is validated
  against its ``openAPIV3Schema`` (``staging/src/k8s.io/apiextensions-apiserver/pkg/
  registry/customresource/validator.go``): 422 Invalid otherwise.
* **Unknown fields** with ``fieldValidation=Strict`` (KEP-2885, ``staging/src/k8s.io/
  apiserver/pkg/endpoints/handlers/create.go``/``update.go``): 400 BadRequest "strict
  decoding error: unknown field". Only strict writes are served here.
* **Create** (``staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go``
  ``Create``): an existing name is 409 AlreadyExists; a body naming a
  ``metadata.resourceVersion`` is refused ("resourceVersion should not be set on objects to
  be created", ``staging/src/k8s.io/apiserver/pkg/registry/rest/create.go``).
* **Update** (``store.go`` ``Update``/``GuaranteedUpdate``): an absent object is 404 (custom
  resources do not allow create on update); custom resources do not allow unconditional
  updates (``customresource/strategy.go`` ``AllowUnconditionalUpdate``), so a body without
  ``metadata.resourceVersion`` is 422; another resourceVersion than the stored one is 409
  Conflict. The body's name must be the URL's.
* **Owner references** (``staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go``
  ``validateOwnerReference``): apiVersion, kind, name and uid are required.
* **managedFields** (``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager``):
  each write records an entry for the ``fieldManager`` it names, operation ``Update``.
* **The node proxy** (``pkg/registry/core/node/rest/proxy.go``): ``GET
  /api/v1/nodes/NAME/proxy/configz`` reaches the kubelet's ``/configz``, which answers
  ``{"kubeletconfig": {...}}`` (``pkg/kubelet/server/server.go``, ``configz``); an unknown
  node is 404, a node whose kubelet does not answer 503.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import yaml

from tests.helpers import FIXTURES
from tests.kube.fake_apiserver import ApiFailure, FakeApiServer

CRD = FIXTURES / "nrt" / "crd.yaml"
PLURAL = "noderesourcetopologies"
GROUP_VERSION = "topology.node.k8s.io/v1alpha2"
_NRT = re.compile(
    r"^/apis/topology\.node\.k8s\.io/v1alpha2/noderesourcetopologies(?:/(?P<name>[a-z0-9.-]+))?$"
)
_CONFIGZ = re.compile(r"^/api/v1/nodes/(?P<name>[a-z0-9.-]+)/proxy/configz$")


def _not_found(name: str) -> str:
    return f'{PLURAL}.topology.node.k8s.io "{name}" not found'


def nrt_schema() -> dict[str, Any]:
    """The ``v1alpha2`` ``openAPIV3Schema`` of the CRD copy."""
    crd = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def unknown_fields(schema: dict[str, Any], value: Any, where: str = "") -> list[str]:
    """Paths in ``value`` that ``schema`` does not declare (objects with ``properties``)."""
    found: list[str] = []
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            if key not in schema["properties"]:
                found.append(f"{where}.{key}")
            else:
                found += unknown_fields(schema["properties"][key], item, f"{where}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            found += unknown_fields(schema["items"], item, f"{where}[{index}]")
    return found


@dataclass
class NrtApiServer(FakeApiServer):
    """:class:`FakeApiServer` with the NodeResourceTopology rules (module docstring).

    ``kubelet_configs`` maps a node name to its kubelet's configuration, as ``/configz``
    answers it; a node without one has a kubelet that does not answer.
    """

    kubelet_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    schema: dict[str, Any] = field(default_factory=nrt_schema)

    def add_nrt(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a NodeResourceTopology as another writer left it."""
        self.version += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.version)
        meta.setdefault("uid", f"uid-{self.version}")
        self.objects[(PLURAL, "", meta["name"])] = obj
        return obj

    def nrt(self, name: str) -> dict[str, Any] | None:
        """The stored object of that name, if any."""
        return self.objects.get((PLURAL, "", name))

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        found = _CONFIGZ.match(path)
        if found is not None and method == "GET":
            return self._configz(found["name"])
        found = _NRT.match(path)
        if found is None:
            return super()._route(method, path, query, body)
        name = found["name"]
        if method == "GET" and name is not None:
            stored = self.nrt(name)
            if stored is None:
                raise ApiFailure(404, "NotFound", _not_found(name))
            return 200, stored
        if method == "POST" and name is None:
            return self._create(query, body)
        if method == "PUT" and name is not None:
            return self._update(name, query, body)
        raise ApiFailure(405, "MethodNotAllowed", method)

    def _configz(self, node: str) -> tuple[int, Any]:
        if ("nodes", "", node) not in self.objects:
            raise ApiFailure(404, "NotFound", f'nodes "{node}" not found')
        if node not in self.kubelet_configs:
            raise ApiFailure(503, "ServiceUnavailable", "error trying to reach service")
        return 200, {"kubeletconfig": self.kubelet_configs[node]}

    def _check(self, query: dict[str, list[str]], body: Any) -> None:
        if query.get("fieldValidation") != ["Strict"]:
            raise ApiFailure(400, "BadRequest", "this server serves fieldValidation=Strict only")
        unknown = unknown_fields(self.schema, body)
        if unknown:
            self.invalid.append(f"unknown fields {unknown}")
            raise ApiFailure(400, "BadRequest", f"strict decoding error: unknown field {unknown}")
        try:
            jsonschema.Draft7Validator(self.schema).validate(body)
        except jsonschema.ValidationError as exc:
            self.invalid.append(f"NodeResourceTopology: {exc.message}")
            raise ApiFailure(
                422, "Invalid", f"NodeResourceTopology is invalid: {exc.message}"
            ) from None
        for ref in body["metadata"].get("ownerReferences") or []:
            if not all(ref.get(k) for k in ("apiVersion", "kind", "name", "uid")):
                self.invalid.append(f"ownerReference {ref}")
                raise ApiFailure(422, "Invalid", "metadata.ownerReferences: Required value")

    def _managed(self, obj: dict[str, Any], query: dict[str, list[str]]) -> None:
        manager = (query.get("fieldManager") or ["unknown"])[0]
        entries = [
            e for e in obj["metadata"].get("managedFields") or [] if e.get("manager") != manager
        ]
        entries.append(
            {
                "manager": manager,
                "operation": "Update",
                "apiVersion": "topology.node.k8s.io/v1alpha2",
            }
        )
        obj["metadata"]["managedFields"] = entries

    def _create(self, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        self._check(query, body)
        meta = body["metadata"]
        if meta.get("resourceVersion"):
            raise ApiFailure(
                400, "BadRequest", "resourceVersion should not be set on objects to be created"
            )
        if self.nrt(meta["name"]) is not None:
            raise ApiFailure(409, "AlreadyExists", f'{PLURAL} "{meta["name"]}" already exists')
        stored = copy.deepcopy(body)
        self._managed(stored, query)
        return 201, self.add_nrt(stored)

    def _update(self, name: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        self._check(query, body)
        stored = self.nrt(name)
        if stored is None:
            raise ApiFailure(404, "NotFound", _not_found(name))
        if body["metadata"].get("name") != name:
            raise ApiFailure(400, "BadRequest", "the name of the object does not match the URL")
        if not body["metadata"].get("resourceVersion"):
            raise ApiFailure(
                422, "Invalid", "metadata.resourceVersion: must be specified for an update"
            )
        self._check_version(stored, body)
        updated = copy.deepcopy(body)
        updated["metadata"]["uid"] = stored["metadata"]["uid"]
        updated["metadata"]["managedFields"] = copy.deepcopy(
            stored["metadata"].get("managedFields") or []
        )
        self._managed(updated, query)
        return 200, self._store((PLURAL, "", name), updated, False)
