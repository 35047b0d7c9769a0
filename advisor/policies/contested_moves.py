"""job-migration's joint choice of new GPU sets for jobs that want the same GPUs.

Jobs choosing one after another (:func:`~toposcope.advisor.policies.job_replace.
choice_order`) hand a machine's few NVLinked GPUs to whoever chooses first, although
another job may gain far more from them, or have no other set while the first has a good
second choice. Where the sets several jobs would choose alone share GPUs, the sets they
get are chosen together (:func:`~toposcope.advisor.joint_sets.assign`) to make the most
of what the cluster gains, counted as the closed loop's oracle counts it: the sum over jobs
of their efficiency (step time on the best set their size could have anywhere over step
time where they run). A job whose best set speeds it up by ``g_best`` runs at
``1 / (1 + g_best)`` of that now, and a move that speeds it up by ``g`` adds
``g / (1 + g_best)``: a move worth much to a job held back by a poor set counts more than
the same speed-up of a job that is almost where it could be. Each job's options are the
best disjoint sets on its own node and on the nodes whose free sets rank first; an option
counts only when the time it saves beats the checkpoint-restore cost. A job that stops
time-slicing a GPU also counts what the jobs it leaves gain. The sets gpu-placement would
start pending jobs on take part too, each worth the job's estimated efficiency there (a
pending job counts 0): a move takes such a set only when it is worth more than the start.
A move that leaves GPUs a pending job could start on is offered twice: alone, and with
that start (:mod:`~toposcope.advisor.policies.move_starts`), worth the pending job's
efficiency there too and excluding its start on its free set. Jobs whose sets nobody else
wants choose alone, as before.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from toposcope.advisor.comm_share import MeasuredShare
from toposcope.advisor.gpu_search import GpuSetSearch
from toposcope.advisor.gpu_sets import Placement, gpu_claims, rank_sets
from toposcope.advisor.joint_sets import Claimant, Option, assign
from toposcope.advisor.model import NodeModel, PendingWorkload, WorkloadModel
from toposcope.advisor.policies.move_starts import EnabledStart, start_value

#: other nodes whose best free sets a contested job may be offered
OTHER_NODES = 4
#: disjoint sets offered per node (so that two jobs can share a node's free GPUs)
SETS_PER_NODE = 3


#: why a job whose GPUs move NVLink bytes between pairs the window lists no link for stays
UNLISTED_NOTE = (
    "its GPUs move bytes over NVLink but the window lists no link between them (a gap in "
    "the link matrix): not moved on a guessed link"
)


def unlisted_nvlinks(node: NodeModel, gpus: Sequence[int], measured: MeasuredShare | None) -> bool:
    """Whether ``gpus`` move bytes over NVLink while the node's link matrix lists none of
    their pairs: the matrix is missing from the window (a scrape gap), and the pairs' tier
    would be guessed from their NUMA nodes (across sockets: ``SYS``) although they are
    NVLinked. Moving such a job on the guess moves it off its NVLinks.
    """
    if measured is None or measured.nvlink_bytes_per_second <= 0 or len(gpus) < 2:
        return False
    return not any(
        (a, b) in node.links or (b, a) in node.links for a, b in itertools.combinations(gpus, 2)
    )


@dataclass(frozen=True)
class Wanting:
    """A job that wants a better set: where it runs, the set it would choose alone, and
    whether its own GPUs count as free for it (a job moved off GPUs it shares: they do not).
    """

    job: WorkloadModel
    current: Placement
    first: Placement
    include_own: bool = True
    peer_value: float = 0.0


@dataclass(frozen=True)
class Start:
    """A pending job's start on the set gpu-placement would give it (``target``), worth
    ``value``: its estimated efficiency there (the oracle counts a pending job 0).
    """

    name: str
    target: Placement
    value: float


@dataclass(frozen=True)
class MoveTerms:
    """What a move must beat: the job's expected remaining run time and the
    checkpoint-restore cost, seconds.
    """

    remaining_seconds: float
    cost_seconds: float

    def pays(self, gain: float) -> bool:
        """Whether a speed-up of ``gain`` saves more than the checkpoint-restore cost."""
        return gain > 0 and self.remaining_seconds * (1.0 - 1.0 / (1.0 + gain)) > self.cost_seconds


def contested(wanting: Sequence[Wanting], starts: Sequence[Start] = ()) -> list[Wanting]:
    """The jobs whose first choices share a GPU with another's first choice or with the set
    a pending job would start on.
    """
    owners: dict[str, int] = {}
    for placement in [*(w.first for w in wanting), *(s.target for s in starts)]:
        for claim in gpu_claims(placement.node, placement.gpus):
            owners[claim] = owners.get(claim, 0) + 1
    return [
        w for w in wanting if any(owners[c] > 1 for c in gpu_claims(w.first.node, w.first.gpus))
    ]


def _candidates(search: GpuSetSearch, w: Wanting) -> list[Placement]:
    """``w``'s options: up to :data:`SETS_PER_NODE` disjoint sets, best first, on its own
    node and on each of the :data:`OTHER_NODES` nodes whose free sets rank first.
    """
    model, job = search.model, w.job
    count = len(job.gpus)
    nodes = [job.node] if job.node in model.nodes else []
    if search.cross_node:
        others = [p.node for p in search.ranked_free(count) if p.node != job.node]
        nodes += others[:OTHER_NODES]
    found: list[Placement] = []
    for name in nodes:
        free = set(model.free_gpus(name))
        if name == job.node and w.include_own:
            free |= set(job.gpus)
        for _ in range(SETS_PER_NODE):
            placement = search.node_best(name, free, count)
            if placement is None:
                break
            found.append(placement)
            free -= set(placement.gpus)
    return found


def ideal_set(search: GpuSetSearch, job: WorkloadModel) -> Placement | None:
    """The best set ``job``'s size could have if every GPU were free: on its own node when
    that is as good as any, else on the first node that reaches the best.
    """
    count = len(job.gpus)
    floor = search.floor(job.node, count)
    able = search.able_nodes(count, floor + 1)
    if not able:
        return None
    name = job.node if job.node in able else able[0]
    node = search.model.nodes[name]
    up = [g.index for g in node.gpus if g.up is not False]
    sets = rank_sets(node, up, count, search.node_cells(name))
    return sets[0] if sets else None


def pending_starts(
    search: GpuSetSearch, pending: Sequence[PendingWorkload], sensitivity: float
) -> list[Start]:
    """The sets gpu-placement would start the pending single-node jobs on (largest first,
    as it places them), each worth the job's estimated efficiency there (:func:`start_value`).
    """
    found: list[Start] = []
    taken: list[str] = []
    for job in sorted(pending, key=lambda j: (-j.gpus_requested, j.name)):
        if job.nodes_requested > 1 or job.gpus_requested < 1:
            continue
        target = search.free_best(job.gpus_requested, taken)
        if target is None:
            continue
        value = start_value(search, job.gpus_requested, target, sensitivity)
        found.append(Start(job.name, target, value))
        taken.extend(gpu_claims(target.node, target.gpus))
    return found


@dataclass(frozen=True)
class JointChoice:
    """What the joint choice gives a job: the set it moves to and, when the move leaves
    GPUs a pending job starts on, that start (:mod:`~toposcope.advisor.policies.move_starts`).
    """

    target: Placement
    start: EnabledStart | None = None


#: the start a job's move to a set makes possible, if any (a policy's look-up)
StartOf = Callable[[Wanting, Placement], EnabledStart | None]


def _options(
    w: Wanting, gains: Sequence[tuple[Placement, float]], best: float, start_of: StartOf | None
) -> tuple[Option[JointChoice], ...]:
    """``w``'s options: each set that pays, worth its share of the job's best gain (module
    docstring) and the ``peer_value``; a set whose move leaves a pending job a better start
    is offered once more with that start, worth its efficiency there too and claiming its
    GPUs and the pending job (whose own start is then not taken).
    """
    found: list[Option[JointChoice]] = []
    for p, g in gains:
        claims = frozenset(gpu_claims(p.node, p.gpus))
        worth = g / (1.0 + max(0.0, best)) + w.peer_value
        found.append(Option(claims, worth, JointChoice(p)))
        start = start_of(w, p) if start_of is not None else None
        if start is not None:
            found.append(
                Option(claims | set(start.claims()), worth + start.value, JointChoice(p, start))
            )
    return tuple(found)


def joint_choices(
    search: GpuSetSearch,
    wanting: Sequence[Wanting],
    gain_of: Callable[[Wanting, Placement], float],
    terms: MoveTerms,
    starts: Sequence[Start] = (),
    start_of: StartOf | None = None,
) -> tuple[dict[str, JointChoice | None], list[Start]]:
    """For each contested job (:func:`contested`), by key, the set it gets (``None``: it
    stays where it is this round) and the pending job's start its move makes possible, if
    one was chosen with it, chosen jointly (module docstring) with the ``starts`` of pending
    jobs; and the starts that keep their sets. ``gain_of`` is the policy's estimated
    speed-up of a job moved to a set; a job's ``peer_value`` (the jobs it stops sharing a GPU
    with) counts with each of its options; ``start_of`` finds the start a move makes possible
    (its value the pending job's whole efficiency there: the job's own start, worth its
    efficiency on its free set, is the alternative).
    """
    claimants: list[Claimant[JointChoice]] = [
        Claimant(
            f"pending/{s.name}",
            (
                Option(
                    frozenset(
                        [*gpu_claims(s.target.node, s.target.gpus), f"workload:pending/{s.name}"]
                    ),
                    s.value,
                    JointChoice(s.target),
                ),
            ),
        )
        for s in starts
    ]
    for w in contested(wanting, starts):
        gains = [(p, gain_of(w, p)) for p in _candidates(search, w)]
        ideal = ideal_set(search, w.job)
        best = max([g for _, g in gains] + [gain_of(w, ideal) if ideal is not None else 0.0])
        paying = [(p, g) for p, g in gains if terms.pays(g)]
        claimants.append(Claimant(w.job.key, _options(w, paying, best, start_of)))
    chosen = assign(claimants)
    kept = [s for s in starts if chosen.pop(f"pending/{s.name}") is not None]
    return {key: (o.choice if o is not None else None) for key, o in chosen.items()}, kept
