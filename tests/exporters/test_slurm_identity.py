"""Slurm job labels on workloads: cgroup v1 and v2 layouts, the processes' environment, the
passwd database, and values that must not reach a label.

Each test copies a fixture host into ``tmp_path`` and adds what a Slurm node has: a job's
cgroup directories, ``/proc/PID/environ`` files written by slurmstepd, ``etc/passwd``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workloads.helpers import V1HOST, V2HOST, build, copy_host, info_labels, scrape
from toposcope.config import WorkloadSettings
from toposcope.host.slurm_identity import (
    PasswdNames,
    parse_slurm_environ,
    uid_from_cgroup,
)
from toposcope.host.workload_identity import classify_cgroup
from toposcope.identity.workload import (
    INVALID_LABEL_VALUE,
    WorkloadKind,
    bounded_label_value,
    label_value,
)

PASSWD = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n"


def environ(**variables: str) -> bytes:
    """An environ block as the kernel shows it: ``KEY=value`` items, each ended by NUL."""
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in variables.items())


def slurm_v2_host(tmp_path: Path, *, env: bytes | None, uid: int | None = None) -> Path:
    """The v2 fixture host with process 3001 moved into Slurm job 77's task cgroup, under a
    ``<node>_slurmstepd.scope`` (several slurmd on one host, as ``slurmd -N`` runs them).
    """
    host = copy_host(V2HOST, tmp_path)
    cgroup = host / "sys/fs/cgroup"
    (cgroup / "system.slice/foo.service/cgroup.procs").write_text("")
    task = cgroup / "system.slice/node1_slurmstepd.scope/job_77/step_0/user/task_0"
    task.mkdir(parents=True)
    (task / "cgroup.procs").write_text("3001\n")
    if env is not None:
        (host / "proc/3001/environ").write_bytes(env)
    if uid is not None:
        status = host / "proc/3001/status"
        status.write_text(status.read_text() + f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (host / "etc").mkdir()
    (host / "etc/passwd").write_text(PASSWD)
    return host


def test_v2_job_labels_come_from_the_environment(tmp_path: Path) -> None:
    env = environ(
        PATH="/usr/bin",
        SLURM_JOB_ID="77",
        SLURM_JOB_USER="bob",
        SLURM_JOB_ACCOUNT="ml-team",
        SLURM_JOB_PARTITION="gpu",
    )
    labels = info_labels(scrape(build(slurm_v2_host(tmp_path, env=env))), "slurm-job-77")
    assert labels["workload_kind"] == "slurm_job"
    assert labels["cgroup"] == "/system.slice/node1_slurmstepd.scope/job_77"
    assert (
        labels["slurm_job_id"],
        labels["slurm_user"],
        labels["slurm_account"],
        labels["slurm_partition"],
    ) == ("77", "bob", "ml-team", "gpu")


def test_v2_user_from_the_process_uid_through_passwd(tmp_path: Path) -> None:
    env = environ(SLURM_JOB_ID="77", SLURM_JOB_PARTITION="gpu")
    labels = info_labels(scrape(build(slurm_v2_host(tmp_path, env=env, uid=1000))), "slurm-job-77")
    assert (labels["slurm_user"], labels["slurm_account"]) == ("alice", "")


def test_v2_unreadable_environment_keeps_the_path_job_id(tmp_path: Path) -> None:
    labels = info_labels(scrape(build(slurm_v2_host(tmp_path, env=None))), "slurm-job-77")
    assert labels["slurm_job_id"] == "77"
    assert (labels["slurm_user"], labels["slurm_account"], labels["slurm_partition"]) == (
        "",
        "",
        "",
    )


def test_v1_user_from_the_path_uid_and_account_from_a_later_process(tmp_path: Path) -> None:
    host = copy_host(V1HOST, tmp_path)
    # the batch script (5101, the tree's root) shows no job variables; its child does
    (host / "proc/5001/environ").write_bytes(
        environ(SLURM_JOBID="42", SLURM_JOB_ACCOUNT="physics", SLURM_JOB_PARTITION="a100")
    )
    (host / "etc").mkdir()
    (host / "etc/passwd").write_text(PASSWD)
    labels = info_labels(scrape(build(host)), "slurm-job-42")
    assert labels["workload_kind"] == "slurm_job"
    assert (
        labels["slurm_job_id"],
        labels["slurm_user"],
        labels["slurm_account"],
        labels["slurm_partition"],
    ) == ("42", "alice", "physics", "a100")


def test_environment_of_another_job_is_not_believed(tmp_path: Path) -> None:
    env = environ(SLURM_JOB_ID="78", SLURM_JOB_ACCOUNT="intruder")
    labels = info_labels(scrape(build(slurm_v2_host(tmp_path, env=env))), "slurm-job-77")
    assert (labels["slurm_job_id"], labels["slurm_account"]) == ("77", "")


def test_a_unit_whose_processes_run_in_a_job_becomes_a_slurm_job(tmp_path: Path) -> None:
    # proctrack/pgid: the job's processes stay in slurmd's or a user's cgroup
    host = copy_host(V2HOST, tmp_path)
    (host / "proc/3001/environ").write_bytes(environ(SLURM_JOB_ID="99", SLURM_JOB_USER="carol"))
    labels = info_labels(scrape(build(host)), "foo.service")
    assert (labels["workload_kind"], labels["slurm_job_id"], labels["slurm_user"]) == (
        "slurm_job",
        "99",
        "carol",
    )
    other = info_labels(scrape(build(host)), "9f8e7d6c-5b4a-4c3d-9e2f-fedcba987654/b0b1b2b3b4b5")
    assert (other["workload_kind"], other["slurm_job_id"]) == ("pod", "")


def test_process_mode_tree_carries_its_job(tmp_path: Path) -> None:
    host = copy_host(V2HOST, tmp_path)
    (host / "proc/3001/environ").write_bytes(environ(SLURM_JOB_ID="5", SLURM_JOB_USER="dave"))
    reg = scrape(build(host, WorkloadSettings(mode="process", exclude=())))
    labels = info_labels(reg, "pid-3001")
    assert (labels["workload_kind"], labels["slurm_job_id"], labels["slurm_user"]) == (
        "process",
        "5",
        "dave",
    )


@pytest.mark.parametrize(
    ("account", "shown"),
    [
        ("ml team", INVALID_LABEL_VALUE),
        ('x"} 1\nevil{a="', INVALID_LABEL_VALUE),
        ("\x1b[31mred", INVALID_LABEL_VALUE),
        ("a" * 129, INVALID_LABEL_VALUE),
        ("a" * 128, "a" * 128),
        ("proj.alpha-1", "proj.alpha-1"),
    ],
)
def test_label_values_are_bounded(tmp_path: Path, account: str, shown: str) -> None:
    """The queue exporter's rule and bucket: a broken name is one visible ``(invalid)``."""
    env = environ(
        SLURM_JOB_ID="77",
        SLURM_JOB_ACCOUNT=account,
        SLURM_JOB_PARTITION=account,
        SLURM_JOB_USER=account,
    )
    labels = info_labels(scrape(build(slurm_v2_host(tmp_path, env=env))), "slurm-job-77")
    assert labels["slurm_account"] == labels["slurm_partition"] == shown
    # a broken SLURM_JOB_USER is not believed: the process's uid has no passwd entry here,
    # so the name stays the bucket unless the environment's name was valid
    assert labels["slurm_user"] == shown


def test_a_job_id_that_is_not_a_number_is_ignored(tmp_path: Path) -> None:
    host = copy_host(V2HOST, tmp_path)
    (host / "proc/3001/environ").write_bytes(environ(SLURM_JOB_ID="12;rm"))
    labels = info_labels(scrape(build(host)), "foo.service")
    assert (labels["workload_kind"], labels["slurm_job_id"]) == ("systemd_unit", "")


def test_parse_environ_ignores_a_variable_cut_by_the_bounded_read() -> None:
    whole = environ(SLURM_JOB_ID="7", SLURM_JOB_ACCOUNT="abc")
    assert parse_slurm_environ(whole) == {"job_id": "7", "account": "abc"}
    assert parse_slurm_environ(whole[:-2]) == {"job_id": "7"}
    assert parse_slurm_environ(b"") == {}


def test_uid_from_cgroup_paths() -> None:
    assert uid_from_cgroup("/slurm/uid_1000/job_42") == 1000
    assert uid_from_cgroup("/system.slice/slurmstepd.scope/job_42") is None
    assert uid_from_cgroup("/slurm/uid_x/job_1") is None


def test_passwd_names_unknown_uid_is_its_number(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text(PASSWD + "garbage line\n")
    names = PasswdNames(tmp_path)
    assert (names.name(1000), names.name(4242)) == ("alice", "4242")


def test_label_value_rules() -> None:
    assert label_value("gpu-a100") == "gpu-a100"
    assert label_value("") == ""
    assert label_value("-leading") == ""
    assert label_value(7) == ""
    assert bounded_label_value("gpu-a100") == "gpu-a100"
    assert bounded_label_value("") == ""
    assert bounded_label_value("-leading") == INVALID_LABEL_VALUE
    assert label_value(INVALID_LABEL_VALUE) == ""  # no real name can be the bucket


@pytest.mark.parametrize(
    ("path", "job"),
    [
        ("/slurm/uid_1000/job_42/step_0/task_0", "42"),
        ("/slurm_node7/uid_0/job_7/step_extern", "7"),
        ("/system.slice/slurmstepd.scope/job_42/step_0/user/task_0", "42"),
        ("/system.slice/node1_slurmstepd.scope/job_8/step_batch/user/task_0", "8"),
    ],
)
def test_both_slurm_layouts_are_jobs(path: str, job: str) -> None:
    identity = classify_cgroup(path)
    assert (identity.kind, identity.slurm_job_id, identity.name) == (
        WorkloadKind.SLURM_JOB,
        job,
        f"slurm-job-{job}",
    )


def test_slurmstepd_own_cgroup_is_not_a_job() -> None:
    identity = classify_cgroup("/system.slice/slurmstepd.scope/system")
    assert (identity.kind, identity.slurm_job_id) == (WorkloadKind.SYSTEMD_UNIT, "")
