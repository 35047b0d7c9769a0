"""What the apply tests share: Slurm backends aimed at the shared cluster, and what Slurm says.

Backends are built by the same factory ``--resource-manager slurm`` uses, from the options
the command line would pass; what a test checks afterwards it reads with Slurm's own
``scontrol``, not through the backend under test.
"""

from __future__ import annotations

import re
from pathlib import Path

from toposcope.rm import ActionState, ActionStatus
from toposcope.slurm.daemons import wait_for
from toposcope.slurm.localcluster import LocalCluster
from toposcope.slurm.manager import SlurmResourceManager, slurm_resource_manager


def commands_manager(cluster: LocalCluster, **options: object) -> SlurmResourceManager:
    """A backend reading and changing the cluster through its commands."""
    return slurm_resource_manager(slurm_conf=str(cluster.layout.slurm_conf), **options)


def token_file(tmp_path: Path, token: str) -> Path:
    """``token`` in a file of mode 0600, as an operator stores it."""
    path = tmp_path / "slurm.jwt"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


def rest_manager(
    cluster: LocalCluster, tmp_path: Path, *, url: str | None = None, token: str | None = None,
    **options: object,
) -> SlurmResourceManager:  # fmt: skip
    """A backend reading (and placing) through slurmrestd, at ``url`` (default: the
    cluster's), with ``token`` (default: a fresh one for root).
    """
    path = token_file(tmp_path, token if token is not None else cluster.token())
    return commands_manager(
        cluster,
        slurm_url=url or cluster.rest_url,
        slurm_token_file=str(path),
        **options,
    )


def job_field(cluster: LocalCluster, job: int, name: str) -> str:
    """One ``Name=value`` field of ``scontrol show job`` (``ReqNodeList``, ``Restarts``...)."""
    text = cluster.command("scontrol", "show", "job", str(job))
    found = re.search(rf"\b{name}=(\S*)", text)
    assert found is not None, f"no {name}= in {text}"
    return found.group(1)


def job_state(cluster: LocalCluster, job: int) -> tuple[str, str]:
    """(state, node list) of a job, as ``squeue`` prints them."""
    text = cluster.command("squeue", "-h", "-j", str(job), "-o", "%T %N")
    state, _, nodes = text.strip().partition(" ")
    return state, nodes


def wait_state(cluster: LocalCluster, job: int, state: str, timeout_s: float = 60) -> str:
    """Wait until ``job`` is in ``state``; its node list then."""

    def reached() -> str | None:
        now, nodes = job_state(cluster, job)
        return nodes or "-" if now == state else None

    return wait_for(reached, f"job {job} {state}", timeout_s)


def wait_final(
    manager: SlurmResourceManager, request_id: str, timeout_s: float = 60
) -> ActionState:
    """Ask ``manager`` about an action until it is no longer running; its final state."""

    def final() -> ActionState | None:
        state = manager.action(request_id)
        return None if state.status in (ActionStatus.PENDING, ActionStatus.RUNNING) else state

    return wait_for(final, f"action {request_id} finished", timeout_s)


def blockers(cluster: LocalCluster, *nodes: str) -> dict[str, int]:
    """A job holding every GPU of each of ``nodes``, running; node -> job id."""
    jobs = {
        node: cluster.sbatch("-J", "blocker", "--gres=gpu:4", "-w", node, "--wrap", "sleep 600")
        for node in nodes
    }
    for job in jobs.values():
        wait_state(cluster, job, "RUNNING")
    return jobs
