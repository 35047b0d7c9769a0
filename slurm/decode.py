"""Turn Slurm's v0.0.38 JSON (slurmrestd, ``squeue --json``, ``sinfo --json``) into records.

slurmrestd's ``/slurm/v0.0.38/jobs`` and ``/nodes`` and the commands' ``--json`` output share
one schema in Slurm 22.05, so one decoder serves both readers. A running job's CPUs come from
``job_resources``: each allocated node lists ``sockets -> cores`` with core numbers *within the
socket*, so the node-wide core is ``socket x cores_per_socket + core`` and its CPUs (Slurm's
abstract ids) are ``core x threads_per_core + thread``. Its GPUs come from ``gres_detail``,
one string per node in the order of the job's node list (``gpu:2(IDX:2-3)``).

Fields are checked for type; a record that lacks a required field or holds the wrong type
raises :class:`~toposcope.slurm.errors.SlurmFormatError` naming the record and the field.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from toposcope.identity.names import is_node_name
from toposcope.slurm.errors import SlurmFormatError
from toposcope.slurm.gres import gpu_count, gpu_indices, gpus_of, parse_gres, parse_tres_gres
from toposcope.slurm.hostlist import expand_hostlist
from toposcope.slurm.records import JobAllocation, PendingJob, RunningJob, SlurmNode

LOG = logging.getLogger(__name__)

#: Slurm's "no limit" for 32-bit times (INFINITE) and its "not set" (NO_VAL).
_INFINITE = frozenset({0xFFFFFFFF, 0xFFFFFFFE})
#: the limit, in minutes, that sched/backfill writes into a job it starts without one where
#: the partition has none either (``_set_backfill_timelimits``: ``YEAR_MINUTES``): no limit
_BACKFILL_NO_LIMIT = 365 * 24 * 60
#: The most sockets, cores per socket or threads per core a node may claim.
_MAX_SHAPE = 1 << 16


class _Fields:
    """Typed access to one JSON object, with errors that name ``what`` (``job 12``)."""

    def __init__(self, value: object, what: str) -> None:
        if not isinstance(value, dict):
            raise SlurmFormatError(f"{what} is not a JSON object")
        self.data: dict[str, Any] = value
        self.what = what

    def text(self, key: str, default: str | None = "") -> str:
        value = self.data.get(key, default)
        if value is None and default is not None:
            return default
        if not isinstance(value, str):
            raise SlurmFormatError(f"{self.what}: {key} is not a string")
        return value

    def integer(self, key: str, default: int | None = 0, limit: int = 1 << 62) -> int:
        value = self.data.get(key, default)
        if value is None and default is not None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not -limit <= value <= limit:
            raise SlurmFormatError(f"{self.what}: {key} is not a whole number")
        return value

    def flag(self, key: str) -> bool:
        value = self.data.get(key, False)
        if not isinstance(value, bool):
            raise SlurmFormatError(f"{self.what}: {key} is not true or false")
        return value

    def optional_integer(self, key: str) -> int | None:
        value = self.data.get(key)
        return None if value is None else self.integer(key)

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SlurmFormatError(f"{self.what}: {key} is not a list of strings")
        return tuple(value)


def records_of(answer: object, key: str, what: str) -> list[object]:
    """The list under ``key`` of a decoded JSON answer (``jobs``, ``nodes``)."""
    fields = _Fields(answer, what)
    records = fields.data.get(key)
    if not isinstance(records, list):
        raise SlurmFormatError(f"{what} has no {key!r} list")
    return records


def decode_node(raw: object) -> SlurmNode:
    """One node of ``/nodes`` or ``sinfo --json``."""
    name = _Fields(raw, "a node").text("name", None)
    if not is_node_name(name):
        raise SlurmFormatError(f"node name {name[:80]!r} is no host name")
    fields = _Fields(raw, f"node {name}")
    shape = {
        key: fields.integer(key, 1, _MAX_SHAPE) for key in ("sockets", "cores", "threads", "cpus")
    }
    if min(shape.values()) < 1:
        raise SlurmFormatError(f"node {name}: sockets, cores, threads and cpus must be positive")
    return SlurmNode(
        name=name,
        state=fields.text("state").lower(),
        sockets=shape["sockets"],
        cores_per_socket=shape["cores"],
        threads_per_core=shape["threads"],
        cpus=shape["cpus"],
        real_memory_mb=fields.integer("real_memory"),
        gres=parse_gres(fields.text("gres")),
        gres_used=parse_gres(fields.text("gres_used")),
        flags=fields.strings("state_flags"),
        partitions=fields.strings("partitions"),
        alloc_cpus=fields.integer("alloc_cpus"),
        reason=fields.text("reason"),
    )


def _core_cpus(node: SlurmNode | None, sockets: object, what: str) -> tuple[int, ...]:
    """Slurm's abstract CPU ids of a ``sockets -> cores`` map of one allocated node."""
    if not isinstance(sockets, dict):
        raise SlurmFormatError(f"{what}: sockets is not a JSON object")
    if node is None:
        LOG.warning("%s: node unknown to the node list; its CPUs are left out", what)
        return ()
    cpus: set[int] = set()
    for socket_text, socket in sockets.items():
        cores = _Fields(socket, f"{what} socket {socket_text[:20]}").data.get("cores")
        if not isinstance(cores, dict):
            raise SlurmFormatError(f"{what}: socket {socket_text[:20]} has no cores object")
        for core_text, state in cores.items():
            if state == "unallocated":
                continue
            try:
                socket_id, core_id = int(socket_text), int(core_text)
            except ValueError:
                raise SlurmFormatError(
                    f"{what}: socket {socket_text[:20]!r} core {core_text[:20]!r} is not a number"
                ) from None
            if not (0 <= socket_id < node.sockets and 0 <= core_id < node.cores_per_socket):
                raise SlurmFormatError(
                    f"{what}: socket {socket_id} core {core_id} is outside node {node.name} "
                    f"({node.sockets} sockets of {node.cores_per_socket} cores)"
                )
            core = socket_id * node.cores_per_socket + core_id
            threads = node.threads_per_core
            cpus.update(range(core * threads, (core + 1) * threads))
    return tuple(sorted(cpus))


def _allocations(
    fields: _Fields, node_names: tuple[str, ...], nodes: Mapping[str, SlurmNode]
) -> tuple[JobAllocation, ...]:
    """Per-node CPU ids (from ``job_resources``) and GPU indices (from ``gres_detail``)."""
    details = fields.strings("gres_detail")
    gpus_by_node = {
        name: gpu_indices(parse_gres(detail))
        for name, detail in zip(node_names, details, strict=False)
    }
    resources = _Fields(fields.data.get("job_resources") or {}, f"{fields.what} job_resources")
    allocated = resources.data.get("allocated_nodes") or []
    if not isinstance(allocated, list):
        raise SlurmFormatError(f"{fields.what}: job_resources.allocated_nodes is not a list")
    cpus_by_node: dict[str, tuple[int, ...]] = {}
    for entry in allocated:
        item = _Fields(entry, f"{fields.what} allocated node")
        name = item.text("nodename")
        cpus_by_node[name] = _core_cpus(
            nodes.get(name), item.data.get("sockets") or {}, f"{fields.what} on {name}"
        )
    return tuple(
        JobAllocation(node=name, cpus=cpus_by_node.get(name, ()), gpus=gpus_by_node.get(name, ()))
        for name in node_names
    )


def _time_limit_s(fields: _Fields) -> int | None:
    """A job's time limit in seconds; ``None`` for none: Slurm's INFINITE and NO_VAL, and the
    year the backfill scheduler writes into a job it started without a limit (so whether the
    main scheduler or backfill started a job does not change what the advisor reads).
    """
    minutes = fields.optional_integer("time_limit")
    if minutes is None or minutes in _INFINITE or minutes == _BACKFILL_NO_LIMIT:
        return None
    return minutes * 60


def _time_left_s(fields: _Fields, start: float, limit: int | None, now: float) -> float | None:
    """Seconds until Slurm ends a running job: its ``end_time`` minus ``now``, at least 0.

    ``end_time`` is where slurmctld will end the job: start plus limit, moved on by the time
    it spent suspended and by ``scontrol update TimeLimit``. A record without one (0) falls
    back to start plus limit. ``None`` without a limit: Slurm then still writes an end time
    (a year on), which is no deadline.
    """
    if limit is None:
        return None
    end = float(fields.integer("end_time"))
    if end <= start:
        end = start + limit
    return max(0.0, end - now)


def _identity(fields: _Fields) -> dict[str, str]:
    """The fields that say whose job it is and where it runs: name, user, account, partition."""
    return {
        "name": fields.text("name"),
        "user": fields.text("user_name"),
        "account": fields.text("account"),
        "partition": fields.text("partition"),
    }


def decode_running(raw: object, nodes: Mapping[str, SlurmNode], now: float) -> RunningJob:
    """One RUNNING job of ``/jobs`` or ``squeue --json``, with its allocation per node."""
    job_id = job_id_of(raw)
    fields = _Fields(raw, f"job {job_id}")
    start = float(fields.integer("start_time"))
    limit = _time_limit_s(fields)
    return RunningJob(
        job_id=job_id,
        **_identity(fields),
        allocations=_allocations(fields, expand_hostlist(fields.text("nodes")), nodes),
        start_time=start,
        time_limit_s=limit,
        time_left_s=_time_left_s(fields, start, limit, now),
        comment=fields.text("comment"),
        restarts=fields.integer("restart_cnt"),
        requeue=fields.flag("requeue"),
    )


def decode_pending(raw: object, now: float) -> PendingJob:
    """One PENDING job of ``/jobs`` or ``squeue --json``: its request and why it waits."""
    job_id = job_id_of(raw)
    fields = _Fields(raw, f"job {job_id}")
    per_node = gpus_of(parse_tres_gres(fields.text("tres_per_node")))
    per_job = gpus_of(parse_tres_gres(fields.text("tres_per_job")))
    submitted = float(fields.integer("submit_time"))
    return PendingJob(
        job_id=job_id,
        **_identity(fields),
        reason=fields.text("state_reason"),
        submit_time=submitted,
        wait_s=max(0.0, now - submitted),
        nodes=max(1, fields.integer("node_count", 1)),
        cpus=max(1, fields.integer("cpus", 1)),
        gpus_per_node=gpu_count(per_node),
        gpus_per_job=gpu_count(per_job),
        gpu_type=next((g.type for g in (*per_node, *per_job) if g.type), None),
        required_nodes=expand_hostlist(fields.text("required_nodes")),
        excluded_nodes=expand_hostlist(fields.text("excluded_nodes")),
    )


def job_id_of(raw: object) -> int:
    """A job record's ``job_id``."""
    return _Fields(raw, "a job").integer("job_id", None)


def job_state(raw: object) -> str:
    """A job record's ``job_state`` (``RUNNING``, ``PENDING``, ``COMPLETED``...)."""
    fields = _Fields(raw, "a job")
    return fields.text("job_state").upper()
