"""numa-pinning priced by the machine's measured memory bandwidths (``--memory-bandwidth``)
instead of the advisor's round figures for a core's bandwidth and a remote byte's cost.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.advisor.builders import GIB, cluster, pcie4, workload
from toposcope.advisor.memory_matrix import (
    MemoryMatrix,
    MemoryOption,
    read_memory_file,
    with_measured_memory,
)
from toposcope.advisor.model import WorkloadModel
from toposcope.advisor.numa_share import (
    CORE_STREAM_GBPS,
    THREAD_SPREAD,
    MatrixPricing,
    core_gbps_on,
    matrix_cost,
)
from toposcope.advisor.policies.numa_pinning import NumaPinning, NumaPinningSettings
from toposcope.report.recommendation import Recommendation

GB = 1e9
FIXTURES = Path(__file__).parent.parent / "fixtures" / "memory-bandwidth"
PAIRS = read_memory_file(FIXTURES / "stream-pairs-2s.txt")
MLC = read_memory_file(FIXTURES / "mlc-bandwidth-matrix-2s.txt")


def spread(name: str, local: float, remote: float) -> WorkloadModel:
    """Four cores and 8 GiB split evenly over both NUMA nodes, with measured traffic (GB/s)."""
    job = workload(name, cpu={0: 2.0, 1: 2.0}, memory={0: 4 * GIB, 1: 4 * GIB})
    return replace(job, memory_bytes_per_second={"local": local * GB, "remote": remote * GB})


def pin_of(job: WorkloadModel, file: MemoryMatrix | None) -> Recommendation:
    model = cluster([pcie4()], [job])
    if file is not None:
        model = with_measured_memory(model, [MemoryOption("n*", file)])
    [rec] = NumaPinning().evaluate(model).recommendations
    return rec


def test_pair_lines_price_a_pin_pair_by_pair_from_the_measured_figures() -> None:
    rec = pin_of(spread("w", 10.0, 10.0), PAIRS)
    core = 0.5 * 9.6 + 0.5 * 9.5
    share = 20.0 / (4 * core)
    # each thread-page pair across the nodes, and each pair of threads apart x thread_spread
    cost = (0.25 * (9.6 / 6.0 - 1) + 0.25 * (9.5 / 6.1 - 1)) * (1 + THREAD_SPREAD)
    saved = share * cost
    assert rec.estimated_gain == pytest.approx(saved / (1 - saved), rel=1e-4)
    assert "stream-pairs-2s.txt" in rec.gain_model
    assert f"remote cost {cost:.3f}" in rec.gain_model
    basis = rec.current["numa_sensitivity"]
    assert basis["estimate"] == "measured"
    assert basis["core_gbps"] == pytest.approx(core, abs=1e-3)
    assert basis["core_gbps_source"] == "measured"


def test_an_mlc_matrix_prices_remote_memory_but_keeps_the_cores_setting() -> None:
    rec = pin_of(spread("w", 10.0, 10.0), MLC)
    share = 20.0 / (4 * CORE_STREAM_GBPS)
    cost = (0.25 * (92340.5 / 50812.3 - 1) + 0.25 * (92118.7 / 50690.1 - 1)) * (1 + THREAD_SPREAD)
    saved = share * cost
    assert rec.estimated_gain == pytest.approx(saved / (1 - saved), rel=1e-4)
    assert rec.current["numa_sensitivity"]["core_gbps_source"] == "setting"


def test_a_slower_remote_link_measured_means_a_larger_gain() -> None:
    slow = read_memory_file(FIXTURES / "stream-pairs-2s.txt")
    slow = replace(
        slow,
        pairs={
            k: replace(v, gbps=v.gbps / 2 if k[0] != k[1] else v.gbps)
            for k, v in slow.pairs.items()
        },
    )
    job = spread("w", 10.0, 10.0)
    assert pin_of(job, slow).estimated_gain > 2 * pin_of(job, PAIRS).estimated_gain


def test_without_a_file_the_round_figures_stand() -> None:
    job = spread("w", 10.0, 10.0)
    rec = pin_of(job, None)
    assert "at the node's farthest SLIT distance" in rec.gain_model
    assert rec.current["numa_sensitivity"]["core_gbps_source"] == "setting"
    assert rec.estimated_gain != pytest.approx(pin_of(job, PAIRS).estimated_gain, rel=1e-3)


def test_a_pair_the_file_lacks_falls_back_to_the_distance_scaled_cost(tmp_path: Path) -> None:
    path = tmp_path / "one.txt"
    path.write_text("0 0 9.6\n0 1 6.0\n", encoding="utf-8")  # no row for CPU node 1
    partial = read_memory_file(path)
    model = with_measured_memory(cluster([pcie4()], []), [MemoryOption("n1", partial)])
    node = model.nodes["n1"]
    assert matrix_cost(node, {0: 0.5, 1: 0.5}, {0: 0.5, 1: 0.5}) is None
    assert core_gbps_on(node, {0: 0.5, 1: 0.5}, 11.0) == (11.0, "")
    assert matrix_cost(node, {0: 1.0}, {0: 0.5, 1: 0.5}) == pytest.approx(0.5 * (9.6 / 6 - 1))
    rec = pin_of(spread("w", 10.0, 10.0), partial)
    assert "at the node's farthest SLIT distance" in rec.gain_model


def test_a_placement_whose_memory_does_not_all_fit_is_priced_on_the_same_basis() -> None:
    model = with_measured_memory(cluster([pcie4()], []), [MemoryOption("n1", PAIRS)])
    node = model.nodes["n1"]
    limits = NumaPinningSettings().limits()
    pricing = MatrixPricing(0.4, frozenset(), 0.0)
    before = limits.cost(node, False, ({0: 0.5, 1: 0.5}, {0: 0.5, 1: 0.5}), 0, None, pricing)
    after = limits.cost(node, False, ({0: 1.0}, {0: 0.8, 1: 0.2}), 0, None, pricing)
    assert before == pytest.approx(0.4 * (0.25 * (9.6 / 6 - 1) + 0.25 * (9.5 / 6.1 - 1)))
    assert after == pytest.approx(0.4 * 0.2 * (9.6 / 6 - 1))
    assert limits.cost(node, False, ({0: 1.0}, {0: 0.8, 1: 0.2}), 0, None, None) != after
    spread = MatrixPricing(0.4, frozenset(), 0.5)
    apart = limits.cost(node, False, ({0: 0.5, 1: 0.5}, {0: 1.0}), 0, None, spread)
    assert apart == pytest.approx(
        0.4 * (0.5 * (9.5 / 6.1 - 1)) + 0.4 * 0.25 * 0.5 * ((9.6 / 6 - 1) + (9.5 / 6.1 - 1))
    )


def test_a_gpu_job_whose_threads_and_pages_sit_together_away_from_its_gpus_is_priced() -> None:
    """Threads and pages both on node 1, GPUs on node 0: no thread reads remote memory, but
    every host-to-device copy reads its pages across the socket link.
    """
    job = workload("far", cpu={1: 4.0}, memory={1: 8 * GIB}, gpus=(0,))
    job = replace(job, memory_bytes_per_second={"local": 12.0 * GB, "remote": 0.0})
    rec = pin_of(job, PAIRS)
    share = 12.0 / (4 * 9.5)
    saved = share * (9.6 / 6.0 - 1)  # pages on node 1 read from the GPUs' node 0
    assert rec.proposed["numa_node"] == 0
    assert rec.estimated_gain == pytest.approx(saved / (1 - saved), rel=1e-4)
    assert "its pages against its GPUs' nodes" in rec.gain_model


def test_a_page_costs_its_worse_crossing_not_both_and_the_nearest_gpu_counts() -> None:
    model = with_measured_memory(cluster([pcie4()], []), [MemoryOption("n1", PAIRS)])
    node = model.nodes["n1"]
    r01 = 9.6 / 6.0 - 1
    # a thread on 0 reading a page on 1 that GPUs on 0 copy: one crossing, r01, not two
    assert matrix_cost(node, {0: 1.0}, {1: 1.0}, {0}) == pytest.approx(r01)
    # the page on 1 beside a thread on 1, copied by GPUs on 0: the copy's crossing
    assert matrix_cost(node, {1: 1.0}, {1: 1.0}, {0}) == pytest.approx(r01)
    # GPUs on both nodes: the page on 1 is beside one of them
    assert matrix_cost(node, {1: 1.0}, {1: 1.0}, {0, 1}) == 0.0
    assert matrix_cost(node, {0: 1.0}, {1: 1.0}, {0, 1}) == pytest.approx(r01)
