"""Who owns a workload's processes, and what that lets the agent do to them.

The agent changes a host behind its schedulers' backs only where they allow it. The owner is
decided from the cgroups the workload's processes live in (whatever name the request used,
``pid-N`` included), classified by the exporter's identity code:

* **Slurm job** (``slurm_job``): slurmd's cgroup plugin owns the job's cpuset and Slurm
  does not change a running job's binding. The agent never writes the job's cpuset files;
  it re-pins threads (``sched_setaffinity``) and moves pages only inside the job's
  allocation (the job cgroup's effective ``cpuset.cpus``/``cpuset.mems``: what Slurm
  allocated). A request outside it is refused (400) naming the allocation. Every answer
  recommends ``--cpu-bind=cores``, ``--mem-bind=local`` and ``--gres-flags=enforce-binding``
  for the job's next submission. A process whose environment names a Slurm job but that
  lives in no job cgroup (``proctrack/pgid``) has no allocation the agent can read: refused
  (409).
* **Kubernetes pod** (``pod``): a Guaranteed pod's cpuset is the kubelet's, which
  reconciles it; every change is refused (409) with the kubelet settings that place it
  instead (CPU manager ``static``, Memory manager ``Static``, Topology manager
  ``single-numa-node``/``restricted``). A Burstable or BestEffort container's threads are
  re-pinned only inside the container's allowed cpuset, its cpuset files are never
  written, and the answer says so. The QoS class comes from the cgroup path (systemd and
  cgroupfs drivers alike); a pod whose class is unknown counts as Guaranteed.
* Anything else (systemd units, containers outside Kubernetes, plain cgroups, process
  trees) is unmanaged: the agent pins and writes cpusets as it always has.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from toposcope.agent.host import GONE_OR_DENIED, Host
from toposcope.agent.targets import Target
from toposcope.cpulist import format_cpulist
from toposcope.host.cgroups import CgroupLayout
from toposcope.host.slurm_identity import SlurmLabeler
from toposcope.host.workload_identity import WorkloadMapper
from toposcope.identity.workload import QosClass, WorkloadIdentity, WorkloadKind
from toposcope.rm import ActionKind, ResourceManagerError

#: what a Slurm job's next submission should ask for, said in every answer about one
SLURM_ADVICE = (
    "for the job's next submission use srun/sbatch --cpu-bind=cores --mem-bind=local, and "
    "--gres-flags=enforce-binding so that Slurm gives it GPUs close to its cores"
)
#: the kubelet settings that place a Guaranteed pod, said when refusing to
KUBELET_SETTINGS = (
    "the kubelet owns a Guaranteed pod's cpuset and reconciles it, so the agent does not "
    "change it: set the kubelet's CPU manager policy to static (cpuManagerPolicy: static), "
    "its Memory manager policy to Static (memoryManagerPolicy: Static) and its Topology "
    "manager policy to single-numa-node or restricted (topologyManagerPolicy) so that the "
    "kubelet places the pod's CPUs, memory and devices together"
)
#: pod QoS classes whose threads the agent may re-pin
_SHARED_QOS = (QosClass.BURSTABLE, QosClass.BEST_EFFORT)
_MANAGED = (WorkloadKind.SLURM_JOB, WorkloadKind.POD)


@dataclass(frozen=True)
class Ownership:
    """What the agent may do to a workload: everything (unmanaged), within bounds, or nothing.

    ``owner`` names the managed owners (``""``: unmanaged); ``cpus`` and ``mems`` bound
    what a change may ask for (``None``: no bound beyond the host's); ``refusal`` refuses
    every change; ``note`` goes into the detail of every change carried out.
    """

    owner: str = ""
    cpus: frozenset[int] | None = None
    mems: frozenset[int] | None = None
    refusal: str = ""
    note: str = ""

    @property
    def managed(self) -> bool:
        """Whether a scheduler owns the workload's cpuset (the agent never writes it then)."""
        return bool(self.owner)

    def check(
        self, kind: ActionKind, workload: str, cpus: Iterable[int], mems: Iterable[int]
    ) -> None:
        """Refuse ``kind`` of ``workload`` to ``cpus``/``mems`` where the owner forbids it."""
        if self.refusal:
            raise ResourceManagerError(f"{kind.value} {workload}: {self.refusal}", 409)
        for field, wanted, allowed, what in (
            ("cpus", cpus, self.cpus, "CPUs"),
            ("mems", mems, self.mems, "memory nodes"),
        ):
            outside = sorted(set(wanted) - allowed) if allowed is not None else []
            if outside:
                raise ResourceManagerError(
                    f"{kind.value} {workload}: {what} {format_cpulist(outside)} lie outside "
                    f"the allocation of {self.owner} ({self.allocation()}); {self.note}",
                    400,
                    field,
                )

    def allocation(self) -> str:
        """The bounds in words (``CPUs 0-3, memory nodes 0``)."""
        return (
            f"CPUs {format_cpulist(self.cpus or ())}, "
            f"memory nodes {format_cpulist(self.mems or ())}"
        )


UNMANAGED = Ownership()


class OwnershipRules:
    """Decides a :class:`Ownership` for a resolved workload (see the module docstring)."""

    def __init__(self, host: Host, mapper: WorkloadMapper, labeler: SlurmLabeler) -> None:
        self.host = host
        self.mapper = mapper
        self.labeler = labeler

    def of(self, target: Target) -> Ownership:
        """Who owns ``target``'s processes, and what that allows."""
        owners = self._owners(target.pids)
        if not owners:
            return self._by_environment(target)
        guaranteed = _names(
            o for o in owners if o.kind == WorkloadKind.POD and o.qos_class not in _SHARED_QOS
        )
        if guaranteed:
            return Ownership(
                owner=guaranteed, refusal=f"{guaranteed} is a Guaranteed pod: {KUBELET_SETTINGS}"
            )
        layout = self.host.cgroups.layout()
        cpus, mems = self._allocation(owners, layout)
        owner = _names(owners)
        if cpus is None or mems is None:
            return Ownership(
                owner=owner,
                refusal=f"the allocation of {owner} cannot be read from its cpuset cgroup "
                "(cpuset.cpus.effective), so the agent cannot keep a change inside it",
            )
        bounds = f"CPUs {format_cpulist(cpus)}, memory nodes {format_cpulist(mems)}"
        notes = []
        if any(o.kind == WorkloadKind.SLURM_JOB for o in owners):
            notes.append(
                f"Slurm allocated {bounds}: the agent changes threads and pages only inside "
                f"them and leaves the job's cpuset cgroup to slurmd; {SLURM_ADVICE}"
            )
        if any(o.kind == WorkloadKind.POD for o in owners):
            notes.append(
                f"a Burstable or BestEffort container: the agent re-pins its threads only "
                f"inside the container's allowed cpuset ({bounds}) and never writes the "
                "kubelet's cpuset files"
            )
        return Ownership(owner=owner, cpus=cpus, mems=mems, note="; ".join(notes))

    def _owners(self, pids: Iterable[int]) -> list[WorkloadIdentity]:
        """The Slurm jobs and pods whose cgroups hold any of ``pids``, by cgroup."""
        found: dict[str, WorkloadIdentity] = {}
        for pid in pids:
            try:
                entries = self.host.proc.cgroups(pid)
            except GONE_OR_DENIED:
                continue
            for path in {entry.path for entry in entries}:
                identity = self.mapper.identify(path)
                if identity.kind in _MANAGED:
                    found.setdefault(identity.cgroup, identity)
        return [found[cgroup] for cgroup in sorted(found)]

    def _allocation(
        self, owners: list[WorkloadIdentity], layout: CgroupLayout
    ) -> tuple[frozenset[int] | None, frozenset[int] | None]:
        """What every owner's cgroup allows (the intersection), ``None`` where unreadable."""
        cpus: frozenset[int] | None = None
        mems: frozenset[int] | None = None
        for identity in owners:
            cpuset = self.host.cgroups.cpuset(identity.cgroup, layout)
            if cpuset is None or not cpuset.cpus:
                return None, None
            cpus = frozenset(cpuset.cpus) if cpus is None else cpus & frozenset(cpuset.cpus)
            mems = frozenset(cpuset.mems) if mems is None else mems & frozenset(cpuset.mems)
        return cpus, mems

    def _by_environment(self, target: Target) -> Ownership:
        """A Slurm job known only from its processes' environment: refused, else unmanaged."""
        plain = WorkloadIdentity(name=target.name, kind=WorkloadKind.CGROUP, cgroup=target.cgroup)
        labelled = self.labeler.label(plain, target.root, target.pids)
        if labelled.kind != WorkloadKind.SLURM_JOB:
            return UNMANAGED
        owner = f"Slurm job {labelled.slurm_job_id}"
        return Ownership(
            owner=owner,
            refusal=f"its processes belong to {owner} (SLURM_JOB_ID) but live in no job "
            "cgroup, so the CPUs Slurm allocated to it are unknown and the agent does not "
            f"re-pin it (configure proctrack/cgroup and task/cgroup); {SLURM_ADVICE}",
        )


def describe(identity: WorkloadIdentity) -> str:
    """A managed owner in words: ``Slurm job 42``, ``pod ns/name container c (Burstable)``."""
    if identity.kind == WorkloadKind.SLURM_JOB:
        return f"Slurm job {identity.slurm_job_id}"
    pod = f"{identity.namespace}/{identity.pod}" if identity.pod else identity.pod_uid
    container = identity.container or identity.container_id[:12]
    text = f"pod {pod}" + (f" container {container}" if container else "")
    return f"{text} ({identity.qos_class or 'QoS class unknown'})"


def _names(owners: Iterable[WorkloadIdentity]) -> str:
    return ", ".join(describe(o) for o in owners)
