"""Slurm job labels for workloads: job id, user, account and partition.

Slurm puts each job in a cgroup (``/slurm/uid_<u>/job_<j>/...`` on cgroup v1,
``/system.slice/[<node>_]slurmstepd.scope/job_<j>/...`` on v2); the path gives the job id,
and on v1 the user's uid. Everything else is in the job's processes' environment, which
slurmstepd fills for every task: ``SLURM_JOB_ID``, ``SLURM_JOB_USER``, ``SLURM_JOB_ACCOUNT``
and ``SLURM_JOB_PARTITION``. :class:`SlurmLabeler` reads a few of a workload's processes'
``/proc/PID/environ`` (bounded reads; another user's environment is unreadable without
CAP_SYS_PTRACE, which is normal and silent) and fills the identity's ``slurm_*`` fields.
A workload whose cgroup says nothing of Slurm (jobs tracked with ``proctrack/pgid``, or the
exporter's ``process`` mode) becomes a Slurm job when its root process's environment names
one.

The user is ``SLURM_JOB_USER``, else the uid from the v1 path or the process's real uid,
named through the passwd database (``<rootfs>/etc/passwd`` under ``--path.rootfs``, NSS on
the host itself), else the uid number. The job id must be digits; the user, account and
partition pass :func:`~toposcope.identity.workload.bounded_label_value`, the rule the Slurm
queue exporter applies to the same names: one that breaks it (a newline, an escape sequence,
over 128 characters: any user may set ``SLURM_JOB_ACCOUNT`` where Slurm does not enforce
accounts) is published as ``(invalid)``.
"""

from __future__ import annotations

import pwd
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from toposcope.host.processes import ProcFs
from toposcope.identity.workload import (
    WorkloadIdentity,
    WorkloadKind,
    bounded_label_value,
    label_value,
)

#: The environment variables read, as bytes (the environ file's encoding).
_VARIABLES = {
    b"SLURM_JOB_ID": "job_id",
    b"SLURM_JOBID": "job_id",
    b"SLURM_JOB_USER": "user",
    b"SLURM_JOB_ACCOUNT": "account",
    b"SLURM_JOB_PARTITION": "partition",
}
#: Most processes of one workload whose environment is read to find its job's variables.
MAX_ENVIRONS = 4
#: Kinds whose workload becomes a Slurm job when its environment names one.
_RELABELLED = (WorkloadKind.CGROUP, WorkloadKind.SYSTEMD_UNIT)
_UNREADABLE = (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError)


def parse_slurm_environ(data: bytes) -> dict[str, str]:
    """``{job_id, user, account, partition}`` found in a NUL-separated environment block.

    A variable cut off by the bounded read is ignored (no NUL after it); values are decoded
    as UTF-8 with replacement, and validated later.
    """
    found: dict[str, str] = {}
    items = data.split(b"\0")
    if data and not data.endswith(b"\0"):
        items = items[:-1]
    for item in items:
        key, sep, value = item.partition(b"=")
        field = _VARIABLES.get(key) if sep else None
        if field is not None and field not in found:
            found[field] = value.decode("utf-8", "replace")
    return found


def uid_from_cgroup(cgroup: str) -> int | None:
    """The uid in a v1 Slurm cgroup path (``.../uid_1000/job_42``), else ``None``."""
    for part in cgroup.split("/"):
        if part.startswith("uid_") and part[4:].isdigit():
            return int(part[4:])
    return None


class PasswdNames:
    """uid -> user name, from ``<rootfs>/etc/passwd`` or, on the host itself, NSS.

    Memoised (the same few users recur on every scrape, and NSS may ask a directory
    server); an unknown uid is named by its number.
    """

    max_entries = 4096

    def __init__(self, rootfs: Path) -> None:
        self._file = None if rootfs == Path("/") else rootfs / "etc" / "passwd"
        self._names: dict[int, str] = {}
        self._table: dict[int, str] | None = None

    def name(self, uid: int) -> str:
        """The user name of ``uid``, or ``str(uid)`` when the database has none."""
        found = self._names.get(uid)
        if found is None:
            found = self._lookup(uid) or str(uid)
            if len(self._names) >= self.max_entries:
                self._names.clear()
            self._names[uid] = found
        return found

    def _lookup(self, uid: int) -> str:
        if self._file is None:
            try:
                return pwd.getpwuid(uid).pw_name
            except KeyError:
                return ""
        if self._table is None:
            self._table = _read_passwd(self._file)
        return self._table.get(uid, "")


def _read_passwd(path: Path) -> dict[int, str]:
    """``{uid: name}`` of a passwd file (``name:x:uid:gid:...``); an unreadable one is empty."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    table: dict[int, str] = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[2].isdigit():
            table.setdefault(int(fields[2]), fields[0])
    return table


class SlurmLabeler:
    """Fills a workload identity's ``slurm_*`` fields (see the module docstring).

    What a workload's environment says is remembered by (workload name, root pid): a
    process's initial environment never changes, so each workload costs its environment
    reads once, not on every scrape.
    """

    max_entries = 20000

    def __init__(self, proc: ProcFs, names: PasswdNames) -> None:
        self._proc = proc
        self._names = names
        self._seen: dict[tuple[str, int], WorkloadIdentity] = {}

    def label(
        self, identity: WorkloadIdentity, root_pid: int, pids: Sequence[int]
    ) -> WorkloadIdentity:
        """``identity`` with its Slurm fields filled where its cgroup or processes say."""
        key = (identity.name, root_pid)
        known = self._seen.get(key)
        if known is not None and known.cgroup == identity.cgroup:
            return replace(
                identity,
                kind=known.kind,
                slurm_job_id=known.slurm_job_id,
                slurm_user=known.slurm_user,
                slurm_account=known.slurm_account,
                slurm_partition=known.slurm_partition,
            )
        labelled = self._label(identity, root_pid, pids)
        if len(self._seen) >= self.max_entries:
            self._seen.clear()
        self._seen[key] = labelled
        return labelled

    def _label(
        self, identity: WorkloadIdentity, root_pid: int, pids: Sequence[int]
    ) -> WorkloadIdentity:
        in_job = bool(identity.slurm_job_id)
        # Outside a job's cgroup only the root process speaks for the workload.
        candidates = _candidates(root_pid, pids) if in_job else [root_pid]
        env: dict[str, str] = {}
        env_pid = 0
        for pid in candidates:
            env = self._environ(pid)
            if env.get("job_id"):
                env_pid = pid
                break
        job_id = identity.slurm_job_id or label_value(env.get("job_id", ""))
        if not job_id or not job_id.isdigit():
            return identity
        if env.get("job_id") != job_id:
            env = {}  # another job's variables (or none): keep only what the path says
        kind = WorkloadKind.SLURM_JOB if identity.kind in _RELABELLED else identity.kind
        return replace(
            identity,
            kind=kind,
            slurm_job_id=job_id,
            slurm_user=self._user(identity.cgroup, env, env_pid or root_pid),
            slurm_account=bounded_label_value(env.get("account", "")),
            slurm_partition=bounded_label_value(env.get("partition", "")),
        )

    def _environ(self, pid: int) -> dict[str, str]:
        if pid <= 0:
            return {}
        try:
            return parse_slurm_environ(self._proc.environ(pid))
        except _UNREADABLE:
            return {}

    def _user(self, cgroup: str, env: dict[str, str], pid: int) -> str:
        user = label_value(env.get("user", ""))
        if user:
            return user
        uid = uid_from_cgroup(cgroup)
        if uid is None:
            uid = self._real_uid(pid)
        if uid is None:
            return bounded_label_value(env.get("user", ""))
        return bounded_label_value(self._names.name(uid))

    def _real_uid(self, pid: int) -> int | None:
        if pid <= 0:
            return None
        try:
            uid = self._proc.status(pid).get("Uid", "").split()
        except _UNREADABLE:
            return None
        return int(uid[0]) if uid and uid[0].isdigit() else None


def _candidates(root_pid: int, pids: Sequence[int]) -> list[int]:
    """The root process first, then others, at most :data:`MAX_ENVIRONS` in all."""
    ordered = [root_pid] if root_pid > 0 else []
    ordered.extend(p for p in pids if p != root_pid)
    return ordered[:MAX_ENVIRONS]
