"""Trace replay on the fabric (``bench/trace_replay.py --fabric``): the published mix is read
and drawn from faithfully, the judge's slowdown model is the documented one, every policy's
replay keeps each node within its GPUs and each gang within the levels its policy allows,
the replay is deterministic, and the command line prints the documented figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "bench"))

import fabric_engine
import fabric_replay
import fabric_trace
from fabric_truth import SlowdownModel

from toposcope.errors import ConfigError
from toposcope.fabric.cells import CellTree

#: a small fabric (4 leaves of 8 nodes under one spine, 256 GPUs) and a short busy trace
SMALL = ("--fabric-shape", "1x4x8x8", "--days", "0.5", "--load", "1.5", "--seed", "2")
POLICIES = ["first-fit", "bestfit", "hard-affinity", "hard-affinity-spread", "toposcope"]


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    """The small trace replayed under every policy (in-process)."""
    return fabric_replay.run(fabric_replay.parse_args(list(SMALL)))


@pytest.fixture(scope="module")
def runs() -> dict[str, fabric_engine.Run]:
    """Each policy's run of the small trace, with its outcomes."""
    args = fabric_replay.parse_args(list(SMALL))
    shape = fabric_trace.parse_shape(args.fabric_shape)
    fabric, gpus = fabric_trace.build_fabric(shape)
    tree = CellTree(fabric)
    mix = fabric_trace.read_mix(fabric_trace.DEFAULT_MIX)
    jobs = fabric_trace.generate(mix, args.seed, args.days, shape.total_gpus, args.load)
    stop = max(j.submit_time for j in jobs) + args.drain_days * 86400
    return {
        name: fabric_engine.replay(name, jobs, tree, gpus, SlowdownModel(), stop)
        for name in POLICIES
    }


def test_the_published_mix_is_read_and_drawn_as_its_cdf() -> None:
    mix = fabric_trace.read_mix(fabric_trace.DEFAULT_MIX)
    assert [g for g, _ in mix.sizes] == [1, 2, 4, 8, 16, 32, 64]
    jobs = fabric_trace.generate(mix, 7, 30, 4096, 1.0)
    sizes = Counter(j.gpus for j in jobs)
    assert set(sizes) <= {1, 2, 4, 8, 16, 32, 64} and sizes[64] > 0
    # Helios: 72.19 % of jobs ask for one GPU, 14.22 % for 5 to 8 (of the 99.73 % listed)
    assert sizes[1] / len(jobs) == pytest.approx(0.7219 / 0.9973, abs=0.01)
    assert sizes[8] / len(jobs) == pytest.approx(0.1422 / 0.9973, abs=0.01)
    runs = sorted(j.duration for j in jobs)
    assert runs[0] >= fabric_trace.MIN_RUN_S and runs[-1] <= fabric_trace.MAX_RUN_S
    # the median of the clipped CDF: between the 256 s and 512 s points of the source
    assert 256 < runs[len(runs) // 2] < 512


def test_a_malformed_mix_is_refused_with_its_row(tmp_path: Path) -> None:
    bad = tmp_path / "mix.csv"
    bad.write_text("quantity,at_most,cdf_percent\ngpus,1,50\ngpus,128,100\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="data row 3: GPUs must be 1 to 64"):
        fabric_trace.read_mix(bad)
    bad.write_text("quantity,at_most,cdf_percent\ngpus,1,50\ngpus,2,40\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="gpus needs two or more rising points"):
        fabric_trace.read_mix(bad)


def test_the_judge_charges_each_tapered_level_crossed() -> None:
    model = SlowdownModel()
    assert [model.factor(level) for level in (0, 1, 2, 3)] == pytest.approx([1, 1, 1.3, 1.9])
    assert model.slowdown(3, 1) == pytest.approx(0.9)
    # a job no leaf can hold is judged against the spine it needs at least
    assert model.slowdown(3, 2) == pytest.approx(1.9 / 1.3 - 1)
    assert model.slowdown(1, 1) == 0


def test_no_node_ever_holds_more_gpus_than_it_has(runs: dict[str, fabric_engine.Run]) -> None:
    for name, run in runs.items():
        events: list[tuple[float, int, str, int]] = []
        for outcome in run.outcomes.values():
            if outcome.start is None or outcome.end is None:
                continue
            assert len(outcome.placed_on) == outcome.nodes, name
            assert outcome.share * outcome.nodes == outcome.job.gpus, name
            for node in outcome.placed_on:
                events += [(outcome.start, 1, node, outcome.share)]
                events += [(outcome.end, 0, node, -outcome.share)]
        used: Counter[str] = Counter()
        for _, _, node, delta in sorted(events):
            used[node] += delta
            assert 0 <= used[node] <= 8, (name, node)


def test_each_policy_spans_only_what_it_allows(runs: dict[str, fabric_engine.Run]) -> None:
    for name in ("hard-affinity", "hard-affinity-spread"):
        gangs = [o for o in runs[name].outcomes.values() if o.nodes > 1 and o.start is not None]
        assert gangs and all(o.level == o.tightest for o in gangs), name
    first = [o for o in runs["first-fit"].outcomes.values() if o.start is not None]
    assert any(o.level > o.tightest for o in first if o.nodes > 1)
    ours = runs["toposcope"]
    started = sum(1 for o in ours.outcomes.values() if o.nodes > 1 and o.start is not None)
    placed = {"tight_now", "spread_now", "held_then_tighter", "held_then_spread"}
    assert sum(v for k, v in ours.decisions.items() if k in placed) == started
    assert ours.decisions["held"] >= ours.decisions["held_then_tighter"] > 0


def test_figures_compare_the_policies(report: dict[str, Any]) -> None:
    rows = {r["policy"]: r for r in report["policies"]}
    assert list(rows) == POLICIES
    assert rows["first-fit"]["queue_ratio_to_first_fit"] == 1.0
    # first-fit spreads gangs over the spine and pays for it; the cells keep them on leaves
    assert rows["first-fit"]["mean_fabric_slowdown"] > 2 * rows["toposcope"]["mean_fabric_slowdown"]
    # small jobs scattered over every node make leaf-bound gangs wait for whole nodes
    assert (
        rows["hard-affinity-spread"]["mean_gang_queue_s"]
        > 3 * rows["first-fit"]["mean_gang_queue_s"]
    )
    for row in rows.values():
        assert 0 < row["gpu_utilisation"] <= 1
        assert row["jobs"] == report["jobs"]
    target = report["target"]
    assert set(target) == {"fabric_slowdown", "queue_ratio_to_first_fit", "met"}


def test_the_replay_is_deterministic(report: dict[str, Any]) -> None:
    again = fabric_replay.run(fabric_replay.parse_args(list(SMALL)))
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in again["policies"]]
    first = [{k: v for k, v in r.items() if k != "seconds"} for r in report["policies"]]
    assert strip == first


def test_command_line_prints_json_and_refuses_bad_shapes() -> None:
    script = str(REPO / "bench/trace_replay.py")
    small = ["--fabric-shape", "1x2x4x8", "--days", "0.1", "--policies", "first-fit,toposcope"]
    done = subprocess.run(
        [sys.executable, script, "--fabric", "--json", *small],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [p["policy"] for p in result["policies"]] == ["first-fit", "toposcope"]
    assert result["gpus"] == 64 and result["slowdown_model"]["factor_by_level"] == {
        "leaf": 1.0,
        "spine": 1.3,
        "core": 1.9,
    }
    bad = subprocess.run(
        [sys.executable, script, "--fabric", "--fabric-shape", "2x4"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and "PODSxLEAVESxNODESxGPUS" in bad.stderr


def test_unknown_policies_are_named() -> None:
    args = argparse.Namespace(**{**vars(fabric_replay.parse_args([])), "policies": "nope"})
    with pytest.raises(ConfigError, match="unknown \\['nope'\\]"):
        fabric_replay.run(args)
