"""Defragmentation: free a well-connected GPU set by moving small jobs out of the way.

Gandiva and HiveD both observe that a large job often cannot get a good GPU set although
the node has enough GPUs: small jobs sit one per switch or socket. Moving those small jobs
to other free GPUs, first, frees a set that the large job (running badly placed, or pending)
can then take. This module *plans* such a coordinated move (:func:`plan_on_node` on one
node, :func:`best_plan` over the cluster) and says what a plan is worth
(:func:`plan_value`); the job-migration policy decides whether it pays off and turns it into
a recommendation whose actions move the small jobs first and the large one last.

A plan on node T for a job of N GPUs:

* the *pool* is every GPU of T that is up, unclaimed by an earlier decision of the run, and
  free, or held by the job itself, or held by exactly one *small* workload (fewer GPUs than
  N, sharing none of its GPUs, not already moved in this run): a *blocker*;
* candidate sets of N GPUs from the pool are ranked like gpu-placement's sets, with the
  number of blockers to move second (after the worst link): fewer moves, less cost;
* a set is feasible when every blocker it touches can move to free GPUs outside it (on T or,
  when allowed, another node) whose worst link is no worse than the blocker's now. Blockers
  move largest first; the GPUs one takes are not offered to the next.

Only sets strictly better (worst link) than ``must_beat`` are considered, and only the best
:data:`MAX_SETS_TRIED` of them are tried, so a plan costs at most a few relocation searches.
Over the cluster, the job's own node is searched first, then at most
:data:`DEFRAG_MAX_NODES` other nodes whose machine could beat ``must_beat`` at all.

What a plan is worth (the model is in docs/policies.md): the large job's link change, plus
every moved small job's link change, minus one checkpoint-restore per moved job over the
remaining run time.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from toposcope.advisor.gpu_search import GpuSetSearch, worst_rank
from toposcope.advisor.gpu_sets import Placement, gpu_claims, rank_sets
from toposcope.advisor.model import ClusterModel, WorkloadModel

#: candidate sets (best first) whose blockers a plan tries to relocate before giving up
MAX_SETS_TRIED = 6
#: nodes (besides the job's own) on which one defragmentation search is tried at most
DEFRAG_MAX_NODES = 8

#: finds where a blocker could go: (blocker, GPU claims to avoid) -> its best new set or None
Relocator = Callable[[WorkloadModel, set[str]], Placement | None]


@dataclass(frozen=True)
class Relocation:
    """One small job moved out of the way: its GPU set now and the one it gets."""

    workload: WorkloadModel
    current: Placement
    target: Placement


@dataclass(frozen=True)
class DefragPlan:
    """A GPU set for a large job and the small jobs to move first to free it."""

    target: Placement
    moves: tuple[Relocation, ...]

    def claims(self) -> list[str]:
        """Every GPU the plan takes (the freed set and the blockers' new GPUs)."""
        found = gpu_claims(self.target.node, self.target.gpus)
        for move in self.moves:
            found.extend(gpu_claims(move.target.node, move.target.gpus))
        return found


def blockers_of(
    model: ClusterModel, node: str, count: int, fixed: Collection[str]
) -> dict[int, WorkloadModel]:
    """GPU index -> the small workload that alone holds it on ``node`` and may be moved.

    Small: fewer than ``count`` GPUs. Left out: workloads whose key is in ``fixed`` (already
    moved or claimed in this run) and workloads sharing any GPU with another.
    """
    holders = model.gpu_holders(node)
    by_name = {w.name: w for w in model.workloads_on(node)}
    found: dict[int, WorkloadModel] = {}
    for workload in by_name.values():
        if not workload.gpus or len(workload.gpus) >= count or workload.key in fixed:
            continue
        if any(len(holders.get(g, ())) != 1 for g in workload.gpus):
            continue
        for g in workload.gpus:
            found[g] = workload
    return found


def plan_on_node(
    model: ClusterModel,
    node: str,
    count: int,
    *,
    own: WorkloadModel | None,
    busy: Collection[str],
    fixed: Collection[str],
    must_beat: int,
    relocate: Relocator,
    sensitivity: float,
    node_cells: Sequence[frozenset[int]] | None = None,
) -> DefragPlan | None:
    """The best plan freeing ``count`` GPUs on ``node`` that needs at least one move.

    ``own`` is the running job being re-placed (its GPUs count as available on its node),
    ``None`` for a pending job; ``busy`` the GPU claims of earlier decisions; ``must_beat``
    the worst-link rank the set must be strictly better than. ``None`` when no such set can
    be freed without making a blocker worse.
    """
    model_node = model.nodes[node]
    blockers = blockers_of(model, node, count, fixed)
    free = set(model.free_gpus(node))
    own_gpus = set(own.gpus) if own is not None and own.node == node else set()
    pool = {
        g.index
        for g in model_node.gpus
        if g.up is not False
        and f"gpu:{node}/{g.index}" not in busy
        and (g.index in free or g.index in own_gpus or g.index in blockers)
    }
    if len(pool) < count or not any(g in blockers for g in pool):
        return None
    ranked = []
    for placement in rank_sets(model_node, pool, count, node_cells):
        worst = placement.worst_link.rank if placement.worst_link is not None else -1
        if worst >= must_beat:
            continue
        moving = sorted({blockers[g].name for g in placement.gpus if g in blockers})
        if not moving:
            continue  # a plain move: job-migration's or gpu-placement's business
        ranked.append(((worst, len(moving), placement.score()), placement, moving))
    ranked.sort(key=lambda item: item[0])
    by_name = {w.name: w for w in blockers.values()}
    for _, placement, moving in ranked[:MAX_SETS_TRIED]:
        avoid = set(busy) | set(gpu_claims(node, placement.gpus))
        moves: list[Relocation] = []
        for name in sorted(moving, key=lambda n: (-len(by_name[n].gpus), n)):
            blocker = by_name[name]
            current = rank_sets(model_node, blocker.gpus, len(blocker.gpus), node_cells)[0]
            target = relocate(blocker, avoid)
            if target is None or target.factor(sensitivity) > current.factor(sensitivity):
                break
            moves.append(Relocation(blocker, current, target))
            avoid.update(gpu_claims(target.node, target.gpus))
        else:
            return DefragPlan(placement, tuple(moves))
    return None


def best_plan(
    search: GpuSetSearch,
    count: int,
    job: WorkloadModel | None,
    *,
    taken: Collection[str],
    moved: Collection[str],
    must_beat: int,
    sensitivity: float,
) -> DefragPlan | None:
    """The best plan for a job of ``count`` GPUs (``job``: running, on its node first;
    ``None``: pending): best worst link, then fewest moves, then staying on the job's node.

    ``taken`` holds the GPU claims of earlier decisions, ``moved`` the keys of workloads
    already moved; other nodes are searched only with ``search.cross_node`` (always for a
    pending job), at most :data:`DEFRAG_MAX_NODES` of them.
    """
    model = search.model
    names = [job.node] if job is not None and job.node in model.nodes else []
    if job is None or search.cross_node:
        names += [n for n in search.able_nodes(count, must_beat) if n not in names]
    fixed = set(moved) | ({job.key} if job is not None else set())

    def relocate(blocker: WorkloadModel, avoid: set[str]) -> Placement | None:
        return search.best_for(blocker, avoid, include_own=False)

    plans: list[DefragPlan] = []
    searched = 0
    for name in names:
        own = job is not None and name == job.node
        if not own and searched >= DEFRAG_MAX_NODES:
            break
        if search.ideal_rank(name, count) >= must_beat:
            continue
        searched += 0 if own else 1
        plan = plan_on_node(
            model,
            name,
            count,
            own=job,
            busy=taken,
            fixed=fixed,
            must_beat=must_beat,
            relocate=relocate,
            sensitivity=sensitivity,
            node_cells=search.node_cells(name),
        )
        if plan is not None:
            plans.append(plan)
    if not plans:
        return None
    return min(
        plans,
        key=lambda p: (
            worst_rank(p.target),
            len(p.moves),
            job is None or p.target.node != job.node,
            p.target.score(),
            p.target.node,
        ),
    )


@dataclass(frozen=True)
class DefragValue:
    """What a defragmentation plan is worth: gain ratio, net seconds saved, and the text."""

    gain: float
    net_seconds: float
    model_text: str


def plan_value(
    plan: DefragPlan,
    f_now: float | None,
    f_base: float | None,
    *,
    own_cost: bool,
    cost: float,
    remaining: float,
    sensitivity: float,
    measured: tuple[float, str] | None = None,
) -> DefragValue:
    """Gain and net seconds of a plan (the model is in docs/policies.md).

    The large job goes from step-time factor ``f_now`` (``None``: it would wait, at no
    speed) to the plan's; its gain is counted against ``f_base`` (its own set for a running
    job, first fit for a pending one; ``None``: nothing fits, its whole throughput
    ``1 / f_new`` is gained). Every moved small job gains its link change and loses one
    checkpoint-restore (``cost`` seconds) over the ``remaining`` run time, ``cost /
    remaining`` of its throughput. ``own_cost``: the large job pays a checkpoint-restore too
    (it is running). ``measured``: the running large job's step-time ratio (after / now)
    from its measured link traffic and what it rests on, in words, replacing the prices'
    ratio for it (:mod:`~toposcope.advisor.link_gain`).
    """
    f_new = plan.target.factor(sensitivity)
    gain = f_base / f_new - 1.0 if f_base is not None else 1.0 / f_new
    saved = remaining * (1.0 - f_new / f_now) if f_now is not None else remaining
    if measured is not None:
        gain, saved = 1.0 / measured[0] - 1.0, remaining * (1.0 - measured[0])
    net = saved - (cost if own_cost else 0.0)
    for move in plan.moves:
        fb_now = move.current.factor(sensitivity)
        fb_new = move.target.factor(sensitivity)
        gain += fb_now / fb_new - 1.0 - cost / remaining
        net += remaining * (1.0 - fb_new / fb_now) - cost
    names = ", ".join(m.workload.name for m in plan.moves)
    base = f"link factor {f_base:.2f} / {f_new:.2f} - 1" if f_base else f"1 / {f_new:.2f}"
    if measured is not None:
        base = measured[1]
    text = (
        f"defragmentation: {base} for the large job, minus {cost:.0f}s/{remaining:.0f}s "
        f"for each of the {len(plan.moves)} job(s) moved first ({names}); it saves "
        f"{saved:.0f}s of {remaining:.0f}s remaining, {net:.0f}s net of "
        f"{len(plan.moves) + (1 if own_cost else 0)} checkpoint-restore(s) of {cost:.0f}s"
    )
    return DefragValue(gain, net, text)
