"""Slurm as the simulator's scheduler: submit the scenario's jobs, mirror where Slurm runs them.

:class:`SlurmMirror` drives a :class:`~toposcope.sim.slurm_cluster.SlurmMirroredCluster`
from a real Slurm cluster, through Slurm's commands only (argument lists, never a shell):

* each scenario job is submitted when its ``submit_time`` comes, with ``sbatch --wrap
  "sleep infinity"`` (the simulator, being the hardware, decides when the work is done),
  ``--job-name`` (the scenario's name), ``--gres=gpu:K``, ``-c`` (its threads) and, for GPU
  training jobs, the migration opt-in of docs/slurm.md (``--requeue
  --comment=toposcope:migratable``). In the simulator the job becomes workload
  ``slurm-job-<id>``, the name the Slurm backend and the exporter give it. With an
  ``announce_s`` lead, a job due within that many simulated seconds is submitted at once with
  ``--begin`` at its arrival, as users queue work to start later: Slurm holds it pending
  (reason ``BeginTime``) and decides its node only when it starts, so until then the advisor
  can steer it (``ReqNodeList``);
* a scenario job with a placement is submitted with ``--nodelist`` its node (the user's own
  choice: Slurm still picks its GPUs and CPUs there), and a gang of the scenario's fabric as
  one job of as many nodes as it has parts (:mod:`toposcope.sim.slurm_gangs`), mirrored part
  by part onto the nodes Slurm gave it;
* every :meth:`~SlurmMirror.step` reads Slurm's view with ``toposcope slurm show --format
  json`` (the Slurm part's one decoder of ``squeue``/``scontrol -d``) and mirrors it: a running
  job runs in the simulator on Slurm's node, CPU ids (Slurm's abstract ids, turned into the
  template's Linux ids) and GPU indices; a requeued job goes back to pending and, when Slurm
  starts it again (maybe elsewhere), pays its checkpoint-restore time; a job Slurm no longer
  runs or queues is done;
* a job whose work the simulator finished is cancelled in Slurm (``scancel``).

:meth:`~SlurmMirror.jobs` keeps Slurm's own view of each job (nodes it ran on, restarts).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from toposcope.errors import ConfigError
from toposcope.identity.names import check_node_name
from toposcope.rm import Allocation
from toposcope.runcommand import CommandError, run_command
from toposcope.sim.gang_price import FabricPrices, Gang
from toposcope.sim.jobs import JobKind, JobSpec
from toposcope.sim.slurm_cluster import SlurmMirroredCluster
from toposcope.sim.slurm_gangs import assign, gang_jobs, register
from toposcope.topology.cores import slurm_cpu_order

LOG = logging.getLogger("toposcope.sim.slurm")

#: The comment word by which a job opts in to migration (docs/slurm.md).
MIGRATABLE = "toposcope:migratable"
#: The most bytes a command may print.
MAX_OUTPUT = 16 * 1024 * 1024
#: Slurm job states after which a job never runs again (any other state that is neither
#: running nor pending, such as COMPLETING or REQUEUED, is a job on its way back to the queue).
FINAL_STATES = frozenset(
    {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
     "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}
)  # fmt: skip
#: The most nodes one submitted job may ask for.
MAX_JOB_NODES = 64
_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class SlurmCommandError(RuntimeError):
    """A Slurm command failed or printed something unexpected; the message says which."""


class SlurmRunner:
    """Runs the Slurm commands (and ``toposcope slurm show``) against one cluster."""

    def __init__(self, slurm_conf: str | Path, *, timeout_s: float = 30.0) -> None:
        self.slurm_conf = Path(slurm_conf)
        self.timeout_s = timeout_s
        beside = Path(sys.executable).parent / "toposcope"
        found = str(beside) if beside.exists() else shutil.which("toposcope")
        if found is None:
            raise ConfigError("the toposcope command is not installed next to this Python")
        self.toposcope = found

    def run(self, *argv: str) -> str:
        """Run ``argv`` with ``SLURM_CONF`` set; its output (:class:`SlurmCommandError`)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.slurm_conf)
        try:
            return run_command(
                argv,
                shown=" ".join(argv[:3]),
                timeout_s=self.timeout_s,
                max_output=MAX_OUTPUT,
                env=env,
                error_chars=500,
            )
        except CommandError as exc:
            raise SlurmCommandError(str(exc)) from None

    def submit(
        self,
        job: JobSpec,
        slurm_name: str,
        cpus: int,
        begin_in_s: int = 0,
        *,
        nodes: int = 1,
        nodelist: str = "",
    ) -> int:
        """Submit ``job`` as a sleeping batch job, eligible ``begin_in_s`` seconds from now,
        on ``nodes`` nodes (``job``'s GPUs and CPUs on each), on ``nodelist`` when given; its
        Slurm job id.
        """
        if _JOB_NAME.fullmatch(slurm_name) is None:
            raise ConfigError(f"job name {slurm_name[:80]!r} is not fit for Slurm")
        if not 1 <= nodes <= MAX_JOB_NODES:
            raise ConfigError(f"a job of {nodes} nodes: 1 to {MAX_JOB_NODES}")
        argv = [
            "sbatch",
            "--parsable",
            f"--job-name={slurm_name}",
            "--output=/dev/null",
            "--chdir=/",
            f"--cpus-per-task={max(cpus, 1)}",
        ]
        if nodes > 1:
            argv += [f"--nodes={nodes}", "--ntasks-per-node=1"]
        if nodelist:
            try:
                argv.append(f"--nodelist={check_node_name(nodelist)}")
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        if job.gpus:
            argv.append(f"--gres=gpu:{job.gpus}")
        if job.kind is JobKind.GPU_TRAIN:
            argv += ["--requeue", f"--comment={MIGRATABLE}"]
        if begin_in_s > 0:
            argv.append(f"--begin=now+{begin_in_s}")
        text = self.run(*argv, "--wrap", "sleep infinity").strip()
        first = text.split(";")[0]
        if not first.isdigit():
            raise SlurmCommandError(f"sbatch printed {text[:80]!r}, not a job id")
        return int(first)

    def cancel(self, job_ids: list[int]) -> None:
        """Cancel jobs (ids are whole numbers by construction)."""
        if job_ids:
            self.run("scancel", *map(str, job_ids))

    def show(self) -> dict[str, Any]:
        """Slurm's nodes and jobs as ``toposcope slurm show --format json`` prints them."""
        text = self.run(self.toposcope, "slurm", "show", "--format", "json")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SlurmCommandError(f"toposcope slurm show printed no JSON: {exc}") from None
        if not isinstance(data, dict):
            raise SlurmCommandError("toposcope slurm show printed no JSON object")
        return data


@dataclass
class MirroredJob:
    """One scenario job as Slurm ran it."""

    job_id: int
    scenario_name: str
    workload: str
    state: str = "PENDING"
    nodes: list[str] = field(default_factory=list)
    restarts: int = 0
    cancelled_by_sim: bool = False
    #: a gang's simulated parts, one per node (empty: the job is the one workload)
    parts: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The simulated workloads of the job."""
        return self.parts or (self.workload,)


class SlurmMirror:
    """Submits a scenario's jobs to Slurm and mirrors Slurm's allocations into the cluster."""

    def __init__(
        self,
        cluster: SlurmMirroredCluster,
        jobs: list[JobSpec],
        runner: SlurmRunner,
        *,
        announce_s: float = 0.0,
        gangs: Iterable[Gang] = (),
        prices: FabricPrices | None = None,
        pinned: Mapping[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.runner = runner
        self.announce_s = announce_s
        self._gang_of = gang_jobs(gangs, {j.name: j for j in jobs})
        if self._gang_of and prices is None:
            raise ConfigError("gang jobs need the fabric's prices")
        self._prices = prices
        self._pinned = dict(pinned or {})
        self._waiting = sorted(jobs, key=lambda j: (j.submit_time, j.name))
        self._jobs: dict[int, MirroredJob] = {}
        self._lock = threading.Lock()
        self._cpu_order: dict[str, tuple[int, ...]] = {}
        self._max_cpus = max(
            (len(cluster.template_of(n).cpus) for n in cluster.node_names()), default=1
        )

    def jobs(self) -> list[MirroredJob]:
        """Every submitted job with Slurm's view of it (copies, by job id)."""
        with self._lock:
            return [replace(j, nodes=list(j.nodes)) for _, j in sorted(self._jobs.items())]

    def step(self) -> None:
        """Submit what is due, read Slurm once and mirror it (one round)."""
        with self._lock:
            now = self.cluster.sync()
            while self._waiting and self._waiting[0].submit_time <= now + self.announce_s:
                self._submit(self._waiting.pop(0), now)
            self._mirror(self.runner.show())
            self._cancel_finished()

    def _submit(self, job: JobSpec, now: float) -> None:
        gang = self._gang_of.get(job.name)
        slurm_name = (gang.gang.name if gang else job.name).removesuffix(".service")
        wait_s = self.cluster.clock.real_seconds_until(job.submit_time) or 0.0
        job_id = self.runner.submit(
            job,
            slurm_name,
            min(job.threads, self._max_cpus),
            math.ceil(wait_s),
            nodes=gang.nodes if gang else 1,
            nodelist="" if gang else self._pinned.get(job.name, ""),
        )
        workload = f"slurm-job-{job_id}"
        if gang is None or self._prices is None:
            self.cluster.submit(replace(job, name=workload, submit_time=now))
            self._jobs[job_id] = MirroredJob(job_id, slurm_name, workload)
        else:
            # the gang's other parts are this one submission
            self._waiting = [j for j in self._waiting if j.name not in gang.gang.parts]
            parts = register(self.cluster, self._prices, gang, workload)
            for part in parts:
                self.cluster.submit(replace(gang.spec, name=part, submit_time=now))
            self._jobs[job_id] = MirroredJob(job_id, slurm_name, workload, parts=parts)
        LOG.info("submitted %s as Slurm job %d", slurm_name, job_id)

    def _mirror(self, state: dict[str, Any]) -> None:
        running = {int(j["job_id"]): j for j in state.get("running", [])}
        pending = {int(j["job_id"]) for j in state.get("pending", [])}
        others = {int(pair[0]): str(pair[1]) for pair in state.get("other_states", [])}
        for job_id, job in self._jobs.items():
            if job.state == "DONE":
                continue
            if job_id in running:
                self._follow(job, running[job_id])
            elif job_id in pending or others.get(job_id, "COMPLETED") not in FINAL_STATES:
                job.state = "PENDING"
                for name in job.names:
                    self.cluster.requeue(name)
            else:
                job.state = "DONE"
                for name in job.names:
                    self.cluster.end(name)

    def _follow(self, job: MirroredJob, record: dict[str, Any]) -> None:
        job.state = "RUNNING"
        restarts = int(record.get("restarts", 0))
        if job.parts:
            self._follow_gang(job, record, restarts)
            return
        job.restarts = restarts
        allocation = self._allocation(job.job_id, record["allocations"][0])
        if allocation is not None and self.cluster.run_on(job.workload, allocation):
            job.nodes.append(allocation.node)
            LOG.info(
                "Slurm job %d runs on %s, GPUs %s", job.job_id, allocation.node, allocation.gpus
            )

    def _allocation(self, job_id: int, record: dict[str, Any]) -> Allocation | None:
        """One node's allocation as the simulator reads it (``None``: a node it lacks)."""
        node = str(record["node"])
        if node not in self.cluster.node_names():
            LOG.warning("Slurm runs job %d on %s, which the simulator lacks", job_id, node)
            return None
        order = self._cpu_order.get(node)
        if order is None:
            order = slurm_cpu_order(self.cluster.template_of(node).topology)
            self._cpu_order[node] = order
        cpus = [order[c] for c in record["cpus"] if 0 <= c < len(order)]
        gpus = [int(g) for g in record.get("gpus", [])]
        return Allocation(node, cpus, [], gpus)

    def _follow_gang(self, job: MirroredJob, record: dict[str, Any], restarts: int) -> None:
        """Run a gang's parts on the nodes Slurm gave its job; a restart Slurm made
        while the mirror did not see the job pending restarts every part.
        """
        found = [self._allocation(job.job_id, a) for a in record["allocations"]]
        allocations = [a for a in found if a is not None]
        if len(allocations) != len(job.parts):
            LOG.warning(
                "Slurm runs job %d on %d node(s), not %d", job.job_id, len(found), len(job.parts)
            )
            return
        if restarts > job.restarts:
            for part in job.parts:
                self.cluster.requeue(part)
        job.restarts = restarts
        current = {s.name: s.allocation for s in self.cluster.job_states() if s.name in job.parts}
        moved = False
        for part, allocation in assign(job.parts, allocations, current).items():
            moved = self.cluster.run_on(part, allocation) or moved
        if moved:
            job.nodes.append(",".join(a.node for a in allocations))
            LOG.info("Slurm job %d runs on %s", job.job_id, job.nodes[-1])

    def _cancel_finished(self) -> None:
        done = self.cluster.done_names()
        finished = [
            j for j in self._jobs.values()
            if all(n in done for n in j.names) and j.state != "DONE" and not j.cancelled_by_sim
        ]  # fmt: skip
        if finished:
            self.runner.cancel([j.job_id for j in finished])
            for job in finished:
                job.cancelled_by_sim = True

    def run(self, stop: threading.Event, interval_s: float = 1.0) -> None:
        """Step every ``interval_s`` until ``stop`` is set; a failed round is logged, not fatal."""
        while not stop.is_set():
            try:
                self.step()
            except (SlurmCommandError, KeyError, ValueError, TypeError) as exc:
                LOG.warning("mirroring Slurm failed this round: %s", exc)
            stop.wait(interval_s)
