"""The toposcope policy's decisions in trace replay, each one the advisor's rule.

* **Which set**: the advisor's GPU-set ranking (:func:`trace_policies.ranked`).
* **Wait or place now** (:func:`toposcope.advisor.placement_wait.wait_pays`): a job whose
  best free set is worse (by the advisor's link factors) than the best set its size can get
  on this cluster waits for that set when the expected wait is shorter than the time the
  worse set would add to its run. The expected wait comes from when each GPU should be free:
  now if free, else when its job should end (start plus its declared run time, scaled by the
  advisor's factor of its set), or when a job ahead in the queue that waits for it should
  end. A waiting job reserves the set it waits for: jobs behind it in the queue do not take
  those GPUs unless they should end before it starts (backfill).
* **Pin**: CPUs and memory of the one NUMA node holding most of the job's GPUs, as
  job-migration and numa-pinning pin a GPU job
  (:func:`~toposcope.advisor.policies.migration_recommendations.gpu_numa_pin`), when its
  busy cores and memory fit there with what is already pinned; else the NUMA nodes of all
  its GPUs, as gpu-placement pins.

The declared run time is the trace's run time at the best placement, as a resource manager's
time limit would give it (an exact one: an optimistic estimate).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from trace_policies import Choice, model_of, ranked

from toposcope.advisor.gpu_sets import Placement, rank_sets
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.placement_wait import calibrated_scale, wait_pays
from toposcope.advisor.policies.migration_recommendations import gpu_numa_pin
from toposcope.sim.jobs import JobSpec
from toposcope.sim.templates import NodeTemplate

#: free memory a pin needs per byte of the job's (numa-pinning's ``memory_headroom``)
MEMORY_HEADROOM = 1.1

_PLACEMENTS: dict[tuple[str, tuple[int, ...]], Placement] = {}
_IDEAL: dict[tuple[tuple[str, ...], int], float] = {}


def _placement(template: NodeTemplate, gpus: tuple[int, ...]) -> Placement:
    """The advisor's ranking of one GPU set on a machine type (kept: sets recur)."""
    key = (template.name, gpus)
    if key not in _PLACEMENTS:
        _PLACEMENTS[key] = rank_sets(model_of(template), gpus, len(gpus))[0]
    return _PLACEMENTS[key]


def set_factor(template: NodeTemplate, gpus: tuple[int, ...]) -> float:
    """The advisor's step-time factor of a GPU set (its worst link's)."""
    return _placement(template, gpus).factor()


def best_factor(template: NodeTemplate, free: frozenset[int], gpus: int) -> float:
    """The advisor's factor of the best ``gpus`` GPUs among ``free`` (``inf``: none)."""
    found = ranked(gpus, [template.name], {template.name: free}, {template.name: template})
    return math.inf if found is None else set_factor(template, found[1])


def worst_link(template: NodeTemplate, gpus: tuple[int, ...]) -> str:
    """The advisor's worst link of a set, as text (``one`` for a single GPU)."""
    link = _placement(template, gpus).worst_link
    return str(link) if link is not None else "one"


@dataclass
class LinkCalibration:
    """The link prior calibrated by finished jobs (the advisor's ``calibrated_scale``):
    per worst link, (estimated, measured) slowdown pairs of jobs that ran on one set, the
    estimate the prior's factor over the best set's, the measurement the run time they took
    over their declared run time.
    """

    pairs: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    scales: dict[str, float] = field(default_factory=dict)

    def observe(self, link: str, estimated: float, measured: float) -> None:
        """Add one finished job's slowdowns (both as ``factor - 1``)."""
        self.pairs.setdefault(link, []).append((estimated, measured))
        self.scales.pop(link, None)

    def scale(self, link: str) -> float:
        """The calibrated multiplier of the prior's slowdown for sets of ``link``."""
        if link not in self.scales:
            self.scales[link] = calibrated_scale(self.pairs.get(link, []))
        return self.scales[link]


@dataclass(frozen=True)
class Wait:
    """Why :func:`decide` let a job wait in one pass: the inputs of ``wait_pays`` (``factor``
    ``inf`` when no usable set was free, ``wait`` ``inf`` when no better set is expected)
    and the set it reserves (``reserved``, to start at ``start``; ``None`` when none is
    expected). Kept so that the replay can be checked against the rule.
    """

    job: str
    run: float
    factor: float
    ideal: float
    wait: float
    gpus: int
    waiting: int
    reserved: Choice | None
    start: float


@dataclass
class Plan:
    """One scheduling pass: when each GPU should be free, the sets jobs wait for, and why
    each job that waits does (``waits``, in decision order).
    """

    now: float
    templates: Mapping[str, NodeTemplate]
    #: node -> GPU -> expected time it is free
    avail: dict[str, dict[int, float]]
    #: node -> GPUs reserved by waiting jobs, with the earliest time one should start
    reserved: dict[str, dict[int, float]] = field(default_factory=dict)
    calibration: LinkCalibration = field(default_factory=LinkCalibration)
    #: the other jobs in the queue (waiting for GPU time the decided job's set holds)
    waiting: int = 0
    waits: list[Wait] = field(default_factory=list)

    def ideal(self, gpus: int) -> float:
        """The best factor a job of ``gpus`` GPUs can get on any (empty) machine here."""
        key = (tuple(sorted({t.name for t in self.templates.values()})), gpus)
        if key not in _IDEAL:
            _IDEAL[key] = self._ideal(gpus)
        return _IDEAL[key]

    def _ideal(self, gpus: int) -> float:
        machines = {t.name: t for t in self.templates.values() if len(t.gpus) >= gpus}
        return min(
            (best_factor(t, frozenset(g.index for g in t.gpus), gpus) for t in machines.values()),
            default=math.inf,
        )

    def factor(self, node: str, gpus: tuple[int, ...], ideal: float) -> float:
        """The calibrated factor of ``gpus`` on ``node``: the prior's slowdown over
        ``ideal`` scaled by what finished jobs on such sets measured.
        """
        template = self.templates[node]
        prior = set_factor(template, gpus)
        return ideal + (prior - ideal) * self.calibration.scale(worst_link(template, gpus))

    def earliest(self, gpus: int, target: float) -> tuple[float, str, tuple[int, ...]] | None:
        """(time, node, set) when a set of ``gpus`` GPUs with a factor of at most ``target``
        should first be free.
        """
        found: tuple[float, str, tuple[int, ...]] | None = None
        for node, times in self.avail.items():
            template = self.templates[node]
            if len(template.gpus) < gpus:
                continue
            for when in sorted(set(times.values())):
                if found is not None and when >= found[0]:
                    break
                ready = frozenset(g for g, t in times.items() if t <= when)
                choice = ranked(gpus, [node], {node: ready}, self.templates)
                if choice is not None and set_factor(template, choice[1]) <= target:
                    found = (when, node, choice[1])
                    break
        return found

    def reserve(self, node: str, gpus: tuple[int, ...], start: float, run: float) -> None:
        """Hold ``gpus`` of ``node`` for a job waiting to start at ``start`` for ``run``; a
        GPU several waiting jobs hold keeps the earliest start (a later reservation must not
        release it to a job that would delay the earlier one).
        """
        held = self.reserved.setdefault(node, {})
        for g in gpus:
            self.avail[node][g] = start + run
            held[g] = min(held.get(g, math.inf), start)

    def usable(self, free: Mapping[str, frozenset[int]], ends: float) -> dict[str, frozenset[int]]:
        """The free GPUs a job that should end at ``ends`` may take: all but those reserved
        for waiting jobs that should start before it ends.
        """
        return {
            node: frozenset(g for g in gpus if self.reserved.get(node, {}).get(g, math.inf) >= ends)
            for node, gpus in free.items()
        }


def plan_for(
    now: float,
    templates: Mapping[str, NodeTemplate],
    free: Mapping[str, frozenset[int]],
    held: Mapping[str, Choice],
    specs: Mapping[str, JobSpec],
    started: Mapping[str, float],
    calibration: LinkCalibration,
) -> Plan:
    """A pass's starting point: each GPU free now or when its job should end."""
    avail = {node: {g: now for g in gpus} for node, gpus in free.items()}
    plan = Plan(now, templates, avail, calibration=calibration)
    for name, (node, gpus) in held.items():
        ideal = plan.ideal(len(gpus))
        stretch = plan.factor(node, gpus, ideal) / ideal if len(gpus) > 1 else 1.0
        end = max(now, started[name] + (specs[name].duration or 0.0) * stretch)
        for g in gpus:
            avail[node][g] = end
    return plan


def decide(plan: Plan, job: JobSpec, free: Mapping[str, frozenset[int]]) -> Choice | None:
    """Where ``job`` starts now, or ``None`` to wait (reserving the set it waits for, and
    saying why in ``plan.waits``).
    """
    run = job.duration or 0.0
    ideal = plan.ideal(job.gpus)
    usable = plan.usable(free, plan.now + run)
    able = [n for n in usable if len(usable[n]) >= job.gpus]
    choice = ranked(job.gpus, able, usable, plan.templates)
    factor = math.inf if choice is None else plan.factor(choice[0], choice[1], ideal)
    if choice is not None and factor <= ideal:
        return choice
    later = plan.earliest(job.gpus, ideal)
    wait = math.inf if later is None else later[0] - plan.now
    if choice is not None and not wait_pays(
        run, factor, ideal, wait, gpus=job.gpus, waiting=plan.waiting
    ):
        return choice
    if later is not None:
        plan.reserve(later[1], later[2], later[0], run)
    reserved = None if later is None else (later[1], later[2])
    start = math.inf if later is None else later[0]
    plan.waits.append(
        Wait(job.name, run, factor, ideal, wait, job.gpus, plan.waiting, reserved, start)
    )
    return None


def home_pin(
    template: NodeTemplate,
    node: str,
    gpus: tuple[int, ...],
    job: JobSpec,
    pinned: Mapping[int, tuple[float, float]],
) -> tuple[list[int], list[int]]:
    """The job's CPUs and memory node: its GPUs' home NUMA node when ``pinned`` there
    (busy cores, bytes already pinned per NUMA node) leaves room; ``([], [])`` when not.
    """
    cluster = ClusterModel({node: model_of(template, node)})
    cpus, mems = gpu_numa_pin(cluster, node, gpus, True)
    if not mems:
        return [], []
    numa = next(n for n in template.topology.numa_nodes if n.id == mems[0])
    cores, used = pinned.get(numa.id, (0.0, 0.0))
    if cores + job.threads * job.cpu_busy > len(numa.cpus):
        return [], []
    if (used + job.memory_bytes) * MEMORY_HEADROOM > numa.memory_bytes:
        return [], []
    return cpus, mems
