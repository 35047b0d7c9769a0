"""job-migration's exchange: two running jobs of one node trade GPUs, moved at once.

Why. A job whose better set holds GPUs of another job of its size cannot move alone when
the node has no free GPU to spare: a plain move needs free GPUs, and a defragmentation moves
only smaller jobs out of the way, onto free GPUs outside the set. Two 2-GPU jobs that
interleave over two switches (one on GPUs 4 and 7, the other on 5 and 6, each pair crossing
the host bridge) stay there although trading one GPU each puts both behind one switch. The
closed loop's ``contention-links`` ended that way under measured prices (docs/policies.md).

Rule (:func:`best_exchange`). For two movable jobs J and K of one node (busy, each holding
its GPUs alone, not kept in place or moved by an earlier decision of the run), the pool is
their GPUs and the node's free GPUs that no earlier decision claimed. J takes a set of the
pool priced better than its own that holds some of K's GPUs; K takes the best set of the
rest that is priced no worse than its own. The exchange counts when

* J's estimated gain is positive and K's is not a loss: a gain, or the same worst link at a
  bandwidth within a measurement's spread (:data:`~toposcope.advisor.link_gain.
  SAME_BANDWIDTH`), both counting the NUMA locality a job loses when it cannot be pinned
  next to its new GPUs (each job is pinned to its new GPUs' NUMA node when that node has
  room for both);
* neither move is one the policy holds back (``held_back``: a move between PCIe paths of a
  socket on unmeasured prices, job-migration's rule), a move that keeps K's worst link
  aside;
* the seconds both save over the remaining run time beat both checkpoint-restores.

Of the exchanges that count, the one saving most net seconds is made, then the next among
the jobs and GPUs left.

Carried out at once (:func:`exchange_recommendation`): a ``migrate-job`` without contract
actions whose ``proposed["joint"]`` lists both jobs, each with its new GPUs, CPUs and memory
nodes, as fabric-placement's joint moves do (the simulator's ``POST /gang-moves``; Slurm and
Kubernetes refuse it whole). Its estimated gain is the mean of the two jobs' gains (the
joint move's gain when both run at the same rate).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from toposcope.advisor.gpu_sets import Placement, gpu_claims, rank_sets
from toposcope.advisor.link_gain import SAME_BANDWIDTH, LinkGain
from toposcope.advisor.link_prices import price_text
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.policies.move_pins import gpu_numa_pin, unpinned_loss
from toposcope.advisor.recommendations import make_recommendation
from toposcope.report.recommendation import (
    Evidence,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
)

#: sets J may take that are tried per pair of jobs, best first
MAX_TARGETS_TRIED = 6

#: the estimate of a move not estimated yet
_NOTHING = LinkGain(0.0, "prior", None, "")
#: a job's estimated link gain moving from one set to another (current, target)
Estimator = Callable[[WorkloadModel, Placement, Placement], LinkGain]
#: whether a move from one set to another is held back by the policy's rules
HeldBack = Callable[[Placement, Placement], bool]


@dataclass(frozen=True)
class ExchangeTerms:
    """What an exchange is judged by: the remaining run time and checkpoint-restore cost a
    job-migration run assumed, the price sensitivity, whether moved jobs are pinned next to
    their new GPUs, and the least mean GPU utilization of a busy job.
    """

    remaining_seconds: float
    checkpoint_restore_seconds: float
    sensitivity: float = 1.0
    pin: bool = True
    min_utilization: float = 0.05


@dataclass(frozen=True)
class ExchangeMove:
    """One job of an exchange: its set now, its new set, the estimate (with the locality a
    missing pin costs) and the pin (``cpus``, ``mems``; empty: unpinned).
    """

    job: WorkloadModel
    current: Placement
    target: Placement
    link: LinkGain
    cpus: tuple[int, ...]
    mems: tuple[int, ...]

    def saved(self, remaining: float) -> float:
        """Seconds saved over ``remaining`` (0 for a move that gains nothing)."""
        return remaining * max(0.0, 1.0 - self.link.ratio)

    def to_dict(self) -> dict[str, object]:
        """The job's entry in ``proposed["jobs"]`` (one part: itself)."""
        part: dict[str, object] = {
            "part": self.job.name,
            "from_node": self.job.node,
            "from_gpus": list(self.job.gpus),
            "node": self.target.node,
            "gpus": list(self.target.gpus),
        }
        if self.cpus:
            part["cpus"] = list(self.cpus)
            part["mems"] = list(self.mems)
        return {
            "job": self.job.name,
            "parts": [part],
            "worst_link_now": str(self.current.worst_link),
            "worst_link": str(self.target.worst_link),
            "link_price": self.target.price.to_dict(),
            "gain": round(self.link.gain, 4),
            "estimate": self.link.source,
        }


@dataclass(frozen=True)
class Exchange:
    """Two jobs trading GPUs: ``first`` gains, ``second`` makes way without losing."""

    first: ExchangeMove
    second: ExchangeMove
    net_seconds: float

    @property
    def gain(self) -> float:
        """The mean of both jobs' estimated gains."""
        return (self.first.link.gain + self.second.link.gain) / 2.0

    def claims(self) -> list[str]:
        """Both new sets' GPUs and both jobs."""
        return [
            *gpu_claims(self.first.target.node, self.first.target.gpus),
            *gpu_claims(self.second.target.node, self.second.target.gpus),
            f"workload:{self.first.job.key}",
            f"workload:{self.second.job.key}",
        ]


def busy_alone(model: ClusterModel, job: WorkloadModel, min_utilization: float) -> bool:
    """Whether ``job`` may take part in an exchange: its GPUs' mean utilization is at least
    ``min_utilization`` and no other workload holds any of them.
    """
    node = model.node(job.node)
    if node is None or not job.gpus:
        return False
    holders = model.gpu_holders(job.node)
    if any(len(holders.get(g, ())) != 1 for g in job.gpus):
        return False
    if any(node.gpu(i) is None for i in job.gpus):
        return False
    mean = node.mean_utilization(job.gpus)
    return mean is not None and mean >= min_utilization


def neutral(current: Placement, target: Placement) -> bool:
    """Whether a move keeps the worst link and its price within a measurement's spread."""
    if current.worst_link != target.worst_link:
        return False
    now, new = current.price.gbps, target.price.gbps
    if now is None or new is None:
        return current.price.factor == target.price.factor
    return abs(new - now) <= SAME_BANDWIDTH * now


def exchanges(
    model: ClusterModel,
    jobs: Sequence[WorkloadModel],
    taken: Collection[str],
    terms: ExchangeTerms,
    estimate: Estimator,
    held_back: HeldBack,
    node_cells: Callable[[str], Sequence[frozenset[int]]] | None = None,
) -> list[Exchange]:
    """The exchanges to make among ``jobs`` (the run's movable jobs), node by node, each
    the best among the jobs and GPUs the earlier ones left (module docstring); ``taken``
    holds the GPU claims of the run's earlier decisions.
    """
    claimed = set(taken)
    found: list[Exchange] = []
    for node in sorted({j.node for j in jobs if j.node in model.nodes}):
        cells = node_cells(node) if node_cells is not None else None
        while True:
            movable = [
                j
                for j in jobs
                if j.node == node
                and f"workload:{j.key}" not in claimed
                and not claimed & set(gpu_claims(node, j.gpus))
                and busy_alone(model, j, terms.min_utilization)
            ]
            free = {g for g in model.free_gpus(node) if f"gpu:{node}/{g}" not in claimed}
            best = best_exchange(model, node, movable, free, terms, estimate, held_back, cells)
            if best is None:
                break
            found.append(best)
            claimed.update(best.claims())
    return found


def best_exchange(
    model: ClusterModel,
    node: str,
    jobs: Sequence[WorkloadModel],
    free: set[int],
    terms: ExchangeTerms,
    estimate: Estimator,
    held_back: HeldBack,
    node_cells: Sequence[frozenset[int]] | None = None,
) -> Exchange | None:
    """The exchange saving most net seconds among ``jobs`` (movable jobs of ``node``) and the
    unclaimed ``free`` GPUs of the node, or ``None`` (module docstring; ``node_cells``: the
    node's GPU cells, when the caller has them).
    """
    node_model = model.nodes[node]
    own = {j.key: rank_sets(node_model, j.gpus, len(j.gpus), node_cells)[0] for j in jobs}
    best: Exchange | None = None
    for first in jobs:
        f_now = own[first.key].factor(terms.sensitivity)
        for second in jobs:
            if second.key == first.key:
                continue
            pool = set(first.gpus) | set(second.gpus) | free
            targets = [
                t
                for t in rank_sets(node_model, pool, len(first.gpus), node_cells)
                if t.factor(terms.sensitivity) < f_now and set(t.gpus) & set(second.gpus)
            ]
            for target in targets[:MAX_TARGETS_TRIED]:
                found = _partner(model, (first, second), target, pool, terms, own, node_cells)
                if found is None:
                    continue
                if held_back(found.first.current, found.first.target):
                    continue
                moved = found.second
                if moved.current.worst_link != moved.target.worst_link and held_back(
                    moved.current, moved.target
                ):
                    continue
                found = _estimated(model, found, terms, estimate)
                if found is not None and (best is None or found.net_seconds > best.net_seconds):
                    best = found
    return best


def _partner(
    model: ClusterModel,
    pair: tuple[WorkloadModel, WorkloadModel],
    target: Placement,
    pool: set[int],
    terms: ExchangeTerms,
    own: dict[str, Placement],
    node_cells: Sequence[frozenset[int]] | None,
) -> Exchange | None:
    """The pair's first job on ``target`` and its second on the best set of the rest of
    ``pool`` when that set is priced no worse than its own (estimates and pins still to
    come), or ``None``.
    """
    first, second = pair
    now = own[second.key]
    rest = pool - set(target.gpus)
    ranked = rank_sets(model.nodes[target.node], rest, len(second.gpus), node_cells)
    if not ranked or ranked[0].factor(terms.sensitivity) > now.factor(terms.sensitivity):
        return None
    return Exchange(
        ExchangeMove(first, own[first.key], target, _NOTHING, (), ()),
        ExchangeMove(second, now, ranked[0], _NOTHING, (), ()),
        0.0,
    )


def _estimated(
    model: ClusterModel, found: Exchange, terms: ExchangeTerms, estimate: Estimator
) -> Exchange | None:
    """``found`` with both jobs pinned (where their new NUMA node has room for both) and
    estimated; ``None`` when J does not gain, K loses, or the net seconds are not positive.
    """
    reserved: dict[int, float] = {}
    away = [found.first.job, found.second.job]
    moves: list[ExchangeMove] = []
    for move in (found.first, found.second):
        cpus, mems = gpu_numa_pin(
            model, move.target.node, move.target.gpus, terms.pin, move.job, reserved, away
        )
        link = estimate(move.job, move.current, move.target)
        if not cpus:
            link = link.with_locality(
                *unpinned_loss(model, move.job, move.target.node, move.target.gpus)
            )
        moves.append(ExchangeMove(move.job, move.current, move.target, link, (*cpus,), (*mems,)))
    first, second = moves
    if first.link.gain <= 0:
        return None
    if second.link.gain < 0:
        if second.link.locality != 1.0 or not neutral(second.current, second.target):
            return None
        second = ExchangeMove(
            second.job,
            second.current,
            second.target,
            LinkGain(0.0, second.link.source, second.link.share, f"{second.link.text}; "
                     "within a measurement's spread of its pair now: no change"),
            second.cpus,
            second.mems,
        )  # fmt: skip
    remaining, cost = terms.remaining_seconds, terms.checkpoint_restore_seconds
    net = first.saved(remaining) + second.saved(remaining) - 2.0 * cost
    if net <= 0:
        return None
    return Exchange(first, second, net)


def exchange_recommendation(
    model: ClusterModel, policy: str, exchange: Exchange, terms: ExchangeTerms
) -> Recommendation:
    """The ``migrate-job`` recommendation of ``exchange`` (module docstring)."""
    first, second = exchange.first, exchange.second
    node = model.nodes[first.job.node]
    evidence = [
        Evidence(
            "toposcope_gpu_link_info",
            {"node": m.job.node, "gpu": str(a), "peer_gpu": str(b)},
            1.0,
        )
        for m in (first, second)
        for a in m.job.gpus
        for b in m.job.gpus
        if a < b and node.link(a, b) == m.current.worst_link
    ]
    remaining, cost = terms.remaining_seconds, terms.checkpoint_restore_seconds
    jobs_text = "; ".join(
        f"{m.job.name}: {m.link.text}, saves {m.saved(remaining):.0f}s; "
        f"{price_text(('now', m.current.price), ('after', m.target.price))}"
        for m in (first, second)
    )
    return make_recommendation(
        kind=RecommendationKind.MIGRATE_JOB,
        policy=policy,
        target=Target(first.job.node, first.job.name, tuple(first.job.gpus)),
        summary=(
            f"exchange GPUs on {first.job.node}: move {first.job.name} from GPUs "
            f"{list(first.job.gpus)} (worst link {first.current.worst_link}) to "
            f"{list(first.target.gpus)} (worst link {first.target.worst_link}) and "
            f"{second.job.name} from {list(second.job.gpus)} ({second.current.worst_link}) "
            f"to {list(second.target.gpus)} ({second.target.worst_link}) at once"
        ),
        current={
            "node": first.job.node,
            "gpus": list(first.job.gpus),
            "worst_link": str(first.current.worst_link),
            "link_price": first.current.price.to_dict(),
            "communication_share": first.link.to_dict(),
        },
        proposed={
            "joint": True,
            "jobs": [first.to_dict(), second.to_dict()],
            "node": first.target.node,
            "gpus": list(first.target.gpus),
            "worst_link": str(first.target.worst_link),
            "link_price": first.target.price.to_dict(),
            "cpus": list(first.cpus),
            "mems": list(first.mems),
            "saves_seconds": round(exchange.net_seconds),
        },
        evidence=evidence,
        estimated_gain=exchange.gain,
        gain_model=(
            f"exchange: the mean of both jobs' gains ({first.link.gain:.3f} and "
            f"{second.link.gain:.3f}); {jobs_text}; together {exchange.net_seconds:.0f}s "
            f"net of 2 checkpoint-restores of {cost:.0f}s over {remaining:.0f}s remaining"
        ),
        confidence=0.55,
        risk=Risk.MEDIUM,
        claims=exchange.claims(),
    )
