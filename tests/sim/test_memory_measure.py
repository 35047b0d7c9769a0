"""A simulated node's single-thread memory bandwidth test: its figures follow the truth in
effect, and the advisor's ``--memory-bandwidth`` reader takes its files as written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toposcope.advisor.memory_matrix import read_memory_file
from toposcope.sim.memory_measure import SPREAD, measured_memory, write_memory_files
from toposcope.sim.templates import builtin_template
from toposcope.sim.truth_params import shipped_truth, truth, truth_in_effect
from toposcope.sim.truth_perturb import perturb_truth

NODE = "dgx-a100"


def test_local_and_remote_figures_follow_the_truths_core_bandwidth_and_remote_cost() -> None:
    template = builtin_template(NODE)
    read = {(a, b): g for a, b, g in measured_memory("n1", template)}
    ids = sorted(template.numa_ids)
    assert set(read) == {(a, b) for a in ids if template.node_cpus(a) for b in ids}
    core = truth().weight("memory_stream_gbps")
    for (a, b), gbps in read.items():
        expected = core / (1 + truth().remote_cost(template.distance(a, b)))
        assert expected * (1 - SPREAD) <= gbps <= expected * (1 + SPREAD)
    assert measured_memory("n1", template) == measured_memory("n1", template)  # seeded


def test_each_perturbed_truth_is_what_the_test_measures() -> None:
    template = builtin_template(NODE)
    far = max(
        ((a, b) for a in template.numa_ids for b in template.numa_ids),
        key=lambda p: template.distance(*p),
    )
    costs = []
    for seed in range(5):
        with truth_in_effect(perturb_truth(shipped_truth(), 0.3, seed)):
            read = {(a, b): g for a, b, g in measured_memory("n1", template)}
            cost = truth().remote_cost(template.distance(*far))
            core = truth().weight("memory_stream_gbps")
        measured = read[(far[0], far[0])] / read[far] - 1
        assert measured == pytest.approx(cost, abs=0.05)
        assert read[(far[0], far[0])] == pytest.approx(core, rel=SPREAD)
        costs.append(cost)
    assert max(costs) - min(costs) > 0.05  # the seeds differ, and the files with them


def test_the_advisor_reads_the_written_files(tmp_path: Path) -> None:
    nodes = {"cpu1": builtin_template(NODE), "cpu2": builtin_template("xeon-2s")}
    written = write_memory_files(nodes, tmp_path / "stream")
    assert set(written) == {"cpu1", "cpu2"}
    assert read_memory_file(written["cpu2"]).nodes() == {0, 1}
    matrix = read_memory_file(written["cpu1"])
    assert matrix.per_core
    assert matrix.core_gbps(0) == pytest.approx(truth().weight("memory_stream_gbps"), rel=SPREAD)
