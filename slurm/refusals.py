"""Slurm's failures, a job that moved on and a node a job cannot go to, as refusals.

A backend's refusal is a :class:`~toposcope.rm.errors.ResourceManagerError` with the status
a server would answer; the functions here make them the same way for every action:
:func:`slurm_errors` (Slurm failed), :func:`no_longer` and :func:`change_job` (the job is no
longer what the plan saw), :func:`usable_target` (Slurm would start no job on the node).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from toposcope.rm import ResourceManagerError
from toposcope.slurm.control import InvalidChangeError
from toposcope.slurm.errors import SlurmAuthError, SlurmError, SlurmUnavailableError
from toposcope.slurm.records import ClusterState, SlurmNode


@contextmanager
def slurm_errors(what: str) -> Iterator[None]:
    """Turn Slurm's failures into the contract's refusals, naming ``what`` was being done.

    422 for a change refused before Slurm saw it, 401 for refused credentials, 503 when
    Slurm cannot be reached, 502 for an error Slurm answered (its words quoted).
    """
    try:
        yield
    except InvalidChangeError as exc:
        raise ResourceManagerError(f"{what}: {exc}", 422) from None
    except SlurmAuthError as exc:
        raise ResourceManagerError(f"{what}: {exc}", 401) from None
    except SlurmUnavailableError as exc:
        raise ResourceManagerError(f"{what}: {exc}", 503) from None
    except SlurmError as exc:
        raise ResourceManagerError(f"{what}: Slurm refused: {exc}", 502) from None


def no_longer(job_id: int, state: ClusterState, wanted: str, kind: str) -> ResourceManagerError:
    """The 409 (404 for a job Slurm does not know) for a job not ``wanted`` any more."""
    now = state.state_of(job_id)
    if now is None:
        return ResourceManagerError(
            f"Slurm knows no job {job_id} (it ended and was forgotten, or never existed); "
            f"{kind} needs it {wanted}",
            404,
            "workload",
        )
    return ResourceManagerError(
        f"job {job_id} is {now.lower()}, no longer {wanted} (it changed between plan and "
        f"apply); {kind} left it as it is",
        409,
        "workload",
    )


def change_job(
    job_id: int,
    kind: str,
    wanted: str,
    change: Callable[[], None],
    read: Callable[[], ClusterState],
) -> None:
    """Make one change to a job that was ``wanted`` (``pending``, ``running``) when planned.

    When Slurm refuses it, the job is read again: a job that moved on in between is refused
    as :func:`no_longer` says, rather than with Slurm's terser words.
    """
    try:
        with slurm_errors(f"{kind} job {job_id}"):
            change()
    except ResourceManagerError as exc:
        if exc.status != 502:
            raise
        now = read()
        if now.state_of(job_id) != wanted.upper():
            raise no_longer(job_id, now, wanted, kind) from None
        raise


#: node flags under which Slurm starts no new job on a node
UNUSABLE_FLAGS = frozenset(
    {"DRAIN", "FAIL", "MAINTENANCE", "NOT_RESPONDING", "POWERED_DOWN", "POWER_DOWN"}
)
#: base states of a node that runs no job
UNUSABLE_STATES = frozenset({"down", "future", "unknown", "error"})


def usable_target(state: ClusterState, node: str, job_id: int, partition: str) -> SlurmNode:
    """The node a job is to be sent to, when Slurm would start it there; else the refusal.

    404 for a node Slurm does not know; 409 for a node outside the job's partition, or one
    that is down, drained, failing or powered down (the job would wait there forever).
    """
    target = state.node(node)
    if target is None:
        raise ResourceManagerError(f"Slurm has no node {node}", 404, "node")
    if not set(partition.split(",")) & set(target.partitions):
        raise ResourceManagerError(
            f"node {node} is not in job {job_id}'s partition {partition}", 409, "node"
        )
    bad = sorted(set(target.flags) & UNUSABLE_FLAGS)
    if target.state in UNUSABLE_STATES or bad:
        shown = "+".join([target.state, *bad])
        raise ResourceManagerError(
            f"node {node} is {shown}: Slurm starts no job there", 409, "node"
        )
    return target
