"""job-migration: move a running multi-GPU job to a better-connected GPU set.

Rule. A running job holding at least ``min_gpus`` GPUs, busy (mean utilization at least
``min_utilization``), whose GPU set's worst link is worse than the best set it could get is
moved there, by checkpoint and restore, when the time it saves over its expected remaining
run time beats the checkpoint-restore cost. Candidate sets are ranked exactly like
gpu-placement's (worst link, link sum, fragmentation); they come from the job's own GPUs plus
the free ones on its node, and, with ``allow_cross_node``, from the free GPUs of other nodes.
Jobs with the highest gain choose first; GPUs chosen for one job are not offered to the next.

Gain model. Step time scales with the worst link by gpu-placement's ``LINK_FACTOR``
(Gandiva-anchored: same switch 1.0, across switches 1.4, across sockets 2.0), with
``sensitivity`` scaling the slowdown. The gain is ``f_now / f_new - 1``. Over
``remaining_seconds`` it saves ``remaining x (1 - f_new / f_now)`` seconds; only when that is
more than ``checkpoint_restore_seconds`` is the move recommended (otherwise a note says why
not). Nothing in the metrics tells a job's remaining time, hence the setting.

Defragmentation (Gandiva, HiveD). When a busy job's set, or the best free set for a pending
job, is worse than the best its size could have on some node, and a better set would be free
if smaller jobs moved to other free GPUs without getting a worse link
(:mod:`~toposcope.advisor.policies.defragment` plans it), one recommendation moves the small
jobs first and the large job last. Its gain adds the small jobs' link changes and subtracts
``checkpoint_restore_seconds / remaining_seconds`` per moved job; it is recommended only when
the net seconds saved, after every job's checkpoint-restore, are positive and beat a plain
move's. It claims the freed set, the small jobs' new GPUs and every workload it moves.
"""

from __future__ import annotations

from dataclasses import dataclass

from toposcope.advisor.model import ClusterModel, NodeModel, PendingWorkload, WorkloadModel
from toposcope.advisor.policies.base import Evaluation, Policy, PolicySettings, setting
from toposcope.advisor.policies.defragment import DefragPlan, plan_on_node
from toposcope.advisor.policies.gpu_placement import (
    Placement,
    cells,
    first_fit,
    gpu_claims,
    rank_sets,
)
from toposcope.advisor.recommendations import (
    Evidence,
    Note,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
    make_recommendation,
)
from toposcope.catalogue import spec
from toposcope.cpulist import format_cpulist
from toposcope.resources import ActionKind, ActionRequest
from toposcope.topology.model import LinkType

#: nodes (besides the job's own) on which one defragmentation search is tried at most
DEFRAG_MAX_NODES = 8
#: worst-link rank standing for "no set at all" (worse than any link)
NO_SET = LinkType.SYS.rank + 1


def _rank(placement: Placement | None) -> int:
    """The worst-link rank of a set (-1 for one GPU, :data:`NO_SET` for none)."""
    if placement is None:
        return NO_SET
    return placement.worst_link.rank if placement.worst_link is not None else -1


@dataclass(frozen=True)
class DefragValue:
    """What a defragmentation plan is worth: gain ratio, net seconds saved, and the text."""

    gain: float
    net_seconds: float
    model_text: str


@dataclass(frozen=True)
class JobMigrationSettings(PolicySettings):
    """Settings of the job-migration policy."""

    min_gpus: int = setting(2, ge=2, le=64, help="only jobs with at least this many GPUs")
    min_utilization: float = setting(
        0.05, ge=0, le=1, help="only busy jobs: mean GPU utilization over the window"
    )
    checkpoint_restore_seconds: float = setting(
        600.0, ge=0, help="what a checkpoint, move and restore costs the job"
    )
    remaining_seconds: float = setting(
        6 * 3600.0, gt=0, help="expected remaining run time of a job (not in the metrics)"
    )
    sensitivity: float = setting(
        1.0, ge=0, le=2, help="how communication-bound jobs are (scales the link slowdown)"
    )
    allow_cross_node: bool = setting(True, help="also consider free GPUs on other nodes")
    min_shared_utilization: float = setting(
        0.3,
        ge=0,
        le=1,
        help="a GPU held by several workloads is worth separating when its mean utilization "
        "is at least this",
    )
    pin_to_gpu_numa: bool = setting(
        True, help="also restrict a moved job's CPUs and memory to its new GPUs' NUMA node"
    )


class JobMigration(Policy[JobMigrationSettings]):
    """Move running multi-GPU jobs off poorly connected GPU sets when it pays off."""

    name = "job-migration"
    description = "move running multi-GPU jobs to a better-connected GPU set when it pays off"
    settings_type = JobMigrationSettings
    requires = (
        spec("toposcope_workload_gpu_info"),
        spec("toposcope_gpu_link_info"),
        spec("toposcope_gpu_utilization_ratio"),
    )

    def evaluate(self, model: ClusterModel) -> Evaluation:
        """One ``migrate-job`` recommendation per job worth moving: GPU sets shared with
        other workloads first, then poorly linked sets.
        """
        s = self.settings
        self._best_sets: dict[tuple[str, frozenset[int], int], Placement | None] = {}
        self._by_count: dict[int, list[Placement]] = {}
        self._cells: dict[str, list[frozenset[int]]] = {}
        self._ideal: dict[tuple[object, int], int] = {}
        self._shapes: dict[str, tuple[object, ...]] = {}
        self._floors: dict[int, int] = {}
        self._able_nodes: dict[tuple[int, int], list[str]] = {}
        jobs = [w for w in model.workloads if len(w.gpus) >= s.min_gpus]
        movers = self._sharing(model)
        if not jobs and not movers and not model.pending:
            return Evaluation()
        notes: list[Note] = []
        missing = self.missing_note(model)
        if missing:
            notes.append(missing)
        recs: list[Recommendation] = []
        taken: set[str] = set()
        moved: set[str] = set()
        for share_gain, job, peers, util in movers:
            current = rank_sets(model.nodes[job.node], job.gpus, len(job.gpus))[0]
            best = self._best(model, job, taken, include_own=False)
            if best is None:
                notes.append(
                    self.note(
                        job.key,
                        f"shares GPUs {list(job.gpus)} with {', '.join(peers)}; "
                        f"no {len(job.gpus)} free GPU(s) to move it to",
                    )
                )
                continue
            f_now, f_new = current.factor(s.sensitivity), best.factor(s.sensitivity)
            gain = (1.0 + share_gain) * f_now / f_new - 1.0
            saved = s.remaining_seconds * (1.0 - 1.0 / (1.0 + gain)) if gain > 0 else 0.0
            if saved <= s.checkpoint_restore_seconds:
                notes.append(
                    self.note(
                        job.key,
                        f"separating it from {', '.join(peers)} would save {saved:.0f}s, less "
                        f"than the checkpoint-restore cost {s.checkpoint_restore_seconds:.0f}s",
                    )
                )
                continue
            taken.update(gpu_claims(best.node, best.gpus))
            moved.add(job.key)
            model_text = (
                f"time-slicing: {len(peers) + 1} workloads on a GPU {util:.0%} busy, each "
                f"assumed to want all of it: ({len(peers) + 1} - 1) x {util:.2f} = "
                f"{share_gain:.2f} faster alone; link factor {f_now:.2f} -> {f_new:.2f}"
            )
            recs.append(self._recommend(model, job, current, best, gain, saved, model_text, peers))
        options: list[tuple[float, WorkloadModel, Placement, Placement | None]] = []
        for job in jobs:
            if job.key in moved:
                continue
            node = model.node(job.node)
            if node is None:
                continue
            utils = [g.utilization for i in job.gpus if (g := node.gpu(i)) is not None]
            if not utils or any(u is None for u in utils):
                notes.append(self.note(job.key, "no GPU utilization series for its GPUs"))
                continue
            mean = sum(u for u in utils if u is not None) / len(utils)
            if mean < s.min_utilization:
                continue  # idle: idle-release's business
            current = rank_sets(node, job.gpus, len(job.gpus))[0]
            f_now = current.factor(s.sensitivity)
            candidate = self._best(model, job)
            if candidate is None or candidate.factor(s.sensitivity) >= f_now:
                if _rank(current) <= self._floor(model, job.node, len(job.gpus)):
                    continue  # nothing better exists, even by moving small jobs away
                options.append((0.0, job, current, None))
                continue
            gain = f_now / candidate.factor(s.sensitivity) - 1.0
            options.append((gain, job, current, candidate))
        for _, job, current, first_choice in sorted(options, key=lambda o: (-o[0], o[1].key)):
            if job.key in moved:
                continue  # moved out of the way of a larger job by an earlier plan
            f_now = current.factor(s.sensitivity)
            best = first_choice
            if first_choice is not None and taken & set(
                gpu_claims(first_choice.node, first_choice.gpus)
            ):
                best = self._best(model, job, taken)
            if best is not None and best.factor(s.sensitivity) >= f_now:
                best = None
            saved = (
                s.remaining_seconds * (1.0 - best.factor(s.sensitivity) / f_now) if best else 0.0
            )
            must_beat = min(_rank(current), _rank(best))
            if must_beat > self._floor(model, job.node, len(job.gpus)):
                plan = self._plan(model, len(job.gpus), job, taken, moved, must_beat)
                if plan is not None:
                    value = self._defrag_value(plan, f_now, f_now, own_cost=True)
                    plain_net = saved - s.checkpoint_restore_seconds if best else None
                    if value.net_seconds > 0 and (
                        plain_net is None or value.net_seconds > plain_net
                    ):
                        taken.update(plan.claims())
                        moved.add(job.key)
                        moved.update(m.workload.key for m in plan.moves)
                        recs.append(self._recommend_defrag(model, job, current, plan, value))
                        continue
                    if best is None:
                        notes.append(self._defrag_note(job.key, plan, value))
            if best is None:
                continue
            gain = f_now / best.factor(s.sensitivity) - 1.0
            if saved <= s.checkpoint_restore_seconds:
                notes.append(
                    self.note(
                        job.key,
                        f"moving to {best.node} GPUs {list(best.gpus)} would save {saved:.0f}s "
                        f"of {s.remaining_seconds:.0f}s, less than the checkpoint-restore "
                        f"cost {s.checkpoint_restore_seconds:.0f}s",
                    )
                )
                continue
            taken.update(gpu_claims(best.node, best.gpus))
            moved.add(job.key)
            f_new = best.factor(s.sensitivity)
            model_text = (
                f"link factor now {f_now:.2f} / after {f_new:.2f} - 1 (Gandiva-anchored "
                f"LINK_FACTOR, sensitivity {s.sensitivity:g})"
            )
            recs.append(self._recommend(model, job, current, best, gain, saved, model_text))
        for pending in sorted(model.pending, key=lambda j: (-j.gpus_requested, j.name)):
            rec_or_note = self._defrag_pending(model, pending, taken, moved)
            if isinstance(rec_or_note, Recommendation):
                recs.append(rec_or_note)
            elif rec_or_note is not None:
                notes.append(rec_or_note)
        return Evaluation(tuple(recs), tuple(notes))

    def _sharing(self, model: ClusterModel) -> list[tuple[float, WorkloadModel, list[str], float]]:
        """Workloads to move off GPUs they share: (gain, workload, the others, utilization).

        On each GPU held by several workloads, the one holding most GPUs (then the first by
        name) stays and the others move; a workload moves once.
        """
        s = self.settings
        by_node: dict[str, list[WorkloadModel]] = {}
        for w in model.workloads:
            if w.gpus:
                by_node.setdefault(w.node, []).append(w)
        found: dict[str, tuple[float, WorkloadModel, list[str], float]] = {}
        for name, holders in sorted(by_node.items()):
            node = model.node(name)
            if node is None:
                continue
            per_gpu: dict[int, list[WorkloadModel]] = {}
            for w in holders:
                for g in w.gpus:
                    per_gpu.setdefault(g, []).append(w)
            for index, sharing in sorted(per_gpu.items()):
                gpu = node.gpu(index)
                if len(sharing) < 2 or gpu is None or gpu.utilization is None:
                    continue
                util = min(1.0, gpu.utilization)
                if util < s.min_shared_utilization:
                    continue
                ordered = sorted(sharing, key=lambda w: (-len(w.gpus), w.name))
                for w in ordered[1:]:
                    if w.key in found or any(w.key == f[1].key for f in found.values()):
                        continue
                    if ordered[0].key in found:
                        continue  # the one that stays is itself moving away
                    gain = (len(sharing) - 1) * util
                    peers = [o.name for o in sharing if o.key != w.key]
                    found[w.key] = (gain, w, peers, util)
        return sorted(found.values(), key=lambda f: (-f[0], f[1].key))

    def _node_best(
        self, model: ClusterModel, name: str, free: set[int], count: int
    ) -> Placement | None:
        """The best set of ``count`` GPUs among ``free`` on node ``name`` (memoised: many
        jobs ask about the same node and GPUs).
        """
        if len(free) < count:
            return None
        key = (name, frozenset(free), count)
        if key not in self._best_sets:
            node = model.nodes[name]
            if name not in self._cells:
                self._cells[name] = cells(node)
            sets = rank_sets(node, free, count, self._cells[name])
            self._best_sets[key] = sets[0] if sets else None
        return self._best_sets[key]

    def _ranked_others(self, model: ClusterModel, count: int) -> list[Placement]:
        """Every node's best free set of ``count`` GPUs, best first (computed once)."""
        if count not in self._by_count:
            found = [
                p
                for name in sorted(model.nodes)
                if (p := self._node_best(model, name, set(model.free_gpus(name)), count))
                is not None
            ]
            self._by_count[count] = sorted(found, key=lambda p: (p.score()[:2], p.score(), p.node))
        return self._by_count[count]

    def _best(
        self,
        model: ClusterModel,
        job: WorkloadModel,
        taken: set[str] | None = None,
        include_own: bool = True,
    ) -> Placement | None:
        busy = taken or set()
        busy_nodes = {c.split(":", 1)[1].rsplit("/", 1)[0] for c in busy}
        count = len(job.gpus)

        def free_on(name: str) -> set[int]:
            free = set(model.free_gpus(name))
            if name == job.node and include_own:
                free |= set(job.gpus)
            return {g for g in free if f"gpu:{name}/{g}" not in busy}

        ranked: list[Placement] = []
        if job.node in model.nodes:
            own = self._node_best(model, job.node, free_on(job.node), count)
            if own is not None:
                ranked.append(own)
        if self.settings.allow_cross_node:
            for placement in self._ranked_others(model, count):
                if placement.node == job.node:
                    continue
                if placement.node in busy_nodes:  # some of its GPUs went to earlier jobs
                    again = self._node_best(model, placement.node, free_on(placement.node), count)
                    if again is not None:
                        ranked.append(again)
                    continue
                ranked.append(placement)  # the best of the untouched nodes: none after beats it
                break
        if not ranked:
            return None
        # prefer staying on the node when it is as good (a local move is cheaper)
        return min(ranked, key=lambda p: (p.score()[:2], p.node != job.node, p.score(), p.node))

    # defragmentation ---------------------------------------------------------------------
    def _node_cells(self, model: ClusterModel, name: str) -> list[frozenset[int]]:
        if name not in self._cells:
            self._cells[name] = cells(model.nodes[name])
        return self._cells[name]

    def _ideal_rank(self, model: ClusterModel, name: str, count: int) -> int:
        """The best worst-link rank ``count`` GPUs of node ``name`` could have if all were
        free (memoised per node shape: large clusters repeat a few machine types).
        """
        node = model.nodes[name]
        up = [g.index for g in node.gpus if g.up is not False]
        if name not in self._shapes:
            self._shapes[name] = (
                tuple((g.index, g.numa_node, node.package_of(g.numa_node)) for g in node.gpus),
                tuple(up),
                tuple(sorted(node.links.items())),
            )
        key = (self._shapes[name], count)
        if key not in self._ideal:
            sets = rank_sets(node, up, count, self._node_cells(model, name))
            self._ideal[key] = _rank(sets[0]) if sets else NO_SET
        return self._ideal[key]

    def _floor(self, model: ClusterModel, name: str, count: int) -> int:
        """The best worst-link rank a job of ``count`` GPUs on node ``name`` could reach:
        on its node, or with ``allow_cross_node`` on any node.
        """
        own = self._ideal_rank(model, name, count) if name in model.nodes else NO_SET
        if not self.settings.allow_cross_node:
            return own
        return min(own, self._floor_any(model, count))

    def _floor_any(self, model: ClusterModel, count: int) -> int:
        """The best worst-link rank ``count`` GPUs could have on any node."""
        if count not in self._floors:
            self._floors[count] = min(
                (self._ideal_rank(model, n, count) for n in model.nodes), default=NO_SET
            )
        return self._floors[count]

    def _able(self, model: ClusterModel, count: int, must_beat: int) -> list[str]:
        """Nodes (by name) whose machine could give ``count`` GPUs a worst link better than
        ``must_beat`` (memoised: many jobs ask the same question).
        """
        key = (count, must_beat)
        if key not in self._able_nodes:
            self._able_nodes[key] = [
                n for n in sorted(model.nodes) if self._ideal_rank(model, n, count) < must_beat
            ]
        return self._able_nodes[key]

    def _plan(
        self,
        model: ClusterModel,
        count: int,
        job: WorkloadModel | None,
        taken: set[str],
        moved: set[str],
        must_beat: int,
    ) -> DefragPlan | None:
        """The best defragmentation plan for a job of ``count`` GPUs (``job``: running, on
        its node first; ``None``: pending): best worst link, then fewest moves, then staying
        on the job's node. At most :data:`DEFRAG_MAX_NODES` other nodes are searched.
        """
        s = self.settings
        names = [job.node] if job is not None and job.node in model.nodes else []
        if job is None or s.allow_cross_node:
            names += [n for n in self._able(model, count, must_beat) if n not in names]
        fixed = set(moved) | ({job.key} if job is not None else set())

        def relocate(blocker: WorkloadModel, avoid: set[str]) -> Placement | None:
            return self._best(model, blocker, avoid, include_own=False)

        plans: list[DefragPlan] = []
        searched = 0
        for name in names:
            own = job is not None and name == job.node
            if not own and searched >= DEFRAG_MAX_NODES:
                break
            if self._ideal_rank(model, name, count) >= must_beat:
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
                sensitivity=s.sensitivity,
                node_cells=self._node_cells(model, name),
            )
            if plan is not None:
                plans.append(plan)
        if not plans:
            return None
        return min(
            plans,
            key=lambda p: (
                _rank(p.target),
                len(p.moves),
                job is None or p.target.node != job.node,
                p.target.score(),
                p.target.node,
            ),
        )

    def _defrag_value(
        self,
        plan: DefragPlan,
        f_now: float | None,
        f_base: float | None,
        *,
        own_cost: bool,
    ) -> DefragValue:
        """Gain and net seconds of a plan (the model is in docs/policies.md).

        The large job goes from step-time factor ``f_now`` (``None``: it would wait, at no
        speed) to the plan's; its gain is counted against ``f_base`` (its own set for a
        running job, first fit for a pending one; ``None``: nothing fits, its whole
        throughput ``1 / f_new`` is gained). Every moved small job gains its link change and
        loses one checkpoint-restore over the remaining time,
        ``checkpoint_restore_seconds / remaining_seconds`` of its throughput. ``own_cost``:
        the large job pays a checkpoint-restore too (it is running).
        """
        s = self.settings
        cost, remaining = s.checkpoint_restore_seconds, s.remaining_seconds
        f_new = plan.target.factor(s.sensitivity)
        gain = f_base / f_new - 1.0 if f_base is not None else 1.0 / f_new
        saved = remaining * (1.0 - f_new / f_now) if f_now is not None else remaining
        net = saved - (cost if own_cost else 0.0)
        for move in plan.moves:
            fb_now = move.current.factor(s.sensitivity)
            fb_new = move.target.factor(s.sensitivity)
            gain += fb_now / fb_new - 1.0 - cost / remaining
            net += remaining * (1.0 - fb_new / fb_now) - cost
        names = ", ".join(m.workload.name for m in plan.moves)
        base = f"link factor {f_base:.2f} / {f_new:.2f} - 1" if f_base else f"1 / {f_new:.2f}"
        text = (
            f"defragmentation: {base} for the large job, minus {cost:.0f}s/{remaining:.0f}s "
            f"for each of the {len(plan.moves)} job(s) moved first ({names}); it saves "
            f"{saved:.0f}s of {remaining:.0f}s remaining, {net:.0f}s net of "
            f"{len(plan.moves) + (1 if own_cost else 0)} checkpoint-restore(s) of {cost:.0f}s"
        )
        return DefragValue(gain, net, text)

    def _defrag_note(self, target: str, plan: DefragPlan, value: DefragValue) -> Note:
        names = ", ".join(m.workload.name for m in plan.moves)
        return self.note(
            target,
            f"freeing {plan.target.node} GPUs {list(plan.target.gpus)} by moving {names} "
            f"would save {value.net_seconds:.0f}s net of the checkpoint-restore cost of "
            f"every job moved: not worth it",
        )

    def _defrag_pending(
        self,
        model: ClusterModel,
        pending: PendingWorkload,
        taken: set[str],
        moved: set[str],
    ) -> Recommendation | Note | None:
        """Place a pending job on a set freed by moving small jobs, when no free set is as
        good and the gain beats the moved jobs' cost; ``None`` when there is nothing to do.
        """
        s = self.settings
        count = pending.gpus_requested
        if count < s.min_gpus:
            return None
        plain = self._free_best(model, count, taken)
        must_beat = _rank(plain)
        if must_beat <= self._floor_any(model, count):
            return None
        plan = self._plan(model, count, None, taken, moved, must_beat)
        if plan is None:
            return None
        baseline = first_fit(model, count, taken)
        value = self._defrag_value(
            plan,
            plain.factor(s.sensitivity) if plain is not None else None,
            baseline.factor(s.sensitivity) if baseline is not None else None,
            own_cost=False,
        )
        if value.net_seconds <= 0:
            return self._defrag_note(f"pending/{pending.name}", plan, value)
        taken.update(plan.claims())
        moved.update(m.workload.key for m in plan.moves)
        return self._recommend_defrag(model, None, plain, plan, value, pending=pending.name)

    def _free_best(self, model: ClusterModel, count: int, taken: set[str]) -> Placement | None:
        """The best free set of ``count`` GPUs on any node, GPUs in ``taken`` excluded."""
        busy_nodes = {c.split(":", 1)[1].rsplit("/", 1)[0] for c in taken}
        ranked: list[Placement] = []
        for placement in self._ranked_others(model, count):
            if placement.node in busy_nodes:
                free = {g for g in model.free_gpus(placement.node)}
                free -= {g for g in free if f"gpu:{placement.node}/{g}" in taken}
                again = self._node_best(model, placement.node, free, count)
                if again is not None:
                    ranked.append(again)
                continue
            ranked.append(placement)
            break
        return min(ranked, key=lambda p: (p.score(), p.node)) if ranked else None

    def _pin(self, node: NodeModel, gpus: tuple[int, ...]) -> tuple[list[int], list[int]]:
        """CPUs and memory nodes for a job on ``gpus`` of ``node``: the NUMA node holding
        most of them (empty without ``pin_to_gpu_numa`` or locality).
        """
        if not self.settings.pin_to_gpu_numa:
            return [], []
        counts: dict[int, int] = {}
        for index in gpus:
            g = node.gpu(index)
            if g is not None and g.numa_node is not None:
                counts[g.numa_node] = counts.get(g.numa_node, 0) + 1
        home = min(counts, key=lambda n: (-counts[n], n)) if counts else None
        numa = node.numa(home) if home is not None else None
        if numa is not None and numa.cpus:
            return list(numa.cpus), [numa.id]
        return [], []

    def _recommend_defrag(
        self,
        model: ClusterModel,
        job: WorkloadModel | None,
        current: Placement | None,
        plan: DefragPlan,
        value: DefragValue,
        pending: str = "",
    ) -> Recommendation:
        """A recommendation moving the plan's small jobs, then the large one (``job``
        running: ``migrate``; else the pending job ``pending``: ``place``).
        """
        best = plan.target
        target_node = model.nodes[best.node]
        actions: list[ActionRequest] = []
        moves: list[dict[str, object]] = []
        claims = plan.claims()
        for move in plan.moves:
            w, to = move.workload, move.target
            cpus, mems = self._pin(model.nodes[to.node], to.gpus)
            actions.append(
                ActionRequest("", ActionKind.MIGRATE, w.name, to.node, cpus, mems, list(to.gpus))
            )
            moves.append(
                {"workload": w.name, "from_node": w.node, "from_gpus": list(w.gpus),
                 "node": to.node, "gpus": list(to.gpus)}
            )  # fmt: skip
            claims.append(f"workload:{w.key}")
        cpus, mems = self._pin(target_node, best.gpus)
        name = job.name if job is not None else pending
        kind = ActionKind.MIGRATE if job is not None else ActionKind.PLACE
        actions.append(ActionRequest("", kind, name, best.node, cpus, mems, list(best.gpus)))
        claims.append(f"workload:{job.key}" if job is not None else f"workload:pending/{name}")
        cross = any(m.target.node != m.workload.node for m in plan.moves) or (
            job is not None and best.node != job.node
        )
        evidence = [
            Evidence(
                "toposcope_workload_gpu_info",
                {"node": m.workload.node, "workload": m.workload.name, "gpu": str(g)},
                1.0,
            )
            for m in plan.moves
            for g in m.workload.gpus
            if g in best.gpus
        ]
        names = ", ".join(
            f"{m.workload.name} ({m.workload.node} GPUs {list(m.workload.gpus)} -> "
            f"{m.target.node} GPUs {list(m.target.gpus)})"
            for m in plan.moves
        )
        if job is not None:
            where = f"{job.name} from {job.node} GPUs {list(job.gpus)}"
            worst_now = str(current.worst_link) if current is not None else "none"
            summary_now = f" (worst link {worst_now})"
            current_state: dict[str, object] = {
                "node": job.node,
                "gpus": list(job.gpus),
                "worst_link": worst_now,
            }
            rec_kind = RecommendationKind.MIGRATE_JOB
            target = Target(job.node, job.name, tuple(job.gpus))
        else:
            where = f"pending {pending}"
            summary_now = (
                f" (best free set: worst link {current.worst_link})"
                if current is not None
                else " (no free set fits it)"
            )
            current_state = {
                "state": "pending",
                "best_free": current.to_dict() if current is not None else None,
            }
            rec_kind = RecommendationKind.PLACE
            target = Target(best.node, pending, best.gpus)
        return make_recommendation(
            kind=rec_kind,
            policy=self.name,
            target=target,
            summary=(
                f"defragment: move {names}, then {where}{summary_now} to {best.node} GPUs "
                f"{list(best.gpus)} (worst link {best.worst_link})"
            ),
            current=current_state,
            proposed={
                "node": best.node,
                "gpus": list(best.gpus),
                "cpus": format_cpulist(cpus),
                "mems": mems,
                "worst_link": str(best.worst_link),
                "saves_seconds": round(value.net_seconds),
                "defragment": moves,
            },
            evidence=evidence,
            estimated_gain=value.gain,
            gain_model=value.model_text,
            confidence=0.45 if cross else 0.55,
            risk=Risk.HIGH if cross else Risk.MEDIUM,
            actions=actions,
            claims=claims,
        )

    def _recommend(
        self,
        model: ClusterModel,
        job: WorkloadModel,
        current: Placement,
        best: Placement,
        gain: float,
        saved: float,
        model_text: str,
        peers: list[str] | None = None,
    ) -> Recommendation:
        s = self.settings
        node = model.nodes[job.node]
        target_node = model.nodes[best.node]
        cpus: list[int] = []
        mems: list[int] = []
        if s.pin_to_gpu_numa:
            counts: dict[int, int] = {}
            for index in best.gpus:
                g = target_node.gpu(index)
                if g is not None and g.numa_node is not None:
                    counts[g.numa_node] = counts.get(g.numa_node, 0) + 1
            home = min(counts, key=lambda n: (-counts[n], n)) if counts else None
            numa = target_node.numa(home) if home is not None else None
            if numa is not None and numa.cpus:
                cpus, mems = list(numa.cpus), [numa.id]
        evidence = [
            Evidence(
                "toposcope_gpu_link_info",
                {"node": job.node, "gpu": str(a), "peer_gpu": str(b)},
                1.0,
            )
            for a in job.gpus
            for b in job.gpus
            if a < b and node.link(a, b) == current.worst_link
        ]
        for index in job.gpus:
            gpu = node.gpu(index)
            if gpu is not None and gpu.utilization is not None:
                evidence.append(
                    Evidence(
                        "toposcope_gpu_utilization_ratio",
                        {"node": job.node, "gpu": str(index)},
                        gpu.utilization,
                    )
                )
        cross = best.node != job.node
        why = (
            f"shares its GPUs with {', '.join(peers)}"
            if peers
            else f"worst link {current.worst_link}"
        )
        return make_recommendation(
            kind=RecommendationKind.MIGRATE_JOB,
            policy=self.name,
            target=Target(job.node, job.name, tuple(job.gpus)),
            summary=(
                f"move {job.name} from {job.node} GPUs {list(job.gpus)} ({why}) to "
                f"{best.node} GPUs {list(best.gpus)} (worst link {best.worst_link})"
            ),
            current={
                "node": job.node,
                "gpus": list(job.gpus),
                "worst_link": str(current.worst_link),
            },
            proposed={
                "node": best.node,
                "gpus": list(best.gpus),
                "cpus": format_cpulist(cpus),
                "mems": mems,
                "worst_link": str(best.worst_link),
                "saves_seconds": round(saved),
            },
            evidence=evidence,
            estimated_gain=gain,
            gain_model=(
                f"{model_text}; saves {saved:.0f}s of {s.remaining_seconds:.0f}s remaining vs "
                f"{s.checkpoint_restore_seconds:.0f}s checkpoint-restore"
            ),
            confidence=0.5 if cross else 0.6,
            risk=Risk.HIGH if cross else Risk.MEDIUM,
            actions=[
                ActionRequest(
                    "", ActionKind.MIGRATE, job.name, best.node, cpus, mems, list(best.gpus)
                )
            ],
            claims=[*gpu_claims(best.node, best.gpus), f"workload:{job.key}"],
        )
