"""The rules of acting through Slurm that need no cluster: options, names, ids, views."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from toposcope.errors import UsageError
from toposcope.rm import ResourceManagerError, WorkloadState
from toposcope.slurm.apply_options import (
    ApplySettings,
    IdleAction,
    add_manager_options,
    apply_settings_from_args,
    opted_in,
    parse_idle_action,
)
from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.control import InvalidChangeError, SlurmControl, check_job_id, check_signal
from toposcope.slurm.gres import Gres
from toposcope.slurm.manager import shorter_limit
from toposcope.slurm.records import PendingJob, RunningJob, SlurmNode
from toposcope.slurm.settings import settings_from_args
from toposcope.slurm.views import job_id_of, node_topology, pending_view


@pytest.mark.parametrize(
    ("text", "action"),
    [
        ("timelimit=30", IdleAction(minutes=30)),
        ("signal=SIGUSR1", IdleAction(signal="USR1")),
        ("signal=usr2", IdleAction(signal="USR2")),
    ],
)
def test_idle_actions(text: str, action: IdleAction) -> None:
    assert parse_idle_action(text) == action


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("timelimit=0", "is not 1 to"),
        ("timelimit=-5", "neither timelimit=MINUTES nor signal=NAME"),
        ("timelimit=10m", "neither"),
        ("signal=NOPE", "is not a signal name"),
        ("kill=9", "neither"),
        ("", "neither"),
    ],
)
def test_malformed_idle_actions_name_the_option(text: str, why: str) -> None:
    with pytest.raises(UsageError, match="--slurm-idle-action") as caught:
        parse_idle_action(text)
    assert why in str(caught.value)


def test_the_opt_in_is_a_word_of_the_comment() -> None:
    assert opted_in("toposcope:migratable")
    assert opted_in("ckpt every 10 min; toposcope:migratable,resumes")
    assert not opted_in("toposcope:migratable-later")
    assert not opted_in("not toposcope: migratable")
    assert not opted_in("")


@pytest.mark.parametrize("bad", [0, -1, True, "12", 2**33, 1.5])
def test_job_ids_are_whole_numbers(bad: object) -> None:
    with pytest.raises(InvalidChangeError, match="job id"):
        check_job_id(bad)


def test_a_change_with_a_bad_name_never_reaches_slurm(tmp_path: Path) -> None:
    """No command runs: the runner would fail on the empty bin directory if one did."""
    control = SlurmControl(SlurmCommands(bin_dir=tmp_path))
    with pytest.raises(InvalidChangeError, match="node name"):
        control.set_required_nodes(42, ["n1;scancel"])
    with pytest.raises(InvalidChangeError, match="node name"):
        control.restart_on(42, "n1 n2")
    with pytest.raises(InvalidChangeError, match="not a signal name"):
        control.send_signal(42, "USR1 --user=root")
    with pytest.raises(InvalidChangeError, match="time limit"):
        control.set_time_limit(42, 0)
    with pytest.raises(InvalidChangeError, match="job id"):
        control.requeue_hold(0)
    assert control.changes == []
    assert check_signal("sigterm") == "TERM"


@pytest.mark.parametrize(("name", "job"), [("slurm-job-42", 42), ("42", 42), ("7", 7)])
def test_workload_names_are_job_ids(name: str, job: int) -> None:
    assert job_id_of(name) == job


@pytest.mark.parametrize("name", ["job-42", "slurm-job-0", "slurm-job-", "slurm-job-4x", "x"])
def test_other_workload_names_are_no_slurm_jobs(name: str) -> None:
    with pytest.raises(ResourceManagerError, match="is not a Slurm job") as caught:
        job_id_of(name)
    assert caught.value.status == 404


def test_a_node_topology_from_what_slurm_knows() -> None:
    node = SlurmNode(
        name="n1",
        state="idle",
        sockets=2,
        cores_per_socket=2,
        threads_per_core=2,
        cpus=8,
        real_memory_mb=1024,
        gres=(Gres("gpu", "a100", 1, sockets=(0,)), Gres("gpu", "a100", 2, sockets=(0, 1))),
    )
    topology = node_topology(node)
    assert [p.cpus for p in topology.packages] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [c.core for c in topology.cpus] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [n.memory_bytes for n in topology.numa_nodes] == [512 * 2**20] * 2
    # the first kind sits on socket 0; the second spans both sockets, so its GPUs are unplaced
    assert [(g.index, g.numa_node, g.local_cpus) for g in topology.gpus] == [
        (0, 0, (0, 1, 2, 3)),
        (1, None, ()),
        (2, None, ()),
    ]
    assert topology.source == "slurm:n1"


def test_a_pending_job_asks_for_gpus_per_node() -> None:
    job = PendingJob(
        job_id=5, name="j", user="u", account="", partition="gpu", reason="Resources",
        submit_time=0.0, wait_s=0.0, nodes=2, cpus=4, gpus_per_job=3,
    )  # fmt: skip
    view = pending_view(job)
    assert (view.name, view.state, view.gpus_requested, view.allocation) == (
        "slurm-job-5",
        WorkloadState.PENDING,
        2,
        None,
    )


def test_options_absent_from_a_sub_action_take_their_defaults() -> None:
    parser = argparse.ArgumentParser()
    add_manager_options(parser, suppress=True)
    args = parser.parse_args([])
    assert vars(args) == {}
    assert apply_settings_from_args(args) == ApplySettings()
    settings = settings_from_args(args, {"TOPOSCOPE_SLURM_URL": "http://head:6820"})
    assert settings.url == "http://head:6820" and settings.timeout_s == 10.0


def test_migration_limits_are_checked() -> None:
    parser = argparse.ArgumentParser()
    add_manager_options(parser)
    args = parser.parse_args(["--slurm-max-migrations", "-1"])
    with pytest.raises(UsageError, match="--slurm-max-migrations must be from 0"):
        apply_settings_from_args(args)
    args = parser.parse_args(["--slurm-max-migrations", "0", "--slurm-idle-action", "signal=TERM"])
    assert apply_settings_from_args(args) == ApplySettings(IdleAction(signal="TERM"), 0)


def _running(started: float, limit_s: int | None) -> RunningJob:
    return RunningJob(
        job_id=1, name="j", user="u", account="", partition="gpu", allocations=(),
        start_time=started, time_limit_s=limit_s,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("ran_s", "limit_s", "minutes", "new"),
    [
        (30, 600, 5, 6),  # a started minute counts whole
        (0, 600, 5, 5),
        (30, None, 5, 6),  # no limit of its own
        (30, 600, 9, None),  # 10 minutes would not end it sooner than its own 10
        (120, 3600, 1, 3),
    ],
)
def test_an_idle_job_gets_a_shorter_limit_never_a_longer_one(
    ran_s: int, limit_s: int | None, minutes: int, new: int | None
) -> None:
    assert shorter_limit(_running(1000.0, limit_s), minutes, 1000.0 + ran_s) == new
