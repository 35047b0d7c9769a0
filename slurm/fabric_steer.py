"""Steer a pending multi-node job onto the fabric cell the advisor chose, through Slurm's
topology/tree plugin, and read the tree back.

The advisor's fabric-placement recommendations (``proposed``: the nodes, the number of leaf
switches, the longest wait) become one ``scontrol update`` of a pending job, and for a running
job that opted in to migration (``migrate-job``) a requeue held, that update with
``StartTime=now``, and a release (:func:`requeue_steps`):

* ``ReqNodeList=a,b,...``: the nodes to run on (placing now);
* ``Switches=N@T``: at most ``N`` leaf switches, waiting at most ``T`` for them before Slurm
  takes more (holding for a tighter cell; without ``@T`` the cluster's default wait).

Slurm 22.05 (Debian 12's) takes both for a pending job and shows them in ``scontrol show job``
(``ReqNodeList=``, ``Switches=N@HH:MM:SS``; ``tests/slurm/test_fabric_tree.py``). ``Switches`` needs
``TopologyPlugin=topology/tree`` to mean anything, and the wait is capped by
``SchedulerParameters=max_switch_wait=SECONDS`` (300 s when not set): a longer ``@T`` is
accepted and silently cut to it, so :func:`steer_plan_notes` says when a wait will be cut.
Slurm's topology/block (``BlockName=`` lines) arrives in Slurm 23.11; on 22.05 a
block fabric can only be steered with ``ReqNodeList``.

:func:`steer_steps` builds the steps as :class:`~toposcope.rm.plan.CommandStep` argument
lists from checked values (the job id a whole number, node names host names, counts and
times bounded); :func:`steps_for` reads them off a recommendation; :func:`steer_plan` checks
them against the cluster as read (the job still pending and asking for no nodes of its own,
every node one Slurm starts its jobs on), as the backend's ``place`` does; :func:`read_topology`
parses ``scontrol show topology`` so that a test or an operator can verify the tree Slurm
runs with.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from toposcope.identity.names import check_node_name
from toposcope.report.recommendation import Recommendation, RecommendationKind
from toposcope.rm import ActionKind, ActionRequest, ResourceManagerError
from toposcope.rm.plan import CommandStep, Plan, Step, WaitStep
from toposcope.slurm.apply_options import DEFAULT_REQUEUE_WAIT_S, MIGRATABLE
from toposcope.slurm.control import InvalidChangeError, check_job_id
from toposcope.slurm.hostlist import expand_hostlist
from toposcope.slurm.migration import check_migration
from toposcope.slurm.records import ClusterState, PendingJob
from toposcope.slurm.refusals import no_longer, usable_target
from toposcope.slurm.views import job_id_of

#: the most leaf switches a steer may name, and the longest wait (Slurm's own bound: 24 h)
MAX_SWITCHES = 4096
MAX_WAIT_S = 86_400
#: Slurm's default ``max_switch_wait`` (seconds)
DEFAULT_MAX_SWITCH_WAIT_S = 300
#: the most nodes one steer may list
MAX_NODES = 10_000

_TOPOLOGY_LINE = re.compile(r"SwitchName=(\S+) Level=([0-9]+) LinkSpeed=\S+( .*)?")
_FIELD = re.compile(r"(Nodes|Switches)=(\S+)")


def switches_value(count: int, wait_s: float = 0.0) -> str:
    """``Switches=`` text: ``N`` or ``N@HH:MM:SS`` (``D-HH:MM:SS`` from a day on)."""
    if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= MAX_SWITCHES:
        raise InvalidChangeError(f"switch count {count!r} is not 1 to {MAX_SWITCHES}")
    if not math.isfinite(wait_s) or not 0 <= wait_s <= MAX_WAIT_S:
        raise InvalidChangeError(f"switch wait {wait_s!r} s is not 0 to {MAX_WAIT_S} s")
    seconds = math.ceil(wait_s)
    if seconds == 0:
        return str(count)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{count}@{days}-{clock}" if days else f"{count}@{clock}"


def steer_steps(
    job_id: int,
    nodes: Sequence[str] = (),
    switches: int | None = None,
    wait_s: float = 0.0,
    *,
    start_now: bool = False,
) -> tuple[CommandStep, ...]:
    """The ``scontrol update`` that steers pending job ``job_id`` (module docstring); nothing
    when there is nothing to set. ``start_now`` adds ``StartTime=now`` (a requeued job is
    otherwise held back by Slurm's requeue delay).
    """
    job = check_job_id(job_id)
    if len(nodes) > MAX_NODES:
        raise InvalidChangeError(f"{len(nodes):,} nodes: at most {MAX_NODES:,}")
    try:
        listed = ",".join(check_node_name(node) for node in nodes)
    except ValueError as exc:
        raise InvalidChangeError(str(exc)) from None
    assignments: list[str] = []
    if listed:
        assignments.append(f"ReqNodeList={listed}")
    if switches is not None:
        assignments.append(f"Switches={switches_value(switches, wait_s)}")
    if not assignments:
        return ()
    if start_now:
        assignments.append("StartTime=now")
    what = f"steer job {job} onto the fabric cell the advisor chose"
    return (CommandStep(("scontrol", "update", f"JobId={job}", *assignments), what),)


def requeue_steps(
    job_id: int,
    nodes: Sequence[str],
    switches: int | None = None,
    requeue_wait_s: float = DEFAULT_REQUEUE_WAIT_S,
) -> tuple[Step, ...]:
    """Move running job ``job_id`` onto ``nodes``: requeue it held, wait until Slurm has
    ended it (at most ``requeue_wait_s``), steer it (``ReqNodeList``, ``Switches``,
    ``StartTime=now``), release it; the shape the backend's migrations carry out.
    """
    job = check_job_id(job_id)
    if not nodes:
        raise InvalidChangeError(f"moving job {job} needs the nodes to move it to")
    ended = f'test -z "$(squeue -h -j {job} -t RUNNING,COMPLETING -o %i)"'
    return (
        CommandStep(("scontrol", "requeuehold", job), f"requeue job {job} held"),
        WaitStep(f"job {job} has left COMPLETING", requeue_wait_s, ("sh", "-c", ended)),
        *steer_steps(job_id, nodes, switches, start_now=True),
        CommandStep(("scontrol", "release", job), f"release job {job}"),
    )


def steps_for(recommendation: Recommendation) -> tuple[Step, ...]:
    """The steps of a fabric-placement recommendation (its target workload is the job): a
    ``place`` steers the pending job, a ``migrate-job`` requeues and steers the running one.
    """
    proposed = recommendation.proposed
    workload = recommendation.target.workload or ""
    nodes = proposed.get("nodes") or []
    switches = proposed.get("switches")
    wait = proposed.get("max_wait_s") or 0
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        raise InvalidChangeError("proposed nodes are not a list of node names")
    if switches is not None and not isinstance(switches, int):
        raise InvalidChangeError(f"proposed switches {switches!r} is not a count")
    if not isinstance(wait, int | float):
        raise InvalidChangeError(f"proposed wait {wait!r} is not a number of seconds")
    if recommendation.kind == RecommendationKind.MIGRATE_JOB:
        if proposed.get("joint") is True:
            jobs = proposed.get("jobs")
            count = len(jobs) if isinstance(jobs, list) else 0
            raise InvalidChangeError(
                f"{recommendation.id} moves {count} jobs at once (they trade nodes); Slurm "
                "requeues jobs one at a time, and the first to start again could take the "
                "nodes the others need, so toposcope does not apply half of it: requeue them "
                "together by hand (scontrol requeuehold on each, then update and release)"
            )
        if proposed.get("requeue") is not True:
            raise InvalidChangeError(
                f"{recommendation.id} moves other jobs through its actions, not by steering "
                f"{workload[:80]}"
            )
        return requeue_steps(job_id_of(workload), nodes, switches)
    return steer_steps(job_id_of(workload), nodes, switches, float(wait))


def steer_plan_notes(wait_s: float, max_switch_wait_s: float = DEFAULT_MAX_SWITCH_WAIT_S) -> str:
    """What the operator should know about a wait: empty, or that Slurm will cut it."""
    if wait_s <= max_switch_wait_s:
        return ""
    return (
        f"Slurm waits at most max_switch_wait ({max_switch_wait_s:.0f} s) for the switches: "
        f"set SchedulerParameters=max_switch_wait={math.ceil(wait_s)} in slurm.conf for the "
        f"{wait_s:.0f} s wait asked"
    )


def read_topology(text: str) -> dict[str, tuple[int, tuple[str, ...], tuple[str, ...]]]:
    """Switch -> (level, child switches, nodes) from ``scontrol show topology`` output.

    Each line reads ``SwitchName=s Level=N LinkSpeed=L [Nodes=...] [Switches=...]``; a
    switch above others lists all their nodes too. A malformed line is a ``ValueError``.
    """
    result: dict[str, tuple[int, tuple[str, ...], tuple[str, ...]]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _TOPOLOGY_LINE.fullmatch(line.strip())
        if match is None:
            raise ValueError(f"not a topology line: {line.strip()[:80]!r}")
        fields: Mapping[str, str] = dict(_FIELD.findall(match.group(3) or ""))
        children = tuple(expand_hostlist(fields["Switches"])) if "Switches" in fields else ()
        nodes = tuple(expand_hostlist(fields["Nodes"])) if "Nodes" in fields else ()
        result[match.group(1)] = (int(match.group(2)), children, nodes)
    return result


def steer_plan(recommendation: Recommendation, state: ClusterState) -> Plan:
    """The plan for a fabric-placement recommendation against ``state``: its steps, what was
    checked and what the operator should know; a refusal is raised as the contract's
    :class:`~toposcope.rm.errors.ResourceManagerError` (404/409, as ``place`` and ``migrate``
    refuse).
    """
    steps = steps_for(recommendation)
    workload = recommendation.target.workload or ""
    job_id = job_id_of(workload)
    nodes = [str(n) for n in recommendation.proposed.get("nodes") or []]
    moving = recommendation.kind == RecommendationKind.MIGRATE_JOB
    if moving:
        checked = _check_move(job_id, nodes, state)
        note = ""
    else:
        checked = _check_steer(job_id, nodes, state)
        note = steer_plan_notes(float(recommendation.proposed.get("max_wait_s") or 0))
    request = ActionRequest(
        f"{recommendation.id}-0",
        ActionKind.MIGRATE if moving else ActionKind.PLACE,
        workload,
        nodes[0] if nodes else None,
        reason=recommendation.summary,
    )
    return Plan(request, "slurm", steps, checked, notes=(note,) if note else ())


def _check_steer(job_id: int, nodes: Sequence[str], state: ClusterState) -> tuple[str, ...]:
    job = state.job(job_id)
    if not isinstance(job, PendingJob):
        raise no_longer(job_id, state, "pending", "place")
    if job.required_nodes:
        raise ResourceManagerError(
            f"job {job_id} already asks for nodes {','.join(job.required_nodes)} (its own "
            "--nodelist, or an earlier placement): toposcope steers only jobs without a node "
            "list",
            409,
            "node",
        )
    for node in nodes:
        usable_target(state, node, job_id, job.partition)
        if node in job.excluded_nodes:
            raise ResourceManagerError(f"job {job_id} excludes node {node}", 409, "node")
    _same_count(job_id, job.nodes, nodes)
    where = f"; nodes {','.join(nodes)} take jobs of partition {job.partition}" if nodes else ""
    return (f"job {job_id} is pending and asks for no node{where}",)


def _check_move(job_id: int, nodes: Sequence[str], state: ClusterState) -> tuple[str, ...]:
    job = None
    for node in nodes:
        job = check_migration(job_id, node, state)
    if job is None:
        raise InvalidChangeError(f"moving job {job_id} needs the nodes to move it to")
    _same_count(job_id, len(job.nodes), nodes)
    return (
        f"job {job_id} runs on {','.join(job.nodes)}, opted in ({MIGRATABLE}) and may be "
        f"requeued; nodes {','.join(nodes)} take jobs of partition {job.partition}",
    )


def _same_count(job_id: int, count: int, nodes: Sequence[str]) -> None:
    if nodes and len(nodes) != count:
        raise ResourceManagerError(
            f"job {job_id} has {count} node(s), the advice names {len(nodes)}", 409, "node"
        )
