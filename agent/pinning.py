"""``pin``: every thread's CPU affinity (and the workload's own cpuset, where it may), exactly
reverted.

``sched_setaffinity(2)`` goes to every thread (``/proc/PID/task/*``) of every process,
listed again until a pass finds no new thread. Where the workload has a cpuset cgroup of its
own that the agent may write (:func:`~toposcope.agent.cpusets.plan_cpuset`), its
``cpuset.cpus``/``cpuset.mems`` are written first. The before-state (every thread's own
mask, the cpuset files' text) is recorded; a pin back to the before-state of the workload's
latest pin (how the advisor reverts) restores each thread's own mask and the files' exact
text, not just the union the API reports.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass

from toposcope.agent.changes import Changes, roll_back
from toposcope.agent.cpusets import CpusetPlan, write_cpusets
from toposcope.agent.host import Host
from toposcope.agent.targets import Target, TargetFinder
from toposcope.cpulist import format_cpulist
from toposcope.host.processes import VANISHED
from toposcope.rm import ActionRequest, Allocation, ResourceManagerError

#: passes over a workload's threads when pinning (threads started meanwhile are caught)
MAX_PASSES = 4

AFFINITY_PRIVILEGE = (
    "changing the CPU affinity of another user's threads needs CAP_SYS_NICE "
    "(run the agent as root or grant it that capability)"
)
MEMS_NOT_ENFORCED = (
    "mems not enforced: the agent does not write the workload's cpuset cgroup; its new "
    "pages follow its CPUs (first touch), migrate-memory moves the old ones"
)


@dataclass
class PinRecord:
    """What an applied pin changed, to restore exactly on the matching revert."""

    workload: str
    root: int
    root_start: int
    before: Allocation
    thread_masks: dict[int, frozenset[int]]
    files: dict[str, str]
    restored: bool = False


def current_allocation(
    host: Host, target: Target, node: str, plan: CpusetPlan | None, mems: list[int] | None = None
) -> Allocation:
    """What ``target`` holds now: its threads' CPUs, and ``mems`` or its cpuset's nodes."""
    masks = host.affinities(target.pids)
    cpus = sorted(set().union(*masks.values())) if masks else []
    if mems is None:
        if plan is not None:
            mems = plan.mems()
        else:
            try:
                mems = host.mems_allowed(target.root)
            except VANISHED:
                mems = []
    return Allocation(node, cpus, mems, [])


class Pinner:
    """Carries out pins on ``host`` and remembers them for exact reverts (in memory)."""

    def __init__(self, host: Host, finder: TargetFinder) -> None:
        self.host = host
        self.finder = finder
        self._records: list[PinRecord] = []

    def pin(
        self, target: Target, request: ActionRequest, node: str, plan: CpusetPlan | None
    ) -> tuple[Allocation, Allocation, str]:
        """Pin ``target`` as ``request`` asks, writing ``plan``'s files when there is one.

        Answers the allocation before and after, and a note (``""`` when none). A change
        that fails half way is rolled back.
        """
        masks = self.host.affinities(target.pids)
        if not masks:
            raise ResourceManagerError(f"workload {target.name}: its processes are gone", 404)
        files = plan.snapshot() if plan is not None else {}
        before = current_allocation(self.host, target, node, plan)
        restore = self._restore_record(target, request)
        cpus = frozenset(request.cpus)
        changes = Changes()
        try:
            if plan is not None:
                if restore is not None and set(restore.files) == set(files):
                    wanted = dict(restore.files)
                else:
                    wanted = plan.wanted(cpus, request.mems)
                write_cpusets(plan, wanted, changes)
            thread_masks = restore.thread_masks if restore is not None else {}
            count = self.set_affinity(target, lambda tid: thread_masks.get(tid, cpus), changes)
        except ResourceManagerError:
            roll_back(changes)
            raise
        if count == 0:
            roll_back(changes)
            raise ResourceManagerError(f"workload {target.name}: its processes are gone", 404)
        if restore is not None:
            restore.restored = True
        else:
            start = self.host.starttime(target.root)
            self._records.append(
                PinRecord(target.name, target.root, start, before, dict(masks), files)
            )
        after = current_allocation(self.host, target, node, plan)
        note = ""
        if request.mems and plan is None and sorted(set(request.mems)) != sorted(after.mems):
            note = MEMS_NOT_ENFORCED
        return before, after, note

    def _restore_record(self, target: Target, request: ActionRequest) -> PinRecord | None:
        """The workload's latest pin when ``request`` asks for its before-state back."""
        for record in reversed(self._records):
            if record.workload != target.name or record.restored:
                continue
            if record.root != target.root or record.root_start != self.host.starttime(target.root):
                return None
            same_cpus = sorted(request.cpus) == sorted(record.before.cpus)
            same_mems = not request.mems or sorted(request.mems) == sorted(record.before.mems)
            return record if same_cpus and same_mems else None
        return None

    def set_affinity(
        self, target: Target, mask_for: Callable[[int], frozenset[int]], changes: Changes
    ) -> int:
        """Set every thread's mask (listing again until a pass finds no new thread)."""
        done: set[int] = set()
        for _ in range(MAX_PASSES):
            fresh = False
            for pid in self.finder.refresh(target):
                for tid in self.host.tids(pid):
                    if tid in done:
                        continue
                    fresh = True
                    try:
                        old = frozenset(os.sched_getaffinity(tid))
                        os.sched_setaffinity(tid, mask_for(tid))
                    except VANISHED:
                        continue
                    except OSError as exc:
                        raise _affinity_refusal(target, pid, tid, mask_for(tid), exc) from exc
                    done.add(tid)
                    changes.masks.setdefault(tid, old)
            if not fresh:
                break
        return len(done)


def _affinity_refusal(
    target: Target, pid: int, tid: int, mask: frozenset[int], exc: OSError
) -> ResourceManagerError:
    if isinstance(exc, PermissionError) or exc.errno == errno.EPERM:
        return ResourceManagerError(
            f"pin {target.name}: thread {tid} of pid {pid}: {AFFINITY_PRIVILEGE}", 403
        )
    return ResourceManagerError(
        f"pin {target.name}: CPUs {format_cpulist(mask)} are not allowed for thread {tid} of "
        f"pid {pid} ({exc.strerror}); they must lie inside its cgroup's cpuset",
        400,
    )
