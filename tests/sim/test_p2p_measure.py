"""A simulated node's peer bandwidth test: what it reports follows the truth in effect, and
the advisor's ``--p2p-bandwidth`` reader takes its files as they are written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toposcope.advisor.p2p_matrix import read_p2p_file
from toposcope.sim.model import pair_bandwidth
from toposcope.sim.nodetemplate import TIER_HOST_BRIDGE, TIER_PCIE_SWITCH
from toposcope.sim.p2p_measure import SPREAD, measured_pairs, p2p_text, write_p2p_files
from toposcope.sim.templates import builtin_template
from toposcope.sim.truth_params import shipped_truth, truth_in_effect
from toposcope.sim.truth_perturb import perturb_truth


def test_every_pair_reads_its_tiers_bandwidth_within_the_tests_spread() -> None:
    template = builtin_template("pcie-8gpu-2sw")
    pairs = measured_pairs("pcie8-01", template)
    assert len(pairs) == 8 * 7 // 2
    for a, b, gbps in pairs:
        truth = pair_bandwidth(template, a, b)
        assert truth * (1 - SPREAD) <= gbps <= truth * (1 + SPREAD)
    assert measured_pairs("pcie8-01", template) == pairs  # seeded: the same file every time
    assert measured_pairs("pcie8-02", template) != pairs


def test_a_perturbed_truth_is_what_the_test_measures() -> None:
    """Where the host bridge outruns the switch (some perturbed runs), the file says so."""
    template = builtin_template("pcie-8gpu-2sw")
    tiers = {(a, b): template.link_tier(a, b)[0] for a, b, _ in measured_pairs("n", template)}
    switch = next(p for p, t in tiers.items() if t == TIER_PCIE_SWITCH)
    bridge = next(p for p, t in tiers.items() if t == TIER_HOST_BRIDGE)
    base = shipped_truth()
    orders = set()
    for seed in range(10):
        with truth_in_effect(perturb_truth(base, 0.3, seed)):
            read = {(a, b): g for a, b, g in measured_pairs("n", template)}
            truth = {p: pair_bandwidth(template, *p) for p in (switch, bridge)}
        assert read[switch] == pytest.approx(truth[switch], rel=SPREAD)
        if abs(truth[switch] / truth[bridge] - 1) > 2 * SPREAD:
            assert (read[switch] > read[bridge]) == (truth[switch] > truth[bridge])
            orders.add(read[switch] > read[bridge])
    assert orders == {True, False}  # the seeds hold both orders


def test_the_advisor_reads_the_written_files(tmp_path: Path) -> None:
    templates = {"pcie4-01": builtin_template("pcie-4gpu"), "cpu-01": builtin_template("xeon-2s")}
    written = write_p2p_files(templates, tmp_path / "p2p")
    assert set(written) == {"pcie4-01"}  # no GPU pair on a CPU node
    read = read_p2p_file(written["pcie4-01"])
    expected = {(a, b): g for a, b, g in measured_pairs("pcie4-01", templates["pcie4-01"])}
    assert {pair: m.gbps for pair, m in read.pairs.items()} == pytest.approx(expected, abs=0.01)
    assert p2p_text("pcie4-01", templates["pcie4-01"]).startswith("# peer-to-peer bandwidth")
