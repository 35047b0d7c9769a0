"""``migrate-memory``: ``migrate_pages(2)`` of every process of a workload to ``mems``.

Pages are moved from every NUMA node with memory to ``mems`` (what ``migratepages PID all
MEMS`` does). ``before.mems`` is where the pages were (``numa_maps``), ``after.mems`` where
they were sent; pages the kernel could not move (in use, locked) are counted in the note.
"""

from __future__ import annotations

import errno

from toposcope.agent.host import Host
from toposcope.agent.pinning import current_allocation
from toposcope.agent.syscalls import Syscalls
from toposcope.agent.targets import Target
from toposcope.cpulist import format_cpulist
from toposcope.rm import ActionRequest, Allocation, ResourceManagerError

MIGRATE_PRIVILEGE = (
    "migrate_pages needs CAP_SYS_NICE to move pages of another user's process or to nodes "
    "outside its cpuset, and ptrace access to the process (same user, or CAP_SYS_PTRACE)"
)


def migrate_memory(
    host: Host, syscalls: Syscalls, target: Target, request: ActionRequest, node: str
) -> tuple[Allocation, Allocation, str]:
    """Move ``target``'s pages to ``request.mems``: (before, after, note)."""
    resident = host.resident_nodes(target.pids)
    before = current_allocation(host, target, node, None, resident or None)
    source = sorted(host.memory_nodes())
    left = 0
    moved = 0
    for pid in target.pids:
        try:
            left += syscalls.migrate_pages(pid, source, request.mems)
        except ProcessLookupError:
            continue
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                continue
            raise _refusal(target, pid, request, exc) from exc
        moved += 1
    if moved == 0:
        raise ResourceManagerError(f"workload {target.name}: its processes are gone", 404)
    after = current_allocation(host, target, node, None, sorted(set(request.mems)))
    note = f"{left} page(s) could not be moved (in use or locked)" if left else ""
    return before, after, note


def _refusal(
    target: Target, pid: int, request: ActionRequest, exc: OSError
) -> ResourceManagerError:
    if isinstance(exc, PermissionError) or exc.errno == errno.EPERM:
        return ResourceManagerError(
            f"migrate-memory {target.name}: pid {pid}: {MIGRATE_PRIVILEGE}", 403
        )
    if exc.errno == errno.ENOSYS:
        return ResourceManagerError(f"migrate-memory: {exc.strerror}", 501)
    return ResourceManagerError(
        f"migrate-memory {target.name}: pid {pid}: the kernel refused nodes "
        f"{format_cpulist(request.mems)} ({exc.strerror}); they must have memory "
        "and lie inside the process's cpuset.mems",
        400,
    )
