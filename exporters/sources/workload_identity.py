"""Which workload a cgroup path stands for: Kubernetes, Docker/Podman, Slurm, systemd.

Cgroup *paths* are the kernel's names (``/kubepods.slice/...``, as in ``/proc/PID/cgroup``),
independent of where the hierarchy is mounted. :func:`classify_cgroup` turns one into a
:class:`WorkloadIdentity`: Kubernetes container (systemd and cgroupfs drivers), Docker or
Podman container, Slurm job, systemd unit, or plain cgroup. Pod and namespace *names* are
not in the path; a :class:`WorkloadMapper` that asks the kubelet can fill them in later,
the default :class:`PathMapper` leaves them empty.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol


@dataclass(frozen=True)
class WorkloadIdentity:
    """Who a workload is.

    ``name`` is the ``workload`` label, stable for the workload's life and short:

    * Kubernetes container: ``<pod uid>/<container id[:12]>`` (``<pod uid>`` for processes
      in the pod's own cgroup);
    * Docker or Podman container: ``<container id[:12]>``;
    * Slurm job: ``slurm-job-<id>`` (all steps together);
    * systemd unit directly under ``system.slice``: the unit name (``sshd.service``);
    * any other cgroup: its path; process mode: ``pid-<pid of the tree's root>``.

    ``cgroup`` is the cgroup path that stands for the workload (the container scope, the
    job directory, the unit). ``pod``, ``namespace`` and ``container`` are *names*, filled
    only by a mapper that knows them (the kubelet); ``pod_uid`` and ``container_id`` come
    from the path.
    """

    name: str
    kind: str
    cgroup: str
    pod: str = ""
    namespace: str = ""
    container: str = ""
    pod_uid: str = ""
    container_id: str = ""
    qos_class: str = ""
    job_id: str = ""
    unit: str = ""


class WorkloadMapper(Protocol):
    """Names the workload a cgroup belongs to.

    The default, :class:`PathMapper`, reads the path only. A kubelet-backed mapper (pod
    resources API or ``/pods``) would wrap it and add ``pod``, ``namespace`` and
    ``container`` names by ``pod_uid`` and ``container_id``.
    """

    def identify(self, cgroup: str) -> WorkloadIdentity:
        """The identity of the workload owning processes in ``cgroup``."""
        ...


class PathMapper:
    """The default mapper: :func:`classify_cgroup`, memoised (paths recur every scrape)."""

    max_entries = 20000

    def __init__(self) -> None:
        self._cache: dict[str, WorkloadIdentity] = {}

    def identify(self, cgroup: str) -> WorkloadIdentity:
        """Classify ``cgroup`` by its path alone; pod/namespace/container names stay empty."""
        found = self._cache.get(cgroup)
        if found is None:
            if len(self._cache) >= self.max_entries:
                self._cache.clear()
            found = classify_cgroup(cgroup)
            self._cache[cgroup] = found
        return found


_CONTAINER_PREFIXES = ("cri-containerd-", "crio-", "docker-", "containerd-", "libpod-")


def _container_id(component: str) -> str:
    """The container id in a cgroup name (``cri-containerd-<id>.scope`` or a bare ``<id>``)."""
    name = component.removesuffix(".scope")
    if name.startswith("crio-conmon-"):
        return ""
    for prefix in _CONTAINER_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    return name if _is_hex_id(name) else ""


def _is_hex_id(text: str) -> bool:
    return len(text) >= 12 and all(c in "0123456789abcdef" for c in text)


def _join(parts: list[str], upto: int) -> str:
    return "/" + "/".join(parts[: upto + 1])


def _kubernetes(parts: list[str]) -> WorkloadIdentity | None:
    start = next((i for i, p in enumerate(parts) if p.startswith("kubepods")), None)
    if start is None:
        return None
    qos = "guaranteed"
    for i in range(start, len(parts)):
        part = parts[i]
        if "burstable" in part:
            qos = "burstable"
        elif "besteffort" in part:
            qos = "besteffort"
        uid = ""
        if part.endswith(".slice") and "-pod" in part:
            uid = part.removesuffix(".slice").rpartition("-pod")[2].replace("_", "-")
        elif part.startswith("pod") and i > start:
            uid = part[3:]
        if not uid:
            continue
        container = _container_id(parts[i + 1]) if i + 1 < len(parts) else ""
        if container:
            return WorkloadIdentity(
                name=f"{uid}/{container[:12]}",
                kind="kubernetes",
                cgroup=_join(parts, i + 1),
                pod_uid=uid,
                container_id=container,
                qos_class=qos,
            )
        return WorkloadIdentity(
            name=uid, kind="kubernetes", cgroup=_join(parts, i), pod_uid=uid, qos_class=qos
        )
    return None


def _slurm(parts: list[str]) -> WorkloadIdentity | None:
    start = next((i for i, p in enumerate(parts) if p.startswith("slurm")), None)
    if start is None:
        return None
    for i in range(start + 1, len(parts)):
        job = parts[i]
        if job.startswith("job_") and job[4:].isdigit():
            return WorkloadIdentity(
                name=f"slurm-job-{job[4:]}", kind="slurm", cgroup=_join(parts, i), job_id=job[4:]
            )
    return None


def _container(parts: list[str]) -> WorkloadIdentity | None:
    for i, part in enumerate(parts):
        if part == "docker" and i + 1 < len(parts) and _is_hex_id(parts[i + 1]):
            cid, upto, kind = parts[i + 1], i + 1, "docker"
        elif part.endswith(".scope") and part.startswith(("docker-", "libpod-")):
            cid = _container_id(part)
            if not cid:
                continue
            upto, kind = i, ("docker" if part.startswith("docker-") else "podman")
        else:
            continue
        return WorkloadIdentity(
            name=cid[:12], kind=kind, cgroup=_join(parts, upto), container_id=cid
        )
    return None


def _systemd(parts: list[str]) -> WorkloadIdentity | None:
    for i in range(len(parts) - 1, -1, -1):
        part = parts[i]
        if part.endswith((".service", ".scope")):
            cgroup = _join(parts, i)
            direct = i == 1 and parts[0] == "system.slice"
            return WorkloadIdentity(
                name=part if direct else cgroup, kind="systemd", cgroup=cgroup, unit=part
            )
    return None


def classify_cgroup(path: str) -> WorkloadIdentity:
    """Map a cgroup path to the workload it belongs to (see :class:`WorkloadIdentity`).

    Recognised, first match wins:

    * Kubernetes, systemd driver: ``/kubepods.slice/kubepods-burstable.slice/
      kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope`` (also ``crio-``,
      ``docker-``); cgroupfs driver: ``/kubepods/burstable/pod<uid>/<id>``; deeper cgroups
      made inside a container belong to the container.
    * Slurm: ``/slurm/uid_<u>/job_<j>/step_<s>/...`` (v1) and
      ``/system.slice/slurmstepd.scope/job_<j>/...`` (v2): the job.
    * Docker: ``/docker/<id>``, ``/system.slice/docker-<id>.scope``; Podman: ``libpod-<id>.scope``.
    * systemd: the innermost ``*.service`` or ``*.scope``.
    """
    parts = [p for p in path.split("/") if p]
    if not parts:
        return WorkloadIdentity(name="/", kind="cgroup", cgroup="/")
    found = _kubernetes(parts) or _slurm(parts) or _container(parts) or _systemd(parts)
    if found is not None:
        return found
    clean = "/" + "/".join(parts)
    return WorkloadIdentity(name=clean, kind="cgroup", cgroup=clean)


def with_names(
    identity: WorkloadIdentity, pod: str, namespace: str, container: str
) -> WorkloadIdentity:
    """A copy of ``identity`` with Kubernetes names filled in (for mappers that know them)."""
    return replace(identity, pod=pod, namespace=namespace, container=container)
