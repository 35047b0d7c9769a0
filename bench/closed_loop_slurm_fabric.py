"""The fabric side of ``bench/closed_loop.py --rm slurm``: Slurm's tree, its read-back, and
the scoring with move costs.

For a scenario with a fabric (``fabric:`` with gang jobs), the loop's Slurm runs with
``TopologyPlugin=topology/tree`` and the ``topology.conf`` that ``toposcope slurm
topology-conf`` writes from the scenario's fabric (its nodes prefixed as the loop prefixes the
scenario's: :func:`topology_conf`); the advisor's ``fabric-placement`` reads that same file
(:func:`fabric_advice_arguments`). After the loop, :func:`slurm_records` reads Slurm's own
records back (``scontrol show job``: nodes, restarts, ``ReqNodeList``, ``Switches``) with
the leaf switches ``scontrol show topology`` puts each job's nodes under.

:func:`scored` judges both Slurm scenarios alike, as the simulator path does
(:mod:`toposcope.sim.judge`): each counted job's efficiency over its horizon (its remaining
time, at most ``--horizon``) minus the seconds its moves stood it still, for the advisor
(Slurm's requeue-to-running time of each move plus the checkpoint-restore the simulator
charges on restart) and for the oracle solved at the baseline (every rank of a gang it moves
restarts: :func:`~toposcope.sim.gang_oracle.gang_move_costs`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from toposcope.advisor.recommendations import HORIZON_S
from toposcope.cpulist import format_cpulist
from toposcope.fabric.jsonform import fabric_to_json
from toposcope.fabric.model import Fabric
from toposcope.hostlist import expand_hostlist
from toposcope.rm import Allocation
from toposcope.sim.cluster import SimCluster, checkpoint_restore_seconds
from toposcope.sim.gang_oracle import gang_move_costs
from toposcope.sim.jobs import JobSpec
from toposcope.sim.judge import horizon_total, ratios
from toposcope.sim.oracle import OracleResult
from toposcope.sim.slurm_mirror import MirroredJob
from toposcope.slurm.fabric_steer import read_topology
from toposcope.slurm.localcluster import LocalCluster

#: what the report says the oracle's total counts
ORACLE_BASIS = (
    "oracle solved at the baseline, each job's efficiency over its horizon less the "
    "checkpoint-restore of every job it moves (every rank of a moved gang)"
)
#: ``scontrol show job`` fields the report keeps
JOB_FIELDS = ("JobState", "NodeList", "ReqNodeList", "Switches", "Restarts", "NumNodes")


def prefixed_fabric(fabric: Fabric, prefix: str, path: Path) -> Path:
    """Write ``fabric`` with its node names prefixed as a fabric JSON file at ``path``."""
    document = fabric_to_json(fabric)
    for switch in document["switches"]:
        if "nodes" in switch:
            switch["nodes"] = [prefix + n for n in switch["nodes"]]
    for block in document["blocks"]:
        block["nodes"] = [prefix + n for n in block["nodes"]]
    for node in document["nodes"]:
        node["name"] = prefix + node["name"]
    path.write_text(json.dumps(document, indent=1) + "\n")
    return path


def topology_conf(fabric_file: Path) -> str:
    """Slurm's topology.conf as ``toposcope slurm topology-conf --file`` writes it."""
    argv = [sys.executable, "-m", "toposcope.cli", "slurm", "topology-conf", "--file"]
    done = subprocess.run(
        [*argv, str(fabric_file)], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"toposcope slurm topology-conf failed: {done.stderr[-1000:]}")
    return done.stdout


def fabric_advice_arguments(topology_conf_file: Path) -> list[str]:
    """``fabric-placement`` reading Slurm's own topology.conf; a job without a time limit
    (the simulated jobs run until stopped) is priced over the advisor's own horizon, as on
    the simulator path (:func:`loop_advisor.fabric_settings`).
    """
    return [
        "--policy", "fabric-placement",
        "--set", f"fabric-placement.fabric_file={topology_conf_file}",
        "--set", "fabric-placement.fabric_format=slurm-topology",
        "--set", f"fabric-placement.unknown_time_left_s={HORIZON_S:g}",
    ]  # fmt: skip


def show_job(text: str) -> dict[str, str]:
    """The ``Key=Value`` fields of one ``scontrol show job -o`` line that the report keeps."""
    fields: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key in JOB_FIELDS:
            fields[key] = value
    return fields


def slurm_records(
    slurm: LocalCluster, jobs: Iterable[MirroredJob], cluster: SimCluster
) -> list[dict[str, Any]]:
    """Slurm's record of every multi-node or restarted job, with the leaf switches its
    nodes hang under as ``scontrol show topology`` reads (a job Slurm forgot: none), and
    whether the record confirms where the simulator runs the job (:func:`confirms`).
    """
    tree = read_topology(slurm.command("scontrol", "show", "topology"))
    leaves = {
        node: name for name, (level, _, nodes) in tree.items() if level == 0 for node in nodes
    }
    placed = {s.name: s.allocation.node for s in cluster.job_states() if s.allocation}
    rows = []
    for job in jobs:
        if not (job.parts or job.restarts):
            continue
        shown = slurm.command("scontrol", "-o", "show", "job", str(job.job_id), check=False)
        fields = show_job(shown)
        ran = job.nodes[-1].split(",") if job.nodes else []
        rows.append(
            {
                "job": job.job_id,
                "name": job.scenario_name,
                "nodes_in_order": job.nodes,
                "restarts": job.restarts,
                "leaves_now": sorted({leaves.get(n, "?") for n in ran}),
                "scontrol": fields,
                "confirmed": confirms(fields, [placed.get(n) for n in job.names]),
            }
        )
    return rows


def confirms(fields: Mapping[str, str], simulated: Sequence[str | None]) -> bool:
    """Whether Slurm's record (``scontrol show job`` fields) says the job runs on exactly
    the nodes the simulator runs its parts on (``simulated``: each part's node, or none).
    """
    if fields.get("JobState") != "RUNNING" or None in simulated:
        return False
    try:
        nodes = set(expand_hostlist(fields.get("NodeList", "")))
    except ValueError:
        return False
    return bool(nodes) and nodes == set(simulated)


def useless(
    sent: Iterable[tuple[str, str]],
    parts: Mapping[str, Sequence[str]],
    before: Mapping[str, float],
    after: Mapping[str, float],
) -> set[str]:
    """The workloads of the applied actions ``sent`` ((workload, kind) pairs) none of whose
    simulated parts (``parts``) ran faster in the truth ``after`` than ``before``.
    """
    return {
        workload
        for workload, _ in sent
        if not any(after.get(n, 0.0) > before.get(n, 0.0) for n in parts.get(workload, ()))
    }


def advisor_paused(
    cluster: SimCluster, jobs: Iterable[MirroredJob], moves: Mapping[str, Sequence[float]]
) -> dict[str, float]:
    """Seconds each simulated workload stood still for the moves Slurm made: for each move of
    a job that Slurm restarted, its requeue-to-running time (``moves``: per job, one figure
    per move) plus the checkpoint-restore its restart costs in the simulator (every part of
    a gang: the gang waits for its slowest part).
    """
    specs = {s.name: s.spec for s in cluster.job_states()}
    paused: dict[str, float] = {}
    for job in jobs:
        seconds = moves.get(job.workload, ())
        if not seconds or not job.restarts:
            continue
        names = [n for n in job.names if n in specs]
        restore = max((checkpoint_restore_seconds(specs[n]) for n in names), default=0.0)
        for name in names:
            paused[name] = sum(seconds) + restore * len(seconds)
    return paused


def scored(
    before: Mapping[str, float],
    after: Mapping[str, float],
    kept: Mapping[str, float],
    horizons: Mapping[str, float],
    paused: Mapping[str, float],
    oracle: OracleResult,
    start: Mapping[str, Allocation | None],
    specs: Mapping[str, JobSpec],
    cluster: SimCluster,
) -> dict[str, Any]:
    """Gain and ratio against the oracle with move costs (see the module docstring)."""
    base_total = sum(before.get(n, 0.0) / v for n, v in kept.items())
    after_eff = {n: after.get(n, 0.0) / v for n, v in kept.items()}
    advisor_total = horizon_total(after_eff, paused, horizons)
    costs = gang_move_costs(oracle.allocations, start, specs, cluster.gangs)
    kept_costs = {n: c for n, c in costs.items() if n in kept}
    oracle_total = horizon_total(oracle.efficiencies, kept_costs, horizons)
    no_costs = sum(oracle.efficiencies.get(n, 0.0) for n in kept)
    result = ratios(base_total, advisor_total, oracle_total, float(len(kept)))
    plain = ratios(base_total, sum(after_eff.values()), no_costs, float(len(kept)))
    return {
        "gain": round(result.gain, 4),
        "oracle_gain": round(result.oracle_gain, 4),
        "ratio": round(result.ratio, 4),
        "ratio_to_bound": round(result.ratio_to_bound, 4),
        "oracle_basis": ORACLE_BASIS,
        "oracle_move_costs_s": {n: round(c, 1) for n, c in sorted(kept_costs.items())},
        "advisor_paused_s": {n: round(c, 1) for n, c in sorted(paused.items()) if n in kept},
        "ratio_without_move_costs": round(plain.ratio, 4),
        "aggregate_before": round(base_total, 4),
        "aggregate_after": round(advisor_total, 4),
        "aggregate_oracle": round(oracle_total, 4),
    }


def job_rows(
    cluster: SimCluster,
    kept: Mapping[str, float],
    before: Mapping[str, float],
    start: Mapping[str, Allocation | None],
    oracle: OracleResult,
) -> list[dict[str, Any]]:
    """Per counted job: where it ran at the baseline, now and in the oracle's solution, with
    its efficiency in each (what a reader needs to see what the oracle did that Slurm did not).
    """
    now = {s.name: s.allocation for s in cluster.job_states()}
    after = {row.name: row.throughput for row in cluster.truth()}

    def where(allocation: Allocation | None) -> str | None:
        if allocation is None:
            return None
        gpus = ",".join(map(str, allocation.gpus))
        return f"{allocation.node} gpus {gpus} cpus {format_cpulist(allocation.cpus)}"

    return [
        {
            "name": name,
            "before": where(start.get(name)),
            "after": where(now.get(name)),
            "oracle": where(oracle.allocations.get(name)),
            "efficiency_before": round(before.get(name, 0.0) / ideal, 4),
            "efficiency_after": round(after.get(name, 0.0) / ideal, 4),
            "efficiency_oracle": round(oracle.efficiencies.get(name, 0.0), 4),
        }
        for name, ideal in sorted(kept.items())
    ]
