"""The cluster oracle: the best joint allocation of every job that the model allows.

:func:`toposcope.sim.node_oracle.best_allocation` answers "where would this one job run best";
the closed-loop evaluation (``bench/closed_loop.py``) needs the cluster-wide answer: which
allocation of *all* jobs at once gives the highest aggregate throughput, counting the
interactions the model has between co-runners (CPU contention on shared CPUs, GPU
time-slicing). That is what an advisor could reach at best, and its gain is the yardstick
for the advisor's.

**Aggregate.** Each job with a non-zero ideal throughput counts ``throughput / ideal``,
where ``ideal`` is its best throughput alone on any node of the cluster
(:meth:`SimCluster.ideal_throughput`): every job counts 1 at its best, so jobs of different
kinds and sizes weigh the same, and a job that waits (pending) counts 0. Jobs whose ideal is
0 (notebooks) do not count, but they hold GPUs and CPUs.

**What the oracle may change** is what the resource-manager actions can do: pin a job's
CPUs and memory (``pin``, ``migrate-memory``), move it to other free GPUs on any node
(``migrate``), start a pending job on free GPUs (``place``), and take GPUs from a job
(``release``: a notebook keeps running without them). GPUs are never given to two jobs
(``place`` and ``migrate`` refuse held GPUs), so the oracle does not create GPU sharing;
sharing already present stays unless a job is moved. Memory is bounded too: a memory
binding is chosen only where the bound NUMA nodes hold the job's footprint next to what
the node's other jobs use (:func:`~toposcope.sim.placement.memory_fits`); unbound memory
spills as the model says.

**Search.** Each job's candidate allocations on each node are scored exhaustively (GPU
subsets of the node's free GPUs x CPU sets x memory bindings, as
:func:`~toposcope.sim.candidates.candidate_allocations`), the most promising few per node
re-scored with their effect on the node's other jobs. Jobs are (re)inserted one at a time
where they add the most to the aggregate, until no single job's move improves it (a local
optimum), from two starting points: the current allocation, and an empty cluster filled
largest-first. The upper bound is the most jobs that could each run at their ideal within
the cluster's GPU count (a knapsack over GPU demands); when the search reaches it, the result
is optimal (``exact``), otherwise it is the best found.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from toposcope.rm import Allocation
from toposcope.sim.candidates import candidate_allocations, candidate_count
from toposcope.sim.cluster import DONE, PENDING, RUNNING, JobState, SimCluster
from toposcope.sim.jobs import JobSpec
from toposcope.sim.model import CoRunner, evaluate
from toposcope.sim.node_oracle import greedy_allocation
from toposcope.sim.nodetemplate import NodeTemplate
from toposcope.sim.placement import memory_fits, memory_use

#: candidate allocations per job and node scored exhaustively; beyond, the greedy choice
EXHAUSTIVE_LIMIT = 20_000
#: best own-score candidates per node re-scored with their effect on co-runners
RESCORE = 4
#: improvement below this is noise
EPSILON = 1e-9


@dataclass(frozen=True)
class OracleResult:
    """The best joint allocation found and its aggregate (see the module docstring).

    ``baseline`` is the aggregate of the allocation the oracle started from (the cluster's
    now), ``total`` the best found, ``upper_bound`` the knapsack bound, ``exact`` whether
    ``total`` reaches it. ``allocations`` maps every counted or GPU-holding job to its
    allocation in the best solution (``None``: pending), ``efficiencies`` the counted jobs
    to ``throughput / ideal``.
    """

    baseline: float
    total: float
    upper_bound: float
    exact: bool
    allocations: Mapping[str, Allocation | None]
    efficiencies: Mapping[str, float]
    jobs: int
    evaluations: int
    seconds: float

    @property
    def gain(self) -> float:
        """``total / baseline - 1``: the best improvement reachable (``inf`` from 0)."""
        if self.baseline <= 0:
            return math.inf if self.total > 0 else 0.0
        return self.total / self.baseline - 1.0


def aggregate(
    jobs: Iterable[JobState], ideal: Mapping[str, float], throughput: Mapping[str, float]
) -> float:
    """Sum of ``throughput / ideal`` over the jobs in ``ideal`` (missing throughput: 0)."""
    return sum(throughput.get(j.name, 0.0) / ideal[j.name] for j in jobs if j.name in ideal)


class _Search:
    """Mutable joint allocation with incremental scoring."""

    def __init__(
        self,
        templates: Mapping[str, NodeTemplate],
        specs: Mapping[str, JobSpec],
        ideal: Mapping[str, float],
    ) -> None:
        self.templates = templates
        self.specs = specs
        self.ideal = ideal
        self.alloc: dict[str, Allocation | None] = {}
        self.on_node: dict[str, set[str]] = {n: set() for n in templates}
        self.evaluations = 0

    def load(self, allocations: Mapping[str, Allocation | None]) -> None:
        """Start from ``allocations`` (every job, ``None`` for pending)."""
        self.alloc = dict(allocations)
        self.on_node = {n: set() for n in self.templates}
        for name, alloc in self.alloc.items():
            if alloc is not None:
                self.on_node[alloc.node].add(name)

    def co_runners(self, node: str, exclude: str = "") -> list[CoRunner]:
        """The jobs on ``node`` other than ``exclude`` with their allocations."""
        result: list[CoRunner] = []
        for name in sorted(self.on_node[node]):
            alloc = self.alloc[name]
            if name != exclude and alloc is not None:
                result.append((self.specs[name], alloc))
        return result

    def efficiency(self, name: str, alloc: Allocation, co: Sequence[CoRunner]) -> float:
        """``throughput / ideal`` of job ``name`` under ``alloc`` with ``co``."""
        self.evaluations += 1
        perf = evaluate(self.specs[name], alloc, self.templates[alloc.node], co)
        return perf.throughput / self.ideal[name] if name in self.ideal else 0.0

    def node_value(self, node: str, extra: tuple[str, Allocation] | None = None) -> float:
        """Aggregate of the counted jobs on ``node`` (with ``extra`` added)."""
        members = [(n, self.alloc[n]) for n in sorted(self.on_node[node])]
        if extra is not None:
            members.append(extra)
        total = 0.0
        for name, alloc in members:
            if name not in self.ideal or alloc is None:
                continue
            co = [(self.specs[m], a) for m, a in members if m != name and a is not None]
            total += self.efficiency(name, alloc, co)
        return total

    def total(self) -> float:
        """Aggregate over the whole cluster."""
        return sum(self.node_value(n) for n in self.templates)

    def free_gpus(self, node: str, exclude: str = "") -> list[int]:
        """GPUs of ``node`` no job other than ``exclude`` holds."""
        held = {
            g
            for name in self.on_node[node]
            if name != exclude and (a := self.alloc[name]) is not None
            for g in a.gpus
        }
        return [g.index for g in self.templates[node].gpus if g.index not in held]

    def remove(self, name: str) -> None:
        """Take ``name`` off its node (pending)."""
        alloc = self.alloc.get(name)
        if alloc is not None:
            self.on_node[alloc.node].discard(name)
        self.alloc[name] = None

    def place(self, name: str, alloc: Allocation | None) -> None:
        """Put ``name`` on ``alloc`` (``None``: pending)."""
        self.remove(name)
        self.alloc[name] = alloc
        if alloc is not None:
            self.on_node[alloc.node].add(name)

    def options(self, name: str) -> list[tuple[float, Allocation]]:
        """(gain to the aggregate, allocation) of the best few placements of ``name`` per
        node, ``name`` being pending now.
        """
        spec = self.specs[name]
        found: list[tuple[float, Allocation]] = []
        for node, template in self.templates.items():
            pool = self.free_gpus(node)
            if spec.gpus > len(pool):
                continue
            co = self.co_runners(node)
            if candidate_count(spec, template, pool) <= EXHAUSTIVE_LIMIT:
                candidates: Iterable[Allocation] = candidate_allocations(spec, node, template, pool)
            else:
                candidates = [greedy_allocation(spec, node, template, pool)]
            use = memory_use([(o.memory_bytes, a, o.threads) for o, a in co], template)
            candidates = [a for a in candidates if memory_fits(spec.memory_bytes, a, template, use)]
            scored = sorted(
                ((self.efficiency(name, a, co), i, a) for i, a in enumerate(candidates)),
                key=lambda item: (-item[0], item[1]),
            )[:RESCORE]
            if not scored:
                continue
            before = self.node_value(node)
            for _, _, alloc in scored:
                found.append((self.node_value(node, (name, alloc)) - before, alloc))
        return found

    def improve(self, order: Sequence[str], max_rounds: int = 8) -> None:
        """Move single jobs to where they add most until none improves the aggregate."""
        for _ in range(max_rounds):
            improved = False
            for name in order:
                current = self.alloc.get(name)
                if current is not None:
                    with_it = self.node_value(current.node)
                    self.remove(name)
                    contribution = with_it - self.node_value(current.node)
                else:
                    contribution = 0.0
                options = self.options(name)
                best = max(options, key=lambda o: o[0], default=None)
                if best is not None and best[0] > contribution + EPSILON and best[0] > EPSILON:
                    self.place(name, best[1])
                    improved = improved or best[1] != current
                else:
                    self.place(name, current)
            if not improved:
                return

    def eject(self, deadline: float) -> bool:
        """Ejection chains: for each counted job below its ideal, take one GPU holder ``y``
        off its node, insert the job where it adds most, then reinsert ``y`` where it adds
        most; keep the first such pair that raises the aggregate. Finds what single moves
        cannot: a well-linked GPU set held by a job that could run as well elsewhere.
        Returns whether anything improved (stops at ``deadline``, a ``perf_counter``).
        """
        improved = False
        for name in sorted(self.ideal):
            if not self.moves_alone(name):
                continue
            alloc = self.alloc.get(name)
            if alloc is not None and self._own(name, alloc) >= 1.0 - 1e-6:
                continue
            holders = sorted(
                n
                for n, a in self.alloc.items()
                if a and a.gpus and n != name and n in self.ideal and self.moves_alone(n)
            )
            for other in holders:
                if time.perf_counter() > deadline:
                    return improved
                if self._try_pair(name, other):
                    improved = True
                    break
        return improved

    def moves_alone(self, name: str) -> bool:
        """Whether ``name`` can move by itself in the ejection chains (every job here)."""
        return True

    def _own(self, name: str, alloc: Allocation) -> float:
        """``name``'s efficiency where it is now, with its co-runners."""
        return self.efficiency(name, alloc, self.co_runners(alloc.node, name))

    def _try_pair(self, name: str, other: str) -> bool:
        """Re-insert ``name`` then ``other`` (both taken out); keep it when the aggregate
        rises, else put both back.
        """
        saved = {name: self.alloc.get(name), other: self.alloc.get(other)}
        before = self.total()
        self.remove(name)
        self.remove(other)
        for job in (name, other):
            best = max(self.options(job), key=lambda o: o[0], default=None)
            if best is not None and best[0] > EPSILON:
                self.place(job, best[1])
        if self.total() > before + EPSILON:
            return True
        for job, alloc in saved.items():
            self.place(job, alloc)
        return False


def knapsack_bound(gpus: Sequence[int], total_gpus: int) -> int:
    """The most jobs with these GPU demands that fit in ``total_gpus`` GPUs."""
    best = [0] * (total_gpus + 1)
    for need in gpus:
        if need == 0:
            best = [b + 1 for b in best]
            continue
        for budget in range(total_gpus, need - 1, -1):
            best[budget] = max(best[budget], best[budget - need] + 1)
    return best[total_gpus]


def released(spec: JobSpec) -> JobSpec:
    """A GPU holder after ``release`` (a notebook keeps running without GPUs)."""
    return replace(spec, gpus=0, gpu_demand=0.0, gpu_memory_bytes=0)


@dataclass
class Start:
    """What a search starts from: the counted jobs' ideals, every job's spec as the oracle
    sees it, where each job is now (``start``: notebooks released, pending ``None``), the
    cluster as it is now (``now``: notebooks still holding their GPUs) and the templates.
    """

    ideal: dict[str, float]
    specs: dict[str, JobSpec]
    start: dict[str, Allocation | None]
    now: dict[str, Allocation | None]
    templates: dict[str, NodeTemplate]


def starting_point(cluster: SimCluster, names: Iterable[str] | None = None) -> Start:
    """The jobs the oracle counts and where they are (see :func:`solve`)."""
    states = [s for s in cluster.job_states() if s.state != DONE]
    arrived = [s for s in states if s.state == RUNNING or s.spec.submit_time <= cluster.now]
    wanted = set(names) if names is not None else None
    ideal: dict[str, float] = {}
    specs: dict[str, JobSpec] = {}
    start: dict[str, Allocation | None] = {}
    for s in arrived:
        value = cluster.ideal_throughput(s.spec)
        counted = value > 0 and (wanted is None or s.name in wanted)
        if counted:
            ideal[s.name] = value
            specs[s.name] = s.spec
            start[s.name] = s.allocation if s.state == RUNNING else None
        elif s.allocation is not None:
            specs[s.name] = released(s.spec) if value <= 0 else s.spec
            start[s.name] = replace(s.allocation, gpus=[]) if value <= 0 else s.allocation
    templates = {n: cluster.template_of(n) for n in cluster.node_names()}
    now = {s.name: s.allocation for s in arrived if s.name in specs}
    return Start(ideal, specs, start, now, templates)


def finish(
    search: _Search,
    start: Start,
    best_alloc: dict[str, Allocation | None],
    best_total: float,
    baseline: float,
    started: float,
) -> OracleResult:
    """The :class:`OracleResult` of a search that found ``best_alloc``."""
    search.load(best_alloc)
    efficiencies = {}
    for name in start.ideal:
        chosen = best_alloc.get(name)
        efficiencies[name] = (
            0.0
            if chosen is None
            else search.efficiency(name, chosen, search.co_runners(chosen.node, name))
        )
    total_gpus = sum(len(t.gpus) for t in start.templates.values())
    bound = float(knapsack_bound([start.specs[n].gpus for n in start.ideal], total_gpus))
    return OracleResult(
        baseline=baseline,
        total=best_total,
        upper_bound=bound,
        exact=best_total >= bound - 1e-6,
        allocations=best_alloc,
        efficiencies=efficiencies,
        jobs=len(start.ideal),
        evaluations=search.evaluations,
        seconds=time.perf_counter() - started,
    )  # fmt: skip


def solve(
    cluster: SimCluster, names: Iterable[str] | None = None, budget_s: float = 60.0
) -> OracleResult:
    """The best joint allocation of the cluster's jobs now (see the module docstring).

    ``names`` restricts the counted jobs (default: every running or pending job with a
    non-zero ideal throughput); the others keep their place, except that GPU holders that
    count nothing (notebooks) release their GPUs. ``budget_s`` bounds the ejection chains
    (the single-job search always runs to its local optimum). A cluster with gang jobs is
    solved by :func:`toposcope.sim.gang_oracle.solve_gangs`.
    """
    if cluster.gangs is not None:
        from toposcope.sim.gang_oracle import solve_gangs  # noqa: PLC0415 (it imports this)

        return solve_gangs(cluster, names, budget_s)
    started = time.perf_counter()
    deadline = started + budget_s
    point = starting_point(cluster, names)
    ideal, specs, start = point.ideal, point.specs, point.start
    search = _Search(point.templates, specs, ideal)
    # the starting point as the cluster is now (notebooks still holding their GPUs)
    search.load(point.now)
    baseline = search.total()
    order = sorted(ideal, key=lambda n: (-specs[n].gpus, -specs[n].threads, n))
    best_total, best_alloc = -1.0, dict(start)
    for seed in ("current", "empty"):
        if seed == "current":
            search.load(start)
        else:
            search.load({n: (None if n in ideal else a) for n, a in start.items()})
        search.improve(order)
        while search.eject(deadline):
            search.improve(order)
        total = search.total()
        if total > best_total + EPSILON:
            best_total, best_alloc = total, dict(search.alloc)
    return finish(search, point, best_alloc, best_total, baseline, started)


__all__ = ["PENDING", "OracleResult", "aggregate", "knapsack_bound", "released", "solve"]
