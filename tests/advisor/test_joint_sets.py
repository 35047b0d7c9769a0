"""The joint choice of GPU sets (toposcope.advisor.joint_sets): exact on contested groups,
first-come where nothing is contested; job-migration handing a contested NVLinked set to the
job without a second choice or to the separation that speeds up two jobs, and leaving a
pending job the GPU it would start on.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from tests.advisor.builders import cluster, pcie4, pcie8, workload
from toposcope.advisor.joint_sets import Claimant, Option, assign
from toposcope.advisor.model import NodeModel, PendingWorkload
from toposcope.advisor.policies.gpu_placement import GpuPlacement
from toposcope.advisor.policies.job_migration import JobMigration


def _option(value: float, *claims: str) -> Option[str]:
    return Option(frozenset(claims), value, "+".join(claims))


def test_a_job_with_a_second_choice_leaves_the_contested_set_to_one_without() -> None:
    first_come = Claimant("a", (_option(0.6, "gpu:nv/0", "gpu:nv/1"), _option(0.4, "gpu:a/4")))
    no_other = Claimant("b", (_option(0.6, "gpu:nv/0", "gpu:nv/1"),))
    chosen = assign([first_come, no_other])
    assert chosen["b"] is not None and chosen["b"].choice == "gpu:nv/0+gpu:nv/1"
    assert chosen["a"] is not None and chosen["a"].choice == "gpu:a/4"


def test_uncontested_claimants_take_their_best_option_and_worthless_ones_nothing() -> None:
    chosen = assign(
        [
            Claimant("x", (_option(0.2, "gpu:n/0"), _option(0.5, "gpu:n/1"))),
            Claimant("y", (_option(0.3, "gpu:m/0"),)),
            Claimant("z", (_option(0.0, "gpu:k/0"), _option(-1.0, "gpu:k/1"))),
            Claimant("w", ()),
        ]
    )
    assert chosen["x"] is not None and chosen["x"].value == 0.5
    assert chosen["y"] is not None and chosen["y"].value == 0.3
    assert chosen["z"] is None and chosen["w"] is None


def test_keys_must_be_distinct() -> None:
    with pytest.raises(ValueError, match="distinct keys"):
        assign([Claimant("x", ()), Claimant("x", ())])


def _brute_force(claimants: list[Claimant[str]]) -> float:
    best = 0.0
    choices = [[None, *[o for o in c.options if o.value > 0]] for c in claimants]
    for picks in itertools.product(*choices):
        taken = [o for o in picks if o is not None]
        claims = [c for o in taken for c in o.claims]
        if len(claims) == len(set(claims)):
            best = max(best, sum(o.value for o in taken))
    return best


def test_the_search_is_exact_on_small_contested_groups() -> None:
    rng = random.Random(7)
    gpus = [f"gpu:n/{i}" for i in range(6)]
    for _ in range(60):
        claimants = [
            Claimant(
                f"job{j}",
                tuple(
                    _option(round(rng.uniform(-0.2, 1.0), 3), *rng.sample(gpus, rng.randint(1, 3)))
                    for _ in range(rng.randint(0, 4))
                ),
            )
            for j in range(rng.randint(1, 6))
        ]
        chosen = assign(claimants)
        picked = [o for o in chosen.values() if o is not None]
        claims = [c for o in picked for c in o.claims]
        assert len(claims) == len(set(claims))
        assert sum(o.value for o in picked) == pytest.approx(_brute_force(claimants))


def test_out_of_budget_the_first_come_choice_stands() -> None:
    contested = [
        Claimant(f"job{j}", (_option(1.0 - j / 10, "gpu:n/0"), _option(0.1, f"gpu:m/{j}")))
        for j in range(5)
    ]
    chosen = assign(contested, budget=1)
    assert set(chosen) == {f"job{j}" for j in range(5)}
    assert chosen["job0"] is not None and chosen["job0"].claims == {"gpu:n/0"}
    assert all(chosen[f"job{j}"] is not None for j in range(1, 5))


def _nvlinked(name: str, *pairs: tuple[int, int]) -> NodeModel:
    """pcie4 with GPUs 0 and 1 (and ``pairs``) joined by four NVLinks."""
    node = pcie4(name)
    links = dict(node.links)
    for a, b in [(0, 1), *pairs]:
        links[(a, b)] = links[(b, a)] = "NV4"
    return replace(node, links=links)


def test_job_migration_gives_the_nvlinked_set_to_the_job_that_has_no_other() -> None:
    """Two jobs across sockets gain the same from the only NVLinked pair: alone, the first
    by name takes it and the other stays; chosen jointly, the one that has a switch pair
    on its own node moves there and the other gets the NVLinks.
    """
    a = workload("a-job", node="a", gpus=[0, 4])
    b = workload("b-job", node="b", gpus=[0, 2])
    fillers = [
        *(workload(f"fa{g}", node="a", gpus=[g]) for g in (2, 3, 6, 7)),
        *(workload(f"fb{g}", node="b", gpus=[g]) for g in (1, 3)),
        *(workload(f"fn{g}", node="nv", gpus=[g]) for g in (2, 3)),
    ]
    model = cluster([pcie8("a"), pcie4("b"), _nvlinked("nv")], [a, b, *fillers])
    result = JobMigration().evaluate(model)
    moves = {
        r.target.workload: (r.proposed["node"], r.proposed["worst_link"])
        for r in result.recommendations
    }
    assert moves == {"a-job": ("a", "PIX"), "b-job": ("nv", "NV")}


def test_a_move_leaves_a_pending_job_the_gpu_it_would_start_on() -> None:
    """The job across sockets can move to either switch pair; gpu-placement would start the
    pending one-GPU job on GPU 1, so the move takes GPUs 4 and 5 and leaves it that GPU.
    """
    job = workload("train", node="a", gpus=[0, 4])
    singles = [workload(f"s{g}", node="a", gpus=[g]) for g in (2, 3, 6, 7)]
    alone = JobMigration().evaluate(cluster([pcie8("a")], [job, *singles]))
    assert [r.proposed["gpus"] for r in alone.recommendations] == [[0, 1]]
    waiting = cluster([pcie8("a")], [job, *singles], pending=[PendingWorkload("serve", 1)])
    [rec] = JobMigration().evaluate(waiting).recommendations
    assert rec.proposed["gpus"] == [4, 5]
    [placed] = GpuPlacement().evaluate(waiting).recommendations
    assert placed.proposed["gpus"] == [1]


def test_a_job_sharing_a_gpu_counts_what_the_one_it_leaves_gains() -> None:
    """Two jobs want the only free NVLinked pair: one to stop time-slicing its NVLinked
    pair with another, one off a pair across sockets (for which the NVLinks alone are worth
    more). The separation speeds up both jobs on the shared GPUs, so it takes the NVLinks.
    """
    shared = [workload(n, node="nv", gpus=[2, 3]) for n in ("left", "right")]
    far = workload("far", node="a", gpus=[0, 4])
    fillers = [workload(f"fa{g}", node="a", gpus=[g]) for g in (1, 2, 3, 5, 6, 7)]
    result = JobMigration().evaluate(
        cluster([pcie8("a"), _nvlinked("nv", (2, 3))], [*shared, far, *fillers])
    )
    moves = {
        r.target.workload: (r.proposed["node"], r.proposed["gpus"]) for r in result.recommendations
    }
    assert moves == {"right": ("nv", [0, 1])}
    assert any(n.target == "a/far" and "chosen jointly" in n.reason for n in result.undecided)


def test_a_job_moving_nvlink_bytes_is_not_moved_on_a_guessed_link() -> None:
    """A window without the node's link matrix guesses the pair's tier from its NUMA nodes
    (across sockets: SYS); GPUs that move NVLink bytes are NVLinked whatever the guess, so
    the job stays, with a note, while the same job without NVLink traffic moves.
    """
    bare = replace(pcie8("a"), links={})
    job = workload("train", node="a", gpus=[0, 4])
    assert JobMigration().evaluate(cluster([bare], [job])).recommendations
    busy = tuple(
        replace(g, nvlink_bytes_per_second=40e9 if g.index in (0, 4) else 0.0) for g in bare.gpus
    )
    result = JobMigration().evaluate(cluster([replace(bare, gpus=busy)], [job]))
    assert result.recommendations == ()
    assert any("no link between them" in n.reason for n in result.undecided)
