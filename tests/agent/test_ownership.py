"""The agent respects who owns a workload: Slurm jobs only inside their allocation, Guaranteed
pods never, Burstable/BestEffort containers only inside their cpuset, the rest as before.

Each test builds a host tree (tests/agent/fixture_host.py) whose cgroups say who owns a real
child process, and checks both what the agent answered and what it did to the child's
threads and to the cgroup files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agent.conftest import Child, allowed_cpus, cpus_allowed
from tests.agent.fixture_host import FixtureHost
from toposcope.agent.local_rm import LocalResourceManager
from toposcope.cpulist import format_cpulist
from toposcope.rm import ActionKind, ActionRequest, ActionStatus, ResourceManagerError

SLURM_V2 = "/system.slice/slurmstepd.scope/job_42/step_0/user/task_0"
SLURM_V1 = "/slurm/uid_0/job_7/step_0/task_0"
UID = "1a2b3c4d-0000-4000-8000-00000000abcd"
CID = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
GUARANTEED = {
    "systemd": f"/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/"
    f"cri-containerd-{CID}.scope",
    "cgroupfs": f"/kubepods/pod{UID}/{CID}",
}
SHARED = {
    "systemd-burstable": "/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope",
    "cgroupfs-besteffort": f"/kubepods/besteffort/pod{UID}/{CID}",
}
SLURM_ADVICE = ("--cpu-bind=cores", "--mem-bind=local", "--gres-flags=enforce-binding")
KUBELET_ADVICE = ("cpuManagerPolicy: static", "memoryManagerPolicy: Static", "single-numa-node")


def two_cpus() -> tuple[int, int]:
    cpus = allowed_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two CPUs: one inside the allocation and one outside")
    return cpus[0], cpus[1]


def agent(host: FixtureHost) -> LocalResourceManager:
    return LocalResourceManager(host.paths, node_name="n1")


def pin(workload: str, cpus: list[int], rid: str = "r1") -> ActionRequest:
    return ActionRequest(rid, ActionKind.PIN, workload, "n1", cpus)


def migrate(workload: str, mems: list[int]) -> ActionRequest:
    return ActionRequest("m1", ActionKind.MIGRATE_MEMORY, workload, "n1", mems=mems)


def test_slurm_job_pin_inside_its_allocation_sets_affinity_only(
    tmp_path: Path, child: Child
) -> None:
    host = FixtureHost(tmp_path)
    host.add_cgroup(SLURM_V2, allowed_cpus(), [0], [child.pid])
    files = host.cgroup_files()
    rm = agent(host)
    inside = allowed_cpus()[0]
    state = rm.apply(pin("slurm-job-42", [inside]))
    assert state.status == ActionStatus.SUCCEEDED
    assert set(cpus_allowed(child.pid).values()) == {str(inside)}
    assert host.cgroup_files() == files  # slurmd's cpuset cgroup is not written
    assert "Slurm allocated CPUs " + format_cpulist(allowed_cpus()) in state.error
    assert all(flag in state.error for flag in SLURM_ADVICE)
    assert state.before is not None
    rm.apply(pin("slurm-job-42", state.before.cpus, rid="revert-r1"))
    assert set(cpus_allowed(child.pid).values()) == {format_cpulist(allowed_cpus())}
    assert host.cgroup_files() == files


def test_slurm_job_on_cgroup_v1_is_bounded_by_its_job_cgroup(tmp_path: Path, child: Child) -> None:
    inside, outside = two_cpus()
    host = FixtureHost(tmp_path, version=1)
    host.add_cgroup(SLURM_V1, [inside], [0], [child.pid])
    files = host.cgroup_files()
    rm = agent(host)
    state = rm.apply(pin("slurm-job-7", [inside]))
    assert set(cpus_allowed(child.pid).values()) == {str(inside)}
    assert "Slurm allocated CPUs " + str(inside) in state.error
    with pytest.raises(ResourceManagerError) as refused:
        rm.apply(pin("slurm-job-7", [outside], rid="r2"))
    assert refused.value.status == 400
    assert host.cgroup_files() == files


@pytest.mark.parametrize("by_pid", [False, True], ids=["job-name", "pid-name"])
def test_slurm_job_pin_outside_its_allocation_is_refused(
    tmp_path: Path, child: Child, by_pid: bool
) -> None:
    inside, outside = two_cpus()
    host = FixtureHost(tmp_path)
    host.add_cgroup(SLURM_V2, [inside], [0], [child.pid])
    files = host.cgroup_files()
    before = cpus_allowed(child.pid)
    name = child.workload if by_pid else "slurm-job-42"
    with pytest.raises(ResourceManagerError) as refused:
        agent(host).apply(pin(name, [outside]))
    message = str(refused.value)
    assert refused.value.status == 400
    assert refused.value.field == "cpus"
    assert f"CPUs {outside} lie outside the allocation of Slurm job 42 (CPUs {inside}" in message
    assert all(flag in message for flag in SLURM_ADVICE)
    assert cpus_allowed(child.pid) == before
    assert host.cgroup_files() == files


def test_a_slurm_job_without_a_job_cgroup_is_refused(tmp_path: Path, child: Child) -> None:
    host = FixtureHost(tmp_path)
    host.add_cgroup("/user.slice/session-3.scope", allowed_cpus(), [0], [])
    host.add_process(child.pid, "/user.slice/session-3.scope", b"SLURM_JOB_ID=9\0USER=x\0")
    before = cpus_allowed(child.pid)
    with pytest.raises(ResourceManagerError) as refused:
        agent(host).apply(pin(child.workload, [allowed_cpus()[0]]))
    assert refused.value.status == 409
    assert "Slurm job 9" in str(refused.value)
    assert "no job cgroup" in str(refused.value)
    assert cpus_allowed(child.pid) == before


@pytest.mark.parametrize("driver", sorted(GUARANTEED))
@pytest.mark.parametrize("kind", [ActionKind.PIN, ActionKind.MIGRATE_MEMORY])
def test_a_guaranteed_pod_is_refused_naming_the_kubelet_settings(
    tmp_path: Path, child: Child, driver: str, kind: ActionKind
) -> None:
    host = FixtureHost(tmp_path)
    host.add_cgroup(GUARANTEED[driver], allowed_cpus(), [0], [child.pid])
    files = host.cgroup_files()
    before = cpus_allowed(child.pid)
    request = pin(f"{UID}/{CID[:12]}", [allowed_cpus()[0]])
    if kind == ActionKind.MIGRATE_MEMORY:
        request = migrate(request.workload, [0])
    with pytest.raises(ResourceManagerError) as refused:
        agent(host).apply(request)
    message = str(refused.value)
    assert refused.value.status == 409
    assert f"pod {UID} container {CID[:12]} (Guaranteed)" in message
    assert all(setting in message for setting in KUBELET_ADVICE)
    assert cpus_allowed(child.pid) == before
    assert host.cgroup_files() == files


@pytest.mark.parametrize("path", sorted(SHARED))
def test_a_shared_pod_is_pinned_within_its_cpuset_and_its_files_left_alone(
    tmp_path: Path, child: Child, path: str
) -> None:
    host = FixtureHost(tmp_path)
    host.add_cgroup(SHARED[path], allowed_cpus(), [0], [child.pid])
    files = host.cgroup_files()
    rm = agent(host)
    inside = allowed_cpus()[0]
    state = rm.apply(pin(f"{UID}/{CID[:12]}", [inside]))
    assert state.status == ActionStatus.SUCCEEDED
    assert set(cpus_allowed(child.pid).values()) == {str(inside)}
    assert host.cgroup_files() == files
    assert "never writes the kubelet's cpuset files" in state.error
    assert "Burstable" in state.error or "BestEffort" in state.error


def test_a_shared_pod_pin_outside_its_cpuset_is_refused(tmp_path: Path, child: Child) -> None:
    inside, outside = two_cpus()
    host = FixtureHost(tmp_path)
    host.add_cgroup(SHARED["systemd-burstable"], [inside], [0], [child.pid])
    before = cpus_allowed(child.pid)
    with pytest.raises(ResourceManagerError) as refused:
        agent(host).apply(pin(f"{UID}/{CID[:12]}", [outside]))
    assert refused.value.status == 400
    assert f"pod {UID} container {CID[:12]} (Burstable)" in str(refused.value)
    assert cpus_allowed(child.pid) == before


def test_an_unmanaged_unit_gets_its_cpuset_written_as_before(tmp_path: Path, child: Child) -> None:
    host = FixtureHost(tmp_path)
    host.add_cgroup("/system.slice/train.service", allowed_cpus(), [0], [child.pid])
    cpus_file = host.cpuset_dir("/system.slice/train.service") / "cpuset.cpus"
    before_text = cpus_file.read_text()
    rm = agent(host)
    inside = allowed_cpus()[0]
    state = rm.apply(pin("train.service", [inside]))
    assert cpus_file.read_text().strip() == str(inside)
    assert set(cpus_allowed(child.pid).values()) == {str(inside)}
    assert state.error == ""
    assert state.before is not None
    rm.apply(pin("train.service", state.before.cpus, rid="revert-r1"))
    assert cpus_file.read_text() == before_text


def test_workloads_are_listed_with_their_owners_kind(tmp_path: Path, child: Child) -> None:
    host = FixtureHost(tmp_path)
    host.add_cgroup(SLURM_V2, allowed_cpus(), [0], [child.pid])
    [view] = agent(host).workloads()
    assert (view.name, view.kind) == ("slurm-job-42", "slurm_job")


def test_slurm_job_pages_move_only_within_its_allocated_nodes(tmp_path: Path, child: Child) -> None:
    host = FixtureHost(tmp_path)
    host.add_cgroup(SLURM_V2, allowed_cpus(), [0], [child.pid])
    rm = agent(host)
    state = rm.apply(migrate("slurm-job-42", [0]))
    assert state.status == ActionStatus.SUCCEEDED
    assert state.after is not None and state.after.mems == [0]
    assert all(flag in state.error for flag in SLURM_ADVICE)
    other = FixtureHost(tmp_path / "other")
    other.add_cgroup(SLURM_V2, allowed_cpus(), [1], [child.pid])  # Slurm gave it node 1 only
    with pytest.raises(ResourceManagerError) as refused:
        agent(other).apply(migrate("slurm-job-42", [0]))
    assert refused.value.status == 400
    assert refused.value.field == "mems"
    assert "memory nodes 0 lie outside the allocation of Slurm job 42" in str(refused.value)
