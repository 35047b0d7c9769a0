"""The JSON request every HTTP client of toposcope sends: one way to build it.

The clients of the Kubernetes API server and of the resource-manager API ask for JSON,
send a body as JSON and carry a bearer token when they have one; :func:`json_request`
builds that request so the headers are set in one place.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping


def json_request(
    url: str,
    method: str,
    body: object = None,
    *,
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> urllib.request.Request:
    """A request for ``url`` accepting JSON, with ``body`` as JSON (when not ``None``).

    ``token`` goes in ``Authorization: Bearer`` when given; ``headers`` are added as they are.
    """
    sent = {**(headers or {}), "Accept": "application/json"}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        sent["Content-Type"] = "application/json"
    return urllib.request.Request(url, data=data, headers=sent, method=method)
