"""Pod owners and QoS classes from the API server, for the workloads on this node.

Opt-in (``--kubernetes.pod-owners``): the cgroup path and the kubelet give a pod's UID and
names but not its controller. :class:`PodDirectory` lists this node's pods
(``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>``, as dcgm-exporter does) at most
once every ``refresh`` seconds, from the workload sample that finds the list due (on the
background sampler's thread when the exporter serves, so never inside a scrape), and keeps
the last good list when the API server does not answer (stale-tolerant; it says so once, and once
more when it answers again). Per pod UID it keeps:

* the owner: the controller ``ownerReference`` (else the first); a ``ReplicaSet`` owned by a
  ``Deployment`` is reported as that Deployment: the ReplicaSet is asked for once
  (``GET /apis/apps/v1/namespaces/<ns>/replicasets/<name>``) and its answer remembered; when
  it cannot be read (RBAC without ``replicasets get``), the ReplicaSet is reported;
* ``status.qosClass`` (``Guaranteed``, ``Burstable``, ``BestEffort``);
* namespace, pod and container names, used only where the kubelet's mapper found none
  (containers are matched by ``status.containerStatuses[].containerID``).

Everything read passes :func:`~toposcope.identity.workload.label_value` (names of at most
253 characters) before it reaches a label or a URL.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from toposcope.config import PodOwnerSettings
from toposcope.errors import ConfigError
from toposcope.identity.names import is_node_name
from toposcope.identity.workload import QosClass, WorkloadIdentity, label_value
from toposcope.kubeapi.client import connect

LOG = logging.getLogger("toposcope.exporter.kubernetes")

#: longest Kubernetes object name (a DNS subdomain)
MAX_NAME = 253
_QOS = {q.value for q in QosClass}

Fetch = Callable[[str], Any]


@dataclass(frozen=True)
class PodRecord:
    """What the API server says of one pod: names, owner, QoS, containers by runtime id."""

    namespace: str
    name: str
    owner_kind: str = ""
    owner_name: str = ""
    qos_class: str = ""
    containers: Mapping[str, str] = field(default_factory=dict)


def _name(value: object) -> str:
    return label_value(value, MAX_NAME)


def _controller(meta: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, name) of the controller owner reference, else the first one, else empty."""
    refs = [r for r in meta.get("ownerReferences") or [] if isinstance(r, Mapping)]
    chosen = next((r for r in refs if r.get("controller") is True), refs[0] if refs else None)
    if chosen is None:
        return "", ""
    kind, name = _name(chosen.get("kind")), _name(chosen.get("name"))
    return (kind, name) if kind and name else ("", "")


def _containers(status: Mapping[str, Any]) -> dict[str, str]:
    """``{container id: container name}`` from ``containerStatuses`` (``containerd://<id>``)."""
    found: dict[str, str] = {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for entry in status.get(key) or []:
            if not isinstance(entry, Mapping):
                continue
            cid = str(entry.get("containerID") or "").rpartition("://")[2]
            name = _name(entry.get("name"))
            if name and cid and all(c in "0123456789abcdef" for c in cid):
                found[cid] = name
    return found


def pods_from_list(data: object) -> dict[str, PodRecord]:
    """``{pod uid: record}`` of a ``PodList`` answer; malformed items are skipped.

    Raises :class:`ConfigError` when the answer is not a list of items at all.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("items"), list):
        raise ConfigError("Kubernetes answered the pod list without items")
    pods: dict[str, PodRecord] = {}
    for item in data["items"]:
        if not isinstance(item, Mapping) or not isinstance(item.get("metadata"), Mapping):
            continue
        meta = item["metadata"]
        uid = _name(meta.get("uid"))
        namespace, name = _name(meta.get("namespace")), _name(meta.get("name"))
        if not uid or not namespace or not name:
            continue
        status = item.get("status") if isinstance(item.get("status"), Mapping) else {}
        assert isinstance(status, Mapping)
        qos = status.get("qosClass")
        owner_kind, owner_name = _controller(meta)
        pods[uid] = PodRecord(
            namespace,
            name,
            owner_kind,
            owner_name,
            qos if isinstance(qos, str) and qos in _QOS else "",
            _containers(status),
        )
    return pods


class PodDirectory:
    """This node's pods as the API server lists them (see the module docstring). Thread-safe."""

    max_owners = 20000

    def __init__(
        self,
        fetch: Fetch,
        node: str,
        *,
        refresh: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not is_node_name(node):
            raise ConfigError(f"--kubernetes.node-name {node[:80]!r} is not a node name")
        self._fetch = fetch
        self._node = node
        self._refresh_every = refresh
        self._clock = clock
        self._lock = threading.Lock()
        self._pods: dict[str, PodRecord] = {}
        self._read_at: float | None = None
        self._failing = False
        self._replicasets: dict[tuple[str, str], tuple[str, str]] = {}

    def pods(self) -> dict[str, PodRecord]:
        """``{pod uid: record}``, re-listed when the last list is ``refresh`` seconds old."""
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self._refresh_every:
                self._read_at = now
                self._relist()
            return self._pods

    def _relist(self) -> None:
        selector = urllib.parse.quote(f"spec.nodeName={self._node}", safe="")
        try:
            pods = pods_from_list(self._fetch(f"/api/v1/pods?fieldSelector={selector}"))
        except ConfigError as exc:
            if not self._failing:
                LOG.warning(
                    "cannot list this node's pods (%s): owner and QoS labels stay as last "
                    "read; asking again every %.0f s",
                    exc,
                    self._refresh_every,
                )
                self._failing = True
            return
        if self._failing:
            LOG.info("the API server lists this node's pods again")
            self._failing = False
        self._pods = {uid: self._resolve_owner(pod) for uid, pod in pods.items()}

    def _resolve_owner(self, pod: PodRecord) -> PodRecord:
        """A ReplicaSet owned by a Deployment becomes that Deployment (lock held)."""
        if pod.owner_kind != "ReplicaSet":
            return pod
        key = (pod.namespace, pod.owner_name)
        owner = self._replicasets.get(key)
        if owner is None:
            owner = self._replicaset_owner(*key)
            if len(self._replicasets) >= self.max_owners:
                self._replicasets.clear()
            self._replicasets[key] = owner
        return replace(pod, owner_kind=owner[0], owner_name=owner[1])

    def _replicaset_owner(self, namespace: str, name: str) -> tuple[str, str]:
        path = (
            f"/apis/apps/v1/namespaces/{urllib.parse.quote(namespace, safe='')}"
            f"/replicasets/{urllib.parse.quote(name, safe='')}"
        )
        try:
            answer = self._fetch(path)
        except ConfigError as exc:
            LOG.info("ReplicaSet %s/%s unreadable (%s): reported itself", namespace, name, exc)
            return "ReplicaSet", name
        meta = answer.get("metadata") if isinstance(answer, Mapping) else None
        kind, owner = _controller(meta) if isinstance(meta, Mapping) else ("", "")
        return ("Deployment", owner) if kind == "Deployment" else ("ReplicaSet", name)

    def label(self, identity: WorkloadIdentity) -> WorkloadIdentity:
        """``identity`` with its pod's owner and QoS class (and names the mapper lacked)."""
        if not identity.pod_uid:
            return identity
        pod = self.pods().get(identity.pod_uid)
        if pod is None:
            return identity
        container = identity.container
        if not container and identity.container_id:
            container = pod.containers.get(identity.container_id, "")
        return replace(
            identity,
            namespace=identity.namespace or pod.namespace,
            pod=identity.pod or pod.name,
            container=container,
            owner_kind=pod.owner_kind,
            owner_name=pod.owner_name,
            qos_class=pod.qos_class or identity.qos_class,
        )


def open_pod_directory(settings: PodOwnerSettings | None) -> PodDirectory | None:
    """The pod directory ``settings`` ask for (``None``: not asked for).

    Raises :class:`ConfigError` when the API server cannot be configured (no service
    account, an unreadable kubeconfig); an API server that does not answer yet is not an
    error here (see :class:`PodDirectory`).
    """
    if settings is None:
        return None
    api = connect(settings.kubeconfig)
    LOG.info("listing node %s's pods at %s for owner and QoS labels", settings.node_name, api.url)
    return PodDirectory(api.get, settings.node_name, refresh=settings.refresh_seconds)
