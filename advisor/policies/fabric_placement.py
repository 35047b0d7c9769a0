"""fabric-placement: place pending multi-node jobs on the tightest fabric cell that keeps whole
cells free, or hold them for a tighter cell when the wait costs less than the slower run; move
running ones spread beyond need.

Rule. A pending job asking for more GPUs than a node has, or for several nodes (a Slurm
``--nodes=N`` job: ``N`` nodes of its GPUs per node), is a multi-node job of the larger of
``N`` and ``ceil(gpus / G)`` nodes (``G`` the GPUs of most of the fabric's nodes) with an
equal share on each. Over the cells of the fabric (:mod:`toposcope.fabric.cells`: nodes,
leaves, spines, cores, or Slurm blocks) it goes to the lowest level with a cell that holds
it now; among those cells, the one whose choice breaks the fewest fully free cells (HiveD's
buddy cells), then the one with the least free GPUs (best fit, as Kueue's topology-aware
``BestFit``), and within it the fewest child cells, partly used first, and the tightest
nodes (:func:`toposcope.fabric.cellfit.choose`). On a rail-optimised fabric, where the GPUs free
on each node are known, the nodes are chosen so that every node gives the same GPU indices
(local rank k on rail k). Jobs are placed largest first, each taking its nodes' GPUs, so
that two recommendations never count the same free GPUs.

Wait or spread. When the job now lands above the tightest level it could ever fit under (on
a spine, where one leaf would hold it once jobs end), the policy asks, level by level from
the tightest, when a cell of that level could hold it: each node is ready when enough of its
jobs have ended by their time left (``toposcope_queue_job_time_left_seconds``; a job without
a limit never ends in this count). It holds the job for the first such cell whose wait costs
less than the slower run (:func:`toposcope.advisor.fabric_wait.wait_for_tighter`, the rule
of :mod:`toposcope.advisor.placement_wait` with the per-level slowdown prior of
:mod:`toposcope.advisor.fabric_wait`), and otherwise places it now.

Gain model. A level crossed above the tightest slows the job's steps by
``slowdown_per_level`` (a documented prior until measured). Placing now: the gain is the
factor first-fit would give (the first free nodes by name, as a topology-blind scheduler
takes them) over ours, minus 1. Holding: the factor now over the factor after the wait,
minus 1, minus the wait as a share of the run.

Running jobs. After the pending jobs, running multi-node jobs spread beyond need are moved
onto a tighter cell when the time saved beats a restart (:mod:`.fabric_moves`, kind
``migrate-job``; ``move_spread``, ``restart_seconds``); when no tighter cell is free for
any one of them, several are moved at once, swapping their parts between cells
(:mod:`.fabric_swaps`).

The fabric is read from ``fabric_file`` (``fabric_format``: Slurm's ``topology.conf``, a
fabric YAML/JSON file or ``ibnetdiscover`` output). The recommendations carry no resource
manager action: a multi-node placement is applied through the scheduler's own topology
support (:mod:`toposcope.slurm.fabric_steer`: ``scontrol update JobId=...
ReqNodeList=... Switches=N@T``), which ``proposed`` holds the figures for.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace

from toposcope.advisor.fabric_wait import (
    LEVEL_SLOWDOWN_PRIOR,
    level_factor,
    ready_times,
    wait_for_tighter,
)
from toposcope.advisor.model import ClusterModel, PendingWorkload
from toposcope.advisor.policies.base import Evaluation, Policy, PolicySettings, setting
from toposcope.advisor.policies.fabric_advice import FabricAdvice, Hold, advice_recommendation
from toposcope.advisor.policies.fabric_aside import aside_fit
from toposcope.advisor.policies.fabric_defrag import (
    clearing_pays,
    defrag_recommendation,
    moved_gpus,
    occupants_of,
    take_after_clearing,
)
from toposcope.advisor.policies.fabric_moves import MoveRule, spread_moves
from toposcope.advisor.policies.fabric_swap_advice import joint_moves
from toposcope.advisor.recommendations import CHECKPOINT_RESTORE_S
from toposcope.catalogue import spec
from toposcope.errors import ConfigError, ToposcopeError
from toposcope.fabric.celldefrag import Fit, Occupant, clear_cell
from toposcope.fabric.cellfit import (
    Choice,
    choose,
    lowest_level_possible,
    node_ready_wait,
    span_level,
)
from toposcope.fabric.cells import CellTree, NodeFree
from toposcope.fabric.model import Fabric
from toposcope.report.recommendation import Note, Recommendation

#: fabric_format -> what it reads
FORMATS = ("slurm-topology", "file", "ibnetdiscover")


@dataclass(frozen=True)
class FabricPlacementSettings(PolicySettings):
    """Settings of the fabric-placement policy."""

    fabric_file: str = setting(
        "",
        help="the fabric to place on: a file in fabric_format (empty: the policy cannot decide)",
    )
    fabric_format: str = setting(
        "slurm-topology",
        choices=FORMATS,
        help="what fabric_file is: Slurm's topology.conf, a fabric YAML/JSON file "
        "(docs/fabric.md) or ibnetdiscover output",
    )
    run_seconds: float = setting(
        4 * 3600.0,
        ge=60,
        le=90 * 86400,
        help="expected run time of a pending job, for the wait-or-spread rule (the queue does "
        "not publish pending jobs' time limits)",
    )
    slowdown_per_level: float = setting(
        LEVEL_SLOWDOWN_PRIOR,
        ge=0,
        le=2,
        help="step-time slowdown per switch level crossed above the tightest (a prior: "
        "a quarter of the step in collectives, halved bandwidth per 2:1 tapered level)",
    )
    wait: bool = setting(True, help="hold a job for a tighter cell when the wait pays")
    move_spread: bool = setting(
        True,
        help="move running multi-node jobs spread beyond need onto a tighter cell when the "
        "time saved beats a restart (the job must have opted in to migration)",
    )
    defragment: bool = setting(
        True,
        help="clear a leaf for a pending job by moving single-node jobs off it, when the "
        "faster run is worth more than their restarts",
    )
    unknown_time_left_s: float = setting(
        0.0,
        ge=0,
        le=90 * 86400,
        help="time left assumed for a running multi-node job without a time limit when "
        "pricing its move (0: such a job gets a note, not a move)",
    )
    restart_seconds: float = setting(
        CHECKPOINT_RESTORE_S,
        ge=0,
        le=86400,
        help="what one checkpoint, requeue and restart of every rank costs a moved job",
    )


class FabricPlacement(Policy[FabricPlacementSettings]):
    """Place pending multi-node jobs on the tightest fabric cell, keeping whole cells free."""

    name = "fabric-placement"
    description = (
        "place pending multi-node jobs on the tightest leaf, spine or block that keeps whole "
        "cells free, or hold them for a tighter one when the wait pays"
    )
    settings_type = FabricPlacementSettings
    requires = (spec("toposcope_gpu_info"),)

    def __init__(
        self, settings: FabricPlacementSettings | None = None, fabric: Fabric | None = None
    ) -> None:
        super().__init__(settings)
        self._fabric = fabric
        self._tree: CellTree | None = None

    def evaluate(self, model: ClusterModel) -> Evaluation:
        """One ``place`` recommendation per pending multi-node job that fits or should wait,
        then one ``migrate-job`` per running multi-node job worth moving to a tighter cell.
        """
        try:
            tree = self._cells()
        except ToposcopeError as exc:
            return Evaluation(undecided=(self.note("*", str(exc)),))
        per_node = _gpus_per_node(model, tree)
        if per_node is None:
            return Evaluation(
                undecided=(self.note("*", "no node of the fabric has GPUs in the metrics"),)
            )
        missing = self.missing_note(model)
        notes: list[Note] = [missing] if missing else []
        free = _free(model, tree)
        holders = _holders(model, tree)
        recs: list[Recommendation] = []
        jobs = [j for j in model.pending if j.gpus_total > per_node or j.nodes_requested > 1]
        if not jobs:
            notes.append(
                self.note(
                    "*",
                    f"no pending job asks for more than {per_node} GPUs (one node): "
                    "gpu-placement places single-node jobs",
                )
            )
        occupants = occupants_of(model, tree, self.settings.restart_seconds)
        fit = aside_fit(model)
        for job in sorted(jobs, key=lambda j: (-j.gpus_total, j.name)):
            found = self._one(
                tree, free, holders, (occupants, fit), job, per_node, len(model.pending) - 1
            )
            if isinstance(found, Note):
                notes.append(found)
                continue
            recs += found
        if self.settings.move_spread:
            rule = MoveRule(
                self.settings.slowdown_per_level,
                self.settings.restart_seconds,
                self.settings.unknown_time_left_s,
            )
            moves, unpriced = spread_moves(self.name, tree, free, model, rule)
            joint, unpaid = joint_moves(self.name, tree, free, model, rule, recs + moves)
            recs += moves + joint
            notes += unpriced + unpaid
        return Evaluation(tuple(recs), tuple(notes))

    def _cells(self) -> CellTree:
        if self._tree is None:
            self._tree = CellTree(self._fabric or _read(self.settings))
        return self._tree

    def _one(
        self,
        tree: CellTree,
        free: dict[str, NodeFree],
        holders: Mapping[str, list[tuple[int, float | None]]],
        aside: tuple[dict[str, list[Occupant]], Fit],
        job: PendingWorkload,
        per_node: int,
        others: int,
    ) -> list[Recommendation] | Note:
        nodes = max(job.nodes_requested, math.ceil(job.gpus_total / per_node))
        share = math.ceil(job.gpus_total / nodes)
        choice = choose(tree, free, nodes, share)
        if choice is None:
            return self.note(job.name, f"no {nodes} nodes have {share} free GPUs each now")
        tightest = lowest_level_possible(tree, free, nodes, share) or choice.level
        s = self.settings
        hold = self._hold(tree, free, holders, job, nodes, share, choice.level, tightest, others)
        eligible = sorted(n for n, f in free.items() if f.free >= share)
        first_fit = tuple(eligible[:nodes])
        first_level = span_level(tree, first_fit) or choice.level
        advice = FabricAdvice(
            job=job.name,
            gpus=job.gpus_total,
            tree=tree,
            choice=choice,
            tightest=tightest,
            first_fit=first_fit,
            first_fit_level=first_level,
            per_level=s.slowdown_per_level,
            run_seconds=s.run_seconds,
            hold=hold,
            free=dict(free),
        )
        if hold is None and choice.level > tightest and s.defragment:
            cleared = self._clear(tree, free, aside, advice, nodes, share)
            if cleared:
                return cleared
        rec = advice_recommendation(self.name, advice)
        if hold is None:
            _take(free, choice.nodes, share, choice.gpu_indices)
            for node in choice.nodes:
                aside[0].setdefault(node, []).append(Occupant(job.name, share, False))
        return [rec]

    def _clear(
        self,
        tree: CellTree,
        free: dict[str, NodeFree],
        aside: tuple[dict[str, list[Occupant]], Fit],
        advice: FabricAdvice,
        nodes: int,
        share: int,
    ) -> list[Recommendation]:
        """Clear a cell of the tightest level for the job when that pays: the move of the
        small jobs, then the job's placement on the cleared cell (:mod:`.fabric_defrag`), each
        small job where it runs no slower (``aside``: the occupants and :mod:`.fabric_aside`'s
        rule).
        """
        s = self.settings
        occupants, fit = aside
        clearing = clear_cell(tree, free, occupants, advice.tightest, nodes, share, fit)
        if clearing is None:
            return []
        saved = advice.choice.level - advice.tightest
        net = clearing_pays(clearing, saved, s.run_seconds, s.slowdown_per_level, s.restart_seconds)
        if net <= 0:
            return []
        moves = defrag_recommendation(self.name, advice.job, clearing, net, s.run_seconds)
        choice = Choice(
            level=clearing.level,
            level_name=tree.levels[clearing.level],
            cell=clearing.cell,
            nodes=clearing.nodes,
            gpus_per_node=share,
            gpu_indices=(),
            broken=(),
            broken_count=0,
            kept_whole=(),
            kept_whole_count=0,
            candidates=1,
            rail_aligned=None,
        )
        after = f"{len(clearing.moves)} job(s) moved out ({moves.id})"
        place = advice_recommendation(self.name, replace(advice, choice=choice, after=after))
        take_after_clearing(free, clearing, share, moved_gpus(clearing))
        for move in clearing.moves:
            occupants.setdefault(move.to_node, []).append(
                Occupant(move.job, move.gpus, False, move.to_gpus)
            )
        for node in clearing.nodes:
            occupants[node] = [Occupant(advice.job, share, False)]
        return [moves, place]

    def _hold(
        self,
        tree: CellTree,
        free: Mapping[str, NodeFree],
        holders: Mapping[str, list[tuple[int, float | None]]],
        job: PendingWorkload,
        nodes: int,
        share: int,
        level: int,
        tightest: int,
        others: int,
    ) -> Hold | None:
        """The tighter cell worth waiting for, or ``None`` to place now."""
        s = self.settings
        if not s.wait or level <= tightest:
            return None
        counts = {n: (f.total, f.free) for n, f in free.items()}
        ready = ready_times(holders, counts, share)
        for tighter in range(tightest, level):
            found = node_ready_wait(tree, free, tighter, nodes, share, ready)
            if found is None or math.isinf(found[1]):
                continue
            cell, wait_s = found
            if wait_for_tighter(
                s.run_seconds,
                level - tightest,
                tighter - tightest,
                wait_s,
                gpus=job.gpus_total,
                waiting=others,
                per_level=s.slowdown_per_level,
            ):
                saved = s.run_seconds * (
                    level_factor(level - tightest, s.slowdown_per_level)
                    / level_factor(tighter - tightest, s.slowdown_per_level)
                    - 1.0
                )
                return Hold(tighter, tree.levels[tighter], cell, wait_s, saved)
        return None


def _read(settings: FabricPlacementSettings) -> Fabric:
    """The fabric of ``fabric_file`` (a :class:`ConfigError` when none is named)."""
    path = settings.fabric_file
    if not path:
        raise ConfigError(
            "no fabric: set fabric-placement.fabric_file=FILE (a topology.conf, a fabric "
            "YAML/JSON file with fabric_format=file, or ibnetdiscover output with "
            "fabric_format=ibnetdiscover)"
        )
    if settings.fabric_format == "file":
        from toposcope.fabric.yamlfile import read_fabric_file  # noqa: PLC0415

        return read_fabric_file(path)
    if settings.fabric_format == "ibnetdiscover":
        from toposcope.fabric.ibnetdiscover import read_ibnetdiscover  # noqa: PLC0415

        return read_ibnetdiscover(path)
    from toposcope.fabric.slurmconf import read_topology_conf  # noqa: PLC0415

    return read_topology_conf(path)


def _gpus_per_node(model: ClusterModel, tree: CellTree) -> int | None:
    """The GPU count most of the fabric's nodes in the metrics have (``None``: none has)."""
    counts = Counter(len(model.nodes[n].gpus) for n in tree.path if n in model.nodes)
    counts.pop(0, None)
    return counts.most_common(1)[0][0] if counts else None


def _free(model: ClusterModel, tree: CellTree) -> dict[str, NodeFree]:
    """Each fabric node in the metrics: its GPUs, free count and free indices."""
    result: dict[str, NodeFree] = {}
    for name in tree.path:
        if name not in model.nodes:
            continue
        capacity = model.gpu_capacity(name)
        indices = tuple(sorted(g for g, c in capacity.items() if c.free))
        result[name] = NodeFree(name, len(capacity), len(indices), indices)
    return result


def _holders(model: ClusterModel, tree: CellTree) -> dict[str, list[tuple[int, float | None]]]:
    """Node -> (GPUs held, seconds left) of each workload holding GPUs on it."""
    result: dict[str, list[tuple[int, float | None]]] = {}
    for name in tree.path:
        held = [(len(w.gpus), w.time_left_seconds) for w in model.workloads_on(name) if w.gpus]
        if held:
            result[name] = held
    return result


def _take(
    free: dict[str, NodeFree], nodes: tuple[str, ...], share: int, indices: tuple[int, ...]
) -> None:
    """Count the chosen GPUs as held, so that the next job does not count them free."""
    for name in nodes:
        state = free[name]
        left = tuple(i for i in (state.free_indices or ()) if i not in indices)
        if not indices:
            left = left[share:]
        kept = left if state.free_indices is not None else None
        free[name] = NodeFree(name, state.total, max(0, state.free - share), kept)
