"""Names Kubernetes workloads: pod, namespace and container on top of the cgroup identity.

A Kubernetes container's cgroup path gives its pod UID and container id
(:func:`~toposcope.host.workload_identity.classify_cgroup`); the kubelet's
pod-resources answer gives namespace, pod and container names but no UID. On a node, without
the API server, :class:`KubeletMapper` joins them, first match wins:

1. the container runtime's state (:class:`RuntimeState`): the container id's OCI annotations
   name it; kept only when their pod UID (where recorded) is the one in the cgroup path.
   This names every container, whatever its QoS class, and the pod's sandbox (container
   name empty).
2. the kubelet's exclusive CPUs: a Guaranteed container whose cgroup cpuset is exactly the
   ``cpu_ids`` the kubelet lists for one container (the CPU manager's ``static`` policy
   gives disjoint sets) is that container.
3. a pod seen named through another of its containers: namespace and pod, container empty.

A name once found never changes (a container id is not reused). Workloads left unnamed are
looked at again when the kubelet's answer changes or after ``retry_after`` seconds, so a
runtime state written after the first scrape is picked up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from toposcope.config import HostPaths
from toposcope.host.cgroups import CgroupLayout, Cgroups
from toposcope.host.podresources.records import ContainerAllocation, PodResources
from toposcope.host.podresources.runtime_state import RuntimeState
from toposcope.host.podresources.source import MAX_AGE, KubeletSource
from toposcope.host.workload_identity import PathMapper, with_names
from toposcope.identity.workload import QosClass, WorkloadIdentity, WorkloadKind


class KubeletMapper:
    """A ``WorkloadMapper`` that names Kubernetes workloads (see the module docstring).

    Everything that is not a Kubernetes cgroup is classified by its path alone, as
    :class:`PathMapper` does. Thread-safe.
    """

    max_entries = 20000

    def __init__(
        self,
        paths: HostPaths,
        runtime: RuntimeState,
        kubelet: KubeletSource | None = None,
        *,
        retry_after: float = MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path_mapper = PathMapper()
        self._cgroups = Cgroups(paths)
        self._runtime = runtime
        self._kubelet = kubelet
        self._retry_after = retry_after
        self._clock = clock
        self._lock = threading.Lock()
        self._named: dict[str, WorkloadIdentity] = {}
        self._unnamed: dict[str, WorkloadIdentity] = {}
        self._pods: dict[str, tuple[str, str]] = {}
        self._answer: PodResources | None = None
        self._retried_at: float | None = None
        self._layout: CgroupLayout | None = None

    def identify(self, cgroup: str) -> WorkloadIdentity:
        """The cgroup's identity, with Kubernetes names where they can be found."""
        base = self._path_mapper.identify(cgroup)
        if base.kind != WorkloadKind.POD:
            return base
        with self._lock:
            self._refresh()
            known = self._named.get(cgroup) or self._unnamed.get(cgroup)
            if known is not None:
                return known
            found, final = self._name(base)
            store = self._named if final else self._unnamed
            if len(store) >= self.max_entries:
                store.clear()
            store[cgroup] = found
            return found

    def _refresh(self) -> None:
        """Forget the unnamed when the kubelet's answer changed or ``retry_after`` passed."""
        answer = self._kubelet.answer() if self._kubelet is not None else None
        now = self._clock()
        due = self._retried_at is None or now - self._retried_at >= self._retry_after
        if answer is not self._answer or due:
            self._answer = answer
            self._retried_at = now
            self._unnamed.clear()
            self._layout = None

    def _name(self, base: WorkloadIdentity) -> tuple[WorkloadIdentity, bool]:
        """(identity, whether it is final) for a Kubernetes cgroup not seen since the refresh."""
        if base.container_id:
            names = self._runtime.names(base.container_id)
            if names is not None and names.pod_uid in ("", base.pod_uid):
                self._remember_pod(base.pod_uid, names.namespace, names.pod)
                return with_names(base, names.pod, names.namespace, names.container), True
            match = self._by_exclusive_cpus(base)
            if match is not None:
                self._remember_pod(base.pod_uid, match.namespace, match.pod)
                return with_names(base, match.pod, match.namespace, match.container), True
        pod = self._pods.get(base.pod_uid)
        if pod is not None:
            return with_names(base, pod[1], pod[0], ""), False
        return base, False

    def _remember_pod(self, uid: str, namespace: str, pod: str) -> None:
        if len(self._pods) >= self.max_entries:
            self._pods.clear()
        self._pods[uid] = (namespace, pod)

    def _by_exclusive_cpus(self, base: WorkloadIdentity) -> ContainerAllocation | None:
        """The one container whose exclusive CPUs are exactly this cgroup's cpuset."""
        if self._answer is None or base.qos_class != QosClass.GUARANTEED:
            return None
        exclusive = [c for c in self._answer.containers if c.cpu_ids]
        if not exclusive:
            return None
        if self._layout is None:
            self._layout = self._cgroups.layout()
        cpuset = self._cgroups.cpuset(base.cgroup, self._layout)
        if cpuset is None or not cpuset.cpus:
            return None
        matches = [c for c in exclusive if c.cpu_ids == cpuset.cpus]
        return matches[0] if len(matches) == 1 else None
