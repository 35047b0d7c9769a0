"""The wait-or-place rules: what a worse GPU set costs a job and the queue behind it."""

from __future__ import annotations

import math

import pytest

from tests.advisor.builders import gpu, numa_nodes, pcie4
from toposcope.advisor.gpu_sets import LINK_FACTOR
from toposcope.advisor.model import NodeModel
from toposcope.advisor.placement_wait import (
    best_pair_factor,
    calibrated_scale,
    extra_seconds,
    wait_pays,
)
from toposcope.topology.model import LinkType


def test_extra_seconds_is_the_run_stretched_by_the_factor_ratio() -> None:
    assert extra_seconds(3600.0, 2.0, 0.8) == pytest.approx(3600.0 * 1.5)
    assert extra_seconds(3600.0, 0.8, 0.8) == 0.0
    assert extra_seconds(3600.0, 0.7, 0.8) == 0.0
    assert extra_seconds(0.0, 2.0, 0.8) == 0.0


def test_a_lone_job_waits_only_while_the_wait_is_shorter_than_its_extra_run() -> None:
    # a SYS set (2.0) against NVLink (0.8) adds 1.5 h to a 1 h run
    assert wait_pays(3600.0, 2.0, 0.8, 5000.0)
    assert not wait_pays(3600.0, 2.0, 0.8, 6000.0)
    assert not wait_pays(3600.0, 0.8, 0.8, 1.0)


def test_an_unknown_or_negative_wait_never_pays() -> None:
    assert not wait_pays(3600.0, 2.0, 0.8, math.inf)
    assert not wait_pays(3600.0, 2.0, 0.8, -1.0)


def test_gpu_time_held_longer_while_others_queue_counts_for_them() -> None:
    # 5,400 s extra per GPU; 4 GPUs and 3 jobs behind: 64,800 s of the queue's time
    assert not wait_pays(3600.0, 2.0, 0.8, 20_000.0)
    assert wait_pays(3600.0, 2.0, 0.8, 20_000.0, gpus=4)
    assert not wait_pays(3600.0, 2.0, 0.8, 70_000.0, gpus=4, waiting=3)
    assert wait_pays(3600.0, 2.0, 0.8, 60_000.0, gpus=4, waiting=3)


def test_calibrated_scale_starts_at_one_and_moves_toward_the_measured_ratio() -> None:
    assert calibrated_scale([]) == 1.0
    assert calibrated_scale([(0.25, 1.25)] * 5) == pytest.approx(3.0)
    many = calibrated_scale([(0.25, 1.25)] * 500)
    assert 4.9 < many < 5.0  # not capped: exact run times outweigh the prior
    assert calibrated_scale([(0.0, 1.0), (0.5, -0.2)]) == pytest.approx(5.0 / 6.0)


def test_best_pair_factor_prices_a_machine_by_its_best_link() -> None:
    assert best_pair_factor(pcie4()) == pytest.approx(LINK_FACTOR[LinkType.PIX])
    placement = {g: g // 2 for g in range(4)}
    nvlink = NodeModel(
        "dgx",
        numa_nodes(),
        tuple(gpu(g, n) for g, n in placement.items()),
        {(a, b): "NV12" for a in range(4) for b in range(4) if a != b},
    )
    assert best_pair_factor(nvlink) == pytest.approx(LINK_FACTOR[LinkType.NVLINK])
    lone = NodeModel("one", numa_nodes(), (gpu(0, 0),), {})
    assert best_pair_factor(lone) == 1.0
