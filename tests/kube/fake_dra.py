"""The contract server with DRA ResourceSlices served as the API server serves them.

On top of :class:`~tests.kube.fake_apiserver.FakeApiServer`: ``resource.k8s.io`` is served
in the versions of :attr:`DraApiServer.served` only (any other is 404, as on a cluster
without that version: v1 from 1.34, v1beta2 1.33-, v1beta1 1.32-), a list honours
``fieldSelector=spec.nodeName=<node>`` (the only field selector ResourceSlices support besides
``spec.driver``) and ``limit``/``continue`` paging, and a v1beta1 answer nests each device's
attributes and capacity under ``basic``, as k8s.io/api ``resource/v1beta1`` defines devices.
Slices are stored as v1 objects (the fixtures' shape). ResourceClaims and
ResourceClaimTemplates are served by name in the same versions (``claims``, ``templates``),
and the group's discovery document (``GET /apis/resource.k8s.io/<version>``) answers for
each served version; DeviceClasses (``classes``) by name, and ResourceClaims listed across
namespaces (what the scheduler's allocations are read from).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from tests.kube.fake_apiserver import ApiFailure, FakeApiServer

_SLICES = re.compile(r"^/apis/resource\.k8s\.io/(?P<version>v[0-9a-z]+)/resourceslices$")
_GROUP = re.compile(r"^/apis/resource\.k8s\.io/(?P<version>v[0-9a-z]+)$")
_CLASSES = re.compile(
    r"^/apis/resource\.k8s\.io/(?P<version>v[0-9a-z]+)/deviceclasses/(?P<name>[a-z0-9.-]+)$"
)
_ALL_CLAIMS = re.compile(r"^/apis/resource\.k8s\.io/(?P<version>v[0-9a-z]+)/resourceclaims$")
_CLAIMS = re.compile(
    r"^/apis/resource\.k8s\.io/(?P<version>v[0-9a-z]+)/namespaces/(?P<ns>[a-z0-9-]+)/"
    r"(?P<plural>resourceclaims|resourceclaimtemplates)/(?P<name>[a-z0-9.-]+)$"
)
#: the request paths ``_route`` is given: the query is split off before
_FIELD = re.compile(r"^spec\.(nodeName|driver)=(.*)$")


def as_version(item: dict[str, Any], version: str) -> dict[str, Any]:
    """A stored v1 ResourceSlice as ``version`` serves it."""
    served = copy.deepcopy(item)
    served["apiVersion"] = f"resource.k8s.io/{version}"
    if version == "v1beta1":
        for device in served["spec"].get("devices") or []:
            basic = {k: device.pop(k) for k in ("attributes", "capacity") if k in device}
            device["basic"] = basic
    return served


@dataclass
class DraApiServer(FakeApiServer):
    """A FakeApiServer serving ResourceSlices in ``served`` versions (module docstring)."""

    served: tuple[str, ...] = ("v1", "v1beta2", "v1beta1")
    page_size: int | None = None
    slices: list[dict[str, Any]] = field(default_factory=list)
    claims: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    templates: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        group = _GROUP.match(path)
        if group is not None:
            if group["version"] not in self.served:
                raise ApiFailure(404, "NotFound", f"the server could not find {path}")
            return 200, {"kind": "APIResourceList", "groupVersion": path[len("/apis/") :]}
        device_class = _CLASSES.match(path)
        if device_class is not None:
            if (
                device_class["version"] not in self.served
                or device_class["name"] not in self.classes
            ):
                raise ApiFailure(
                    404, "NotFound", f'deviceclasses "{device_class["name"]}" not found'
                )
            return 200, self.classes[device_class["name"]]
        every = _ALL_CLAIMS.match(path)
        if every is not None and every["version"] in self.served:
            return 200, {
                "kind": "ResourceClaimList",
                "metadata": {},
                "items": list(self.claims.values()),
            }
        named = _CLAIMS.match(path)
        if named is not None:
            store = self.claims if named["plural"] == "resourceclaims" else self.templates
            wanted = (named["ns"], named["name"])
            if named["version"] not in self.served or wanted not in store or method != "GET":
                raise ApiFailure(404, "NotFound", f'{named["plural"]} "{named["name"]}" not found')
            return 200, store[wanted]
        found = _SLICES.match(path)
        if found is None:
            return super()._route(method, path, query, body)
        version = found["version"]
        if version not in self.served or method != "GET":
            raise ApiFailure(404, "NotFound", f"the server could not find {path}")
        items = list(self.slices)
        for selector in query.get("fieldSelector", []):
            match = _FIELD.match(selector)
            if match is None:
                raise ApiFailure(400, "BadRequest", f"field label not supported: {selector}")
            field_name, value = match.groups()
            items = [i for i in items if i["spec"].get(field_name) == value]
        start = int(query.get("continue", ["0"])[0])
        limit = int(query["limit"][0]) if "limit" in query else None
        size = min(x for x in (limit, self.page_size, len(items) or 1) if x is not None)
        page = items[start : start + size]
        rest = start + size < len(items)
        return 200, {
            "apiVersion": f"resource.k8s.io/{version}",
            "kind": "ResourceSliceList",
            "metadata": {"continue": str(start + size)} if rest else {},
            "items": [as_version(i, version) for i in page],
        }
