"""Which workload a cgroup path stands for: Kubernetes, Docker/Podman, Slurm, systemd.

Cgroup *paths* are the kernel's names (``/kubepods.slice/...``, as in ``/proc/PID/cgroup``),
independent of where the hierarchy is mounted. :func:`classify_cgroup` turns one into the
core's :class:`~toposcope.identity.workload.WorkloadIdentity` with its kind: Kubernetes pod
or container (systemd and cgroupfs drivers), Docker or Podman container, Slurm job, systemd
unit, or plain cgroup. Pod and namespace *names* are
not in the path; a :class:`WorkloadMapper` that asks the kubelet can fill them in later,
the default :class:`PathMapper` leaves them empty.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from toposcope.identity.workload import QosClass, WorkloadIdentity, WorkloadKind


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
    qos = QosClass.GUARANTEED
    for i in range(start, len(parts)):
        part = parts[i]
        if "burstable" in part:
            qos = QosClass.BURSTABLE
        elif "besteffort" in part:
            qos = QosClass.BEST_EFFORT
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
                kind=WorkloadKind.POD,
                cgroup=_join(parts, i + 1),
                pod_uid=uid,
                container_id=container,
                qos_class=qos,
            )
        return WorkloadIdentity(
            name=uid, kind=WorkloadKind.POD, cgroup=_join(parts, i), pod_uid=uid, qos_class=qos
        )
    return None


def _slurm(parts: list[str]) -> WorkloadIdentity | None:
    start = next((i for i, p in enumerate(parts) if _is_slurm_root(p)), None)
    if start is None:
        return None
    for i in range(start + 1, len(parts)):
        job = parts[i]
        if job.startswith("job_") and job[4:].isdigit():
            return WorkloadIdentity(
                name=f"slurm-job-{job[4:]}",
                kind=WorkloadKind.SLURM_JOB,
                cgroup=_join(parts, i),
                slurm_job_id=job[4:],
            )
    return None


def _is_slurm_root(part: str) -> bool:
    """``slurm``/``slurm_<node>`` (v1), ``slurmstepd.scope`` or ``<node>_slurmstepd.scope``
    (v2, the latter when several slurmd run on one host with ``-N``).
    """
    return part.startswith("slurm") or part.endswith("_slurmstepd.scope")


def _container(parts: list[str]) -> WorkloadIdentity | None:
    for i, part in enumerate(parts):
        if part == "docker" and i + 1 < len(parts) and _is_hex_id(parts[i + 1]):
            cid, upto = parts[i + 1], i + 1
        elif part.endswith(".scope") and part.startswith(("docker-", "libpod-")):
            cid = _container_id(part)
            if not cid:
                continue
            upto = i
        else:
            continue
        return WorkloadIdentity(
            name=cid[:12], kind=WorkloadKind.CONTAINER, cgroup=_join(parts, upto), container_id=cid
        )
    return None


def _systemd(parts: list[str]) -> WorkloadIdentity | None:
    for i in range(len(parts) - 1, -1, -1):
        part = parts[i]
        if part.endswith((".service", ".scope")):
            cgroup = _join(parts, i)
            direct = i == 1 and parts[0] == "system.slice"
            return WorkloadIdentity(
                name=part if direct else cgroup,
                kind=WorkloadKind.SYSTEMD_UNIT,
                cgroup=cgroup,
                unit=part,
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
      ``/system.slice/slurmstepd.scope/job_<j>/...`` or ``<node>_slurmstepd.scope`` (v2):
      the job.
    * Docker: ``/docker/<id>``, ``/system.slice/docker-<id>.scope``; Podman: ``libpod-<id>.scope``.
    * systemd: the innermost ``*.service`` or ``*.scope``.
    """
    parts = [p for p in path.split("/") if p]
    if not parts:
        return WorkloadIdentity(name="/", kind=WorkloadKind.CGROUP, cgroup="/")
    found = _kubernetes(parts) or _slurm(parts) or _container(parts) or _systemd(parts)
    if found is not None:
        return found
    clean = "/" + "/".join(parts)
    return WorkloadIdentity(name=clean, kind=WorkloadKind.CGROUP, cgroup=clean)


def with_names(
    identity: WorkloadIdentity, pod: str, namespace: str, container: str
) -> WorkloadIdentity:
    """A copy of ``identity`` with Kubernetes names filled in (for mappers that know them)."""
    return replace(identity, pod=pod, namespace=namespace, container=container)
