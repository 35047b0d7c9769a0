"""Pod, namespace and container names of a container id, from the runtime's state on disk.

The cgroup path of a Kubernetes container holds its pod UID and container id, the kubelet's
pod-resources API names pods and containers but gives no UID: the container runtime knows
both. Without the API server, what it keeps on the node is the OCI bundle of every running
container, whose ``config.json`` carries the CRI annotations:

* containerd (CRI plugin): ``/run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/
  config.json`` with ``io.kubernetes.cri.sandbox-name``, ``...sandbox-namespace``,
  ``...sandbox-uid`` (containerd >= 1.5) and ``io.kubernetes.cri.container-name``;
  ``io.kubernetes.cri.container-type`` is ``sandbox`` for the pod's pause container.
* CRI-O: ``/run/containers/storage/overlay-containers/<id>/userdata/config.json`` with the
  kubelet's labels ``io.kubernetes.pod.name``, ``io.kubernetes.pod.namespace``,
  ``io.kubernetes.pod.uid`` and ``io.kubernetes.container.name``, as annotations or inside the
  JSON of ``io.kubernetes.cri-o.Labels``; ``io.kubernetes.cri-o.ContainerType`` says
  ``sandbox`` or ``container``.

:class:`RuntimeState` looks a container id up under each state directory (both layouts under
each), resolved under the host's root (``--path.rootfs``). The files are root-only: an
exporter without the privilege sees none and says so once. A container's names never
change, so what was found is kept (bounded); what was not is looked for again later.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from toposcope.boundedread import read_bounded
from toposcope.errors import SourceError

LOG = logging.getLogger("toposcope.exporter.kubernetes")

#: containerd's CRI task directory and CRI-O's container storage, on the host.
DEFAULT_STATE_DIRS = (
    "/run/containerd/io.containerd.runtime.v2.task/k8s.io",
    "/run/containers/storage/overlay-containers",
)
#: where a bundle's config.json sits under a state directory, per runtime layout
_LAYOUTS = (("config.json",), ("userdata", "config.json"))
#: an OCI config.json of a container is tens of kB; anything far larger is not one
MAX_CONFIG_BYTES = 4 * 1024 * 1024
_CONTAINER_ID = re.compile(r"[0-9a-f]{12,64}")

_CONTAINERD = {
    "pod": "io.kubernetes.cri.sandbox-name",
    "namespace": "io.kubernetes.cri.sandbox-namespace",
    "pod_uid": "io.kubernetes.cri.sandbox-uid",
    "container": "io.kubernetes.cri.container-name",
    "type": "io.kubernetes.cri.container-type",
}
_KUBELET_LABELS = {
    "pod": "io.kubernetes.pod.name",
    "namespace": "io.kubernetes.pod.namespace",
    "pod_uid": "io.kubernetes.pod.uid",
    "container": "io.kubernetes.container.name",
    "type": "io.kubernetes.cri-o.ContainerType",
}
_CRIO_LABELS = "io.kubernetes.cri-o.Labels"


@dataclass(frozen=True)
class ContainerNames:
    """Who a container is, as its runtime recorded it.

    ``container`` is empty for a pod's sandbox (pause) container, which ``sandbox`` marks;
    ``pod_uid`` is empty where the runtime does not record it (containerd < 1.5).
    """

    pod: str
    namespace: str
    container: str = ""
    pod_uid: str = ""
    sandbox: bool = False


def names_from_annotations(annotations: Mapping[str, object]) -> ContainerNames | None:
    """The names in an OCI ``config.json``'s annotations (containerd or CRI-O), if any."""
    found = _pick(annotations, _CONTAINERD)
    if found is None:
        labels: Mapping[str, object] = annotations
        if _KUBELET_LABELS["pod"] not in annotations:
            labels = _json_object(annotations.get(_CRIO_LABELS))
        found = _pick({**labels, **_only_type(annotations)}, _KUBELET_LABELS)
    return found


def _only_type(annotations: Mapping[str, object]) -> dict[str, object]:
    key = _KUBELET_LABELS["type"]
    return {key: annotations[key]} if key in annotations else {}


def _json_object(text: object) -> dict[str, object]:
    if not isinstance(text, str):
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _pick(values: Mapping[str, object], keys: Mapping[str, str]) -> ContainerNames | None:
    def text(field: str) -> str:
        value = values.get(keys[field])
        return value if isinstance(value, str) else ""

    pod, namespace = text("pod"), text("namespace")
    if not pod or not namespace:
        return None
    sandbox = text("type") == "sandbox"
    return ContainerNames(
        pod=pod,
        namespace=namespace,
        container="" if sandbox else text("container"),
        pod_uid=text("pod_uid"),
        sandbox=sandbox,
    )


class RuntimeState:
    """Looks container ids up in the runtimes' state directories (see the module docstring)."""

    max_entries = 20000

    def __init__(self, directories: Iterable[Path]) -> None:
        self.directories = tuple(directories)
        self._known: dict[str, ContainerNames] = {}
        self._said_denied: set[Path] = set()

    @classmethod
    def under(cls, rootfs: Path, directories: Iterable[str] = ()) -> RuntimeState:
        """State directories (absolute host paths; the defaults when none) under ``rootfs``."""
        chosen = tuple(directories) or DEFAULT_STATE_DIRS
        return cls(rootfs / directory.lstrip("/") for directory in chosen)

    def names(self, container_id: str) -> ContainerNames | None:
        """The names of the container with this (full) id, or ``None`` when none is found."""
        known = self._known.get(container_id)
        if known is not None or not _CONTAINER_ID.fullmatch(container_id):
            return known
        for directory in self.directories:
            for layout in _LAYOUTS:
                found = self._read(directory, directory.joinpath(container_id, *layout))
                if found is not None:
                    if len(self._known) >= self.max_entries:
                        self._known.clear()
                    self._known[container_id] = found
                    return found
        return None

    def _read(self, directory: Path, path: Path) -> ContainerNames | None:
        try:
            data = read_bounded(path, MAX_CONFIG_BYTES, str(path), error=SourceError)
        except SourceError as exc:
            if isinstance(exc.__cause__, PermissionError) and directory not in self._said_denied:
                self._said_denied.add(directory)
                LOG.warning(
                    "cannot read the container runtime's state under %s (permission denied): "
                    "pods are named only where the kubelet's exclusive CPUs match a cgroup",
                    directory,
                )
            return None
        try:
            config = json.loads(data)
        except ValueError:
            return None
        annotations = config.get("annotations") if isinstance(config, dict) else None
        if not isinstance(annotations, dict):
            return None
        return names_from_annotations(annotations)
