"""The local actuator on this very host: real threads pinned, real pages migrated, real errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.conftest import Child, allowed_cpus, cpus_allowed, running_child, tasks
from toposcope.agent.local_rm import LocalResourceManager, Syscalls
from toposcope.cpulist import format_cpulist
from toposcope.errors import ConfigError
from toposcope.rm import ActionKind, ActionRequest, ActionStatus, ResourceManagerError


@pytest.fixture
def rm() -> LocalResourceManager:
    return LocalResourceManager(node_name="n1", mode="process")


def pin(
    workload: str, cpus: list[int], mems: list[int] | None = None, rid: str = "r1"
) -> ActionRequest:
    return ActionRequest(rid, ActionKind.PIN, workload, "n1", cpus, mems or [])


def test_pin_sets_every_thread_and_revert_restores(rm: LocalResourceManager, child: Child) -> None:
    start = cpus_allowed(child.pid)
    assert len(start) == 4  # the main thread and three more
    state = rm.apply(pin(child.workload, [0], [0]))
    assert state.status == ActionStatus.SUCCEEDED
    assert set(cpus_allowed(child.pid).values()) == {"0"}
    assert state.before is not None and state.after is not None
    assert state.before.cpus == allowed_cpus()
    assert state.after.cpus == [0]
    assert state.after.node == "n1"  # the request's node is echoed, for the revert
    back = rm.apply(pin(child.workload, state.before.cpus, state.before.mems, rid="revert-r1"))
    assert back.after is not None and back.after.cpus == allowed_cpus()
    assert cpus_allowed(child.pid) == start


def test_revert_restores_each_threads_own_mask(rm: LocalResourceManager, child: Child) -> None:
    if len(allowed_cpus()) < 2:
        pytest.skip("needs two CPUs to give one thread a mask of its own")
    worker = tasks(child.pid)[-1]
    own = allowed_cpus()[-1]
    os.sched_setaffinity(worker, {own})
    start = cpus_allowed(child.pid)
    state = rm.apply(pin(child.workload, [allowed_cpus()[0]]))
    assert set(cpus_allowed(child.pid).values()) == {str(allowed_cpus()[0])}
    assert state.before is not None
    assert state.before.cpus == allowed_cpus()  # the API reports the union
    rm.apply(pin(child.workload, state.before.cpus, rid="revert-r1"))
    assert cpus_allowed(child.pid) == start
    assert cpus_allowed(child.pid)[worker] == str(own)


def test_pin_covers_the_whole_process_tree(rm: LocalResourceManager) -> None:
    with running_child(threads=2, grandchild=True) as parent:
        assert parent.grandchild > 0
        rm.apply(pin(parent.workload, [0]))
        assert set(cpus_allowed(parent.pid).values()) == {"0"}
        assert set(cpus_allowed(parent.grandchild).values()) == {"0"}


def test_repeated_request_is_not_applied_twice(rm: LocalResourceManager, child: Child) -> None:
    first = rm.apply(pin(child.workload, [0]))
    everything = set(allowed_cpus())
    for tid in tasks(child.pid):
        os.sched_setaffinity(tid, everything)  # someone else widened it since
    again = rm.apply(pin(child.workload, [0]))
    assert again == first
    assert set(cpus_allowed(child.pid).values()) == {format_cpulist(everything)}
    assert rm.action("r1") == first
    with pytest.raises(ResourceManagerError) as refused:
        rm.apply(pin(child.workload, allowed_cpus()))
    assert refused.value.status == 409
    with pytest.raises(ResourceManagerError) as unknown:
        rm.action("nope")
    assert unknown.value.status == 404


def test_migrate_memory_to_a_node_with_memory(rm: LocalResourceManager, child: Child) -> None:
    node = min(rm.memory_nodes())
    request = ActionRequest("m1", ActionKind.MIGRATE_MEMORY, child.workload, "n1", mems=[node])
    state = rm.apply(request)
    assert state.status == ActionStatus.SUCCEEDED
    assert state.after is not None and state.after.mems == [node]
    assert state.before is not None and state.before.mems  # where its pages were
    assert set(state.before.mems) <= rm.memory_nodes()


def test_migrate_pages_on_an_unknown_architecture_says_so(child: Child) -> None:
    rm = LocalResourceManager(node_name="n1", syscalls=Syscalls(machine="vax"))
    request = ActionRequest("m1", ActionKind.MIGRATE_MEMORY, child.workload, "n1", mems=[0])
    with pytest.raises(ResourceManagerError) as refused:
        rm.apply(request)
    assert refused.value.status == 501
    assert "vax" in str(refused.value)


def test_vanished_process_is_404(rm: LocalResourceManager) -> None:
    with running_child(threads=1) as gone:
        name = gone.workload
    for request in (
        pin(name, [0]),
        ActionRequest("m1", ActionKind.MIGRATE_MEMORY, name, "n1", mems=[0]),
    ):
        with pytest.raises(ResourceManagerError) as refused:
            rm.apply(request)
        assert refused.value.status == 404
        assert "gone" in str(refused.value)


@pytest.mark.parametrize(
    ("request_", "status", "message"),
    [
        (ActionRequest("x", ActionKind.PIN, "CHILD", "n1", [9999]), 400, "not online"),
        (ActionRequest("x", ActionKind.PIN, "CHILD", "n1", [], [0]), 400, "pin needs cpus"),
        (ActionRequest("x", ActionKind.PIN, "CHILD", "n1", [0], [4095]), 400, "no memory"),
        (ActionRequest("x", ActionKind.MIGRATE_MEMORY, "CHILD", "n1"), 400, "needs mems"),
        (ActionRequest("x", ActionKind.PLACE, "CHILD", "n1", gpus=[0]), 400, "use the scheduler"),
        (ActionRequest("x", ActionKind.MIGRATE, "CHILD", "n2"), 400, "use the scheduler"),
        (ActionRequest("x", ActionKind.RELEASE, "CHILD", "n1"), 400, "use the scheduler"),
        (ActionRequest("x", ActionKind.PIN, "no-such-workload", "n1", [0]), 404, "unknown"),
    ],
)
def test_refusals(
    rm: LocalResourceManager,
    child: Child,
    request_: ActionRequest,
    status: int,
    message: str,
) -> None:
    if request_.workload == "CHILD":
        request_ = ActionRequest(
            request_.request_id,
            request_.kind,
            child.workload,
            request_.node,
            request_.cpus,
            request_.mems,
            request_.gpus,
        )
    before = cpus_allowed(child.pid)
    with pytest.raises(ResourceManagerError) as refused:
        rm.apply(request_)
    assert refused.value.status == status
    assert message in str(refused.value)
    assert cpus_allowed(child.pid) == before


UNPRIVILEGED = textwrap.dedent(
    """
    import json, os, sys
    from toposcope.agent.local_rm import LocalResourceManager
    from toposcope.rm import ActionKind, ActionRequest, ResourceManagerError
    rm = LocalResourceManager(node_name="n1")
    # the interpreter's own files may be unreadable once root is dropped: load what is
    # needed first (codecs, libc)
    "x".encode("ascii").decode("ascii")
    rm.online_cpus(), rm.memory_nodes(), rm.syscalls.load()
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    answers = []
    for kind, cpus, mems in (("pin", [0], []), ("migrate-memory", [], [0])):
        try:
            rm.apply(ActionRequest(kind, ActionKind(kind), sys.argv[1], "n1", cpus, mems))
            answers.append([kind, 0, "applied"])
        except ResourceManagerError as exc:
            answers.append([kind, exc.status, str(exc)])
    print(json.dumps(answers))
    """
)


def test_without_privileges_the_error_names_the_capability(child: Child) -> None:
    if os.geteuid() != 0:
        pytest.skip("drops root to test EPERM; as a normal user every child is our own")
    before = cpus_allowed(child.pid)
    done = subprocess.run(
        [sys.executable, "-c", UNPRIVILEGED, child.workload],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    answers = {kind: (status, message) for kind, status, message in json.loads(done.stdout)}
    assert answers["pin"][0] == 403
    assert "CAP_SYS_NICE" in answers["pin"][1]
    assert answers["migrate-memory"][0] == 403
    assert "CAP_SYS_NICE" in answers["migrate-memory"][1]
    assert cpus_allowed(child.pid) == before


def test_lists_workloads_and_the_node(rm: LocalResourceManager, child: Child) -> None:
    [node] = rm.nodes()
    assert node.name == "n1"
    assert node.topology["numa_nodes"]
    # the child is not a top-level process tree, so it is named through pid-N only
    names = {w.name for w in rm.workloads()}
    assert names and all(n.startswith("pid-") for n in names)
    rm.apply(pin(child.workload, [0]))
    assert set(cpus_allowed(child.pid).values()) == {"0"}


def _cpuset_root() -> Path | None:
    """A writable cpuset hierarchy: cgroup v1's cpuset mount, or v2 with cpuset enabled."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        head, _, tail = line.partition(" - ")
        fields, fstype = head.split(), tail.split()
        if not fstype:
            continue
        mount = Path(fields[4])
        if fstype[0] == "cgroup" and "cpuset" in fstype[-1].split(","):
            return mount if os.access(mount, os.W_OK) else None
        if fstype[0] == "cgroup2":
            controllers = (mount / "cgroup.subtree_control").read_text().split()
            if "cpuset" in controllers and os.access(mount, os.W_OK):
                return mount
    return None


@pytest.fixture
def cpuset_child(child: Child) -> Iterator[tuple[Child, Path]]:
    root = _cpuset_root()
    if root is None or os.geteuid() != 0:
        pytest.skip("no writable cpuset hierarchy (needs root and a cpuset controller)")
    group = root / f"toposcope-test-{os.getpid()}"
    group.mkdir()
    try:
        for name in ("cpus", "mems"):
            source = root / f"cpuset.{name}"
            parent = source.read_text().strip() if source.exists() else ""
            if parent:
                (group / f"cpuset.{name}").write_text(parent)
        (group / "cgroup.procs").write_text(str(child.pid))
        yield child, group
    finally:
        if child.process.poll() is None:
            (root / "cgroup.procs").write_text(str(child.pid))
        group.rmdir()


def test_pin_of_a_cgroup_workload_writes_its_cpuset(cpuset_child: tuple[Child, Path]) -> None:
    child, group = cpuset_child
    rm = LocalResourceManager(node_name="n1")
    name = "/" + group.name
    before_text = (group / "cpuset.cpus").read_text()
    state = rm.apply(pin(name, [0], [min(rm.memory_nodes())]))
    assert (group / "cpuset.cpus").read_text().strip() == "0"
    assert set(cpus_allowed(child.pid).values()) == {"0"}
    assert state.before is not None
    rm.apply(pin(name, state.before.cpus, state.before.mems, rid="revert-r1"))
    assert (group / "cpuset.cpus").read_text() == before_text
    assert set(cpus_allowed(child.pid).values()) == {format_cpulist(state.before.cpus)}


@pytest.mark.parametrize("name", ["node_1", "-lead", "a b", "x" * 300])
def test_a_node_name_that_is_not_a_host_name_is_a_config_error(name: str) -> None:
    with pytest.raises(ConfigError, match="--hostname"):
        LocalResourceManager(node_name=name)
