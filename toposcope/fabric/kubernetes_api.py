"""A fabric read from the Kubernetes API server: the nodes' labels at a Kueue Topology's levels.

:func:`read_kubernetes_api` asks, through :class:`~toposcope.kubeapi.client.KubeApi` (bounded
answers, clear errors):

1. ``GET /apis/kueue.x-k8s.io``, the API group's discovery document, for the versions the
   server serves; the preferred one is read when it is one :mod:`~toposcope.fabric.kubernetes`
   knows (``v1beta2``, ``v1beta1``, ``v1alpha1``), else the newest of those served, as
   ``kubectl`` picks a version. Kueue not installed is an error saying so;
2. the ``Topology`` (cluster-scoped) by name, or the list of them when no name is given (the
   only one is read; several are an error naming them);
3. ``GET /api/v1/nodes`` with an optional label selector, in pages of :data:`NODE_PAGE`
   (``limit`` and ``continue``, as ``kubectl`` does), at most :data:`MAX_NODE_PAGES` pages.

The answers go through the same checks as files (:class:`~toposcope.fabric.kubernetes.
ObjectReader`), so a malformed object is refused naming the request and the field. Every
failure is a :class:`~toposcope.kubeapi.client.KubeApiError` or a
:class:`~toposcope.fabric.model.FabricError`: exit 2 on the command line.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toposcope.fabric.kubernetes import (
    KUEUE_GROUP,
    KUEUE_VERSIONS,
    LabeledNode,
    ObjectReader,
    Topology,
    fabric_from_labels,
    pick_topology,
    slim_nodes,
)
from toposcope.fabric.located import Lines
from toposcope.fabric.model import MAX_NODES, Fabric, FabricError
from toposcope.kubeapi.client import (
    KubeApi,
    KubeApiError,
    KubeApiStatusError,
    connect,
    continue_token,
)
from toposcope.yamlnodes import python_nodes

#: nodes asked for per request (a Node with its image list can take some 50 KB, so a page
#: stays well under the answer bound), and the most pages read (the model's node bound)
NODE_PAGE = 100
MAX_NODE_PAGES = MAX_NODES // NODE_PAGE + 1
#: what the reading needs when the server refuses it (403)
RBAC_HINT = (
    "toposcope needs list on nodes and get, list on topologies.kueue.x-k8s.io "
    "(a ClusterRole bound to its user or service account)"
)


def _reader(where: str) -> ObjectReader:
    def refuse(line: int, message: str) -> Exception:
        return FabricError(f"{where}: {message}")

    return ObjectReader(refuse)


def _nodes_of(answer: Any, where: str) -> Any:
    """``answer`` as YAML nodes (an answer nested too deeply is refused)."""
    try:
        return python_nodes(answer)
    except RecursionError:
        raise FabricError(f"{where}: the answer is nested too deeply") from None


def _get(api: KubeApi, path: str) -> Any:
    """GET ``path``, a refusal (401, 403) explained with what toposcope needs."""
    try:
        return api.get(path)
    except KubeApiStatusError as exc:
        if exc.code in (401, 403):
            raise KubeApiError(f"{exc} ({RBAC_HINT})") from None
        raise


def kueue_version(api: KubeApi) -> str:
    """The version of ``kueue.x-k8s.io`` to read Topology objects in (module docstring)."""
    path = f"/apis/{KUEUE_GROUP}"
    try:
        group = _get(api, path)
    except KubeApiStatusError as exc:
        if exc.code == 404:
            raise KubeApiError(
                f"Kubernetes API {api.url} does not serve {KUEUE_GROUP}: Kueue is not installed "
                "(no Topology to read)"
            ) from None
        raise
    versions = group.get("versions") if isinstance(group, Mapping) else None
    served = [
        v.get("version") for v in versions or [] if isinstance(v, Mapping)
    ] if isinstance(versions, list) else []  # fmt: skip
    preferred = group.get("preferredVersion") if isinstance(group, Mapping) else None
    if isinstance(preferred, Mapping) and preferred.get("version") in KUEUE_VERSIONS:
        return str(preferred["version"])
    for version in KUEUE_VERSIONS:
        if version in served:
            return version
    shown = ", ".join(str(v) for v in served) or "none"
    raise KubeApiError(
        f"Kubernetes API {path}: serves versions {shown}, none of {', '.join(KUEUE_VERSIONS)}"
    )


def read_topology(api: KubeApi, name: str | None) -> Topology:
    """The Kueue Topology called ``name`` (the only one when ``name`` is ``None``)."""
    base = f"/apis/{KUEUE_GROUP}/{kueue_version(api)}/topologies"
    if name is None:
        answer = _get(api, base)
        reader = _reader(f"Kubernetes API {base}")
        root = _nodes_of(answer, base)
        found = [reader.topology(item, where) for item, where in reader.objects(root, "answer")]
        return pick_topology(found, None, f"Kubernetes API {base}")
    path = f"{base}/{urllib.parse.quote(name, safe='')}"
    try:
        answer = _get(api, path)
    except KubeApiStatusError as exc:
        if exc.code == 404:
            raise KubeApiError(f"Kubernetes API {path}: no Topology named {name}") from None
        raise
    return _reader(f"Kubernetes API {path}").topology(_nodes_of(answer, path), "answer")


def list_nodes(api: KubeApi, selector: str | None) -> list[LabeledNode]:
    """Every node (matching the label ``selector``), read page by page."""
    nodes: list[LabeledNode] = []
    token = ""
    for _ in range(MAX_NODE_PAGES):
        query = {"limit": str(NODE_PAGE)}
        if selector:
            query["labelSelector"] = selector
        if token:
            query["continue"] = token
        path = f"/api/v1/nodes?{urllib.parse.urlencode(query)}"
        answer = _get(api, path)
        reader = _reader(f"Kubernetes API {path}")
        root = _nodes_of(slim_nodes(answer), path)
        nodes.extend(reader.node(item, where) for item, where in reader.objects(root, "answer"))
        token = continue_token(answer, path)
        if not token:
            return nodes
    raise KubeApiError(f"Kubernetes API /api/v1/nodes: more than {MAX_NODE_PAGES} pages of nodes")


def default_kubeconfig(environ: Mapping[str, str] | None = None) -> str | None:
    """The kubeconfig to read when none is named, in client-go's order: the first file of
    ``$KUBECONFIG``; none when running in a pod (its service account); else
    ``~/.kube/config`` when it exists.
    """
    env = os.environ if environ is None else environ
    listed = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return listed[0]
    if env.get("KUBERNETES_SERVICE_HOST"):
        return None
    home = Path(env.get("HOME") or Path.home()) / ".kube" / "config"
    return str(home) if home.is_file() else None


def read_kubernetes_api(
    kubeconfig: str | None, topology_name: str | None, selector: str | None
) -> Fabric:
    """The fabric the API server's nodes and Kueue Topology give (module docstring)."""
    chosen = kubeconfig or default_kubeconfig()
    try:
        api = connect(chosen)
    except KubeApiError as exc:
        if chosen:
            raise
        raise KubeApiError(
            f"no Kubernetes API server: name a kubeconfig with --kubeconfig or $KUBECONFIG "
            f"(there is no ~/.kube/config, and {exc})"
        ) from None
    topology = read_topology(api, topology_name)
    nodes = list_nodes(api, selector)
    return fabric_from_labels(topology, nodes, Lines(f"Kubernetes API {api.url}/api/v1/nodes"))
