"""GPU traffic and activity counters from the simulator's truth: PCIe and NVLink bytes by
link tier, SM activity from the compute share, exact integrals, and counters that never go
back when jobs start, stop or move."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.sim.test_metrics import Samples, by, parse
from toposcope.errors import ConfigError
from toposcope.rm import ActionKind, ActionRequest, Allocation
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster, checkpoint_restore_seconds
from toposcope.sim.gpu_traffic import gpu_flows
from toposcope.sim.jobs import JobKind, JobSpec, make_job
from toposcope.sim.model import evaluate, exchange_rate
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.nodetemplate import TIER_HOST_BRIDGE, TIER_NVSWITCH, NodeTemplate
from toposcope.sim.nvml_descriptions import has_gpm
from toposcope.sim.templates import builtin_template
from toposcope.sim.truth_params import GPU_SHARES, load_truth, truth
from toposcope.sim.truth_perturb import perturb_truth

#: A DGX A100 (field values), and H100 versions of it (NVSwitch pairs) and of the 8-GPU PCIe
#: server (pairs across switches), both with GPM.
DGX = builtin_template("dgx-a100")
DGX_H100 = replace(DGX, name="dgx-h100", gpu_model="NVIDIA H100 80GB HBM3")
PCIE_H100 = replace(
    builtin_template("pcie-8gpu-2sw"), name="pcie-h100", gpu_model="NVIDIA H100 PCIe"
)
NVLINK_PAIR = (0, 1)
#: two GPUs behind different PCIe switches of one socket
SPREAD_PAIR = (0, 2)
IDLE_GPU = 5
INTERVAL = 10.0
SCRAPES = 3
SOURCES = "toposcope_gpu_activity_source_info"
PCIE = "toposcope_gpu_pcie_bytes_total"
NVLINK = "toposcope_gpu_nvlink_bytes_total"
SM = "toposcope_gpu_sm_active_ratio"


def comm_job(name: str) -> JobSpec:
    """A communication-heavy 2-GPU training job whose only slowdown is its link."""
    return make_job(name, JobKind.GPU_TRAIN, gpus=2, comm_intensity=0.85, input_intensity=0.0,
                    numa_sensitivity=0.0)  # fmt: skip


def total(samples: Samples, family: str, gpu: int, **match: str) -> float:
    """A GPU's counter summed over its links and directions (only those matching)."""
    return sum(
        value
        for labels, value in samples.get(family, [])
        if labels["gpu"] == str(gpu) and all(labels.get(k) == v for k, v in match.items())
    )


@pytest.fixture(scope="module")
def scraped(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SimCluster, dict[str, list[Samples]]]]:
    """One job on an NVSwitch pair of an H100 node, the same job across PCIe switches of an
    H100 PCIe server, and on an NVSwitch pair of a DGX A100; each node scraped SCRAPES times,
    INTERVAL seconds apart."""
    assert DGX_H100.link_tier(*NVLINK_PAIR)[0] == TIER_NVSWITCH
    assert PCIE_H100.link_tier(*SPREAD_PAIR)[0] == TIER_HOST_BRIDGE
    clock = SimClock()
    cluster = SimCluster(clock, scheduler="none")
    placed = {
        "nvl": (DGX_H100, NVLINK_PAIR),
        "pci": (PCIE_H100, SPREAD_PAIR),
        "a100": (DGX, NVLINK_PAIR),
    }
    for node, (template, gpus) in placed.items():
        cluster.add_node(node, template)
        cluster.submit(comm_job(f"job-{node}"), Allocation(node, [], [], list(gpus)))
    exporters = SimExporters(cluster, tmp_path_factory.mktemp("gpu-traffic"), background=False)
    try:
        scrapes: dict[str, list[Samples]] = {node: [] for node in placed}
        for _ in range(SCRAPES):
            for node in placed:
                scrapes[node].append(parse(exporters.scrape(node)))
            clock.advance(INTERVAL)
        yield cluster, scrapes
    finally:
        exporters.close()


def rate(scrapes: list[Samples], family: str, gpu: int, **match: str) -> float:
    """A counter's per-second rate between the last two scrapes."""
    before, after = (total(s, family, gpu, **match) for s in scrapes[-2:])
    return (after - before) / INTERVAL


def test_gpm_models_read_gpm_and_a100_reads_field_values(
    scraped: tuple[SimCluster, dict[str, list[Samples]]],
) -> None:
    _, scrapes = scraped
    assert has_gpm(DGX_H100.gpu_model) and not has_gpm(DGX.gpu_model)
    h100 = by(scrapes["nvl"][-1], SOURCES, "quantity", gpu="0")
    assert h100 == dict.fromkeys(h100, 1.0)
    assert {labels["source"] for labels, _ in scrapes["nvl"][-1][SOURCES]} == {"gpm"}
    a100 = {
        labels["quantity"]: labels["source"]
        for labels, _ in scrapes["a100"][-1][SOURCES]
        if labels["gpu"] == "0"
    }
    assert a100["pcie_bytes"] == a100["nvlink_bytes"] == "field_values"
    assert a100["sm_active"] == "none"  # no GPM before Hopper: no SM activity in NVML
    # each workload gets its GPUs' figures (from the scrape before: the GPU collector's reading)
    for node, family in (("nvl", "toposcope_workload_gpu_sm_active_ratio"),
                         ("a100", "toposcope_workload_gpu_nvlink_bytes_total")):  # fmt: skip
        rows = scrapes[node][-1][family]
        assert {labels["workload"] for labels, _ in rows} == {f"job-{node}.service"}, rows
        assert all(labels["shared"] == "false" and value > 0 for labels, value in rows), rows


def test_a_job_across_pcie_switches_moves_pcie_bytes_and_keeps_fewer_sms_active(
    scraped: tuple[SimCluster, dict[str, list[Samples]]],
) -> None:
    cluster, scrapes = scraped
    steps = {row.node: row.throughput for row in cluster.truth()}
    per_step = {
        node: {family: rate(scrapes[node], family, gpu) / steps[node] for family in (PCIE, NVLINK)}
        for node, gpu in (("nvl", NVLINK_PAIR[0]), ("pci", SPREAD_PAIR[0]))
    }
    assert per_step["pci"][PCIE] > 2 * per_step["nvl"][PCIE]
    assert per_step["nvl"][NVLINK] > 0 and per_step["pci"][NVLINK] == 0
    # the gradients of a step are the same bytes on either link
    exchanged = {node: per_step[node][NVLINK] / 2 for node in per_step}
    exchanged["pci"] = (per_step["pci"][PCIE] - per_step["nvl"][PCIE]) / 2
    assert exchanged["pci"] == pytest.approx(exchanged["nvl"], rel=1e-6)
    sm = {
        node: by(scrapes[node][-1], SM, "gpu")[str(gpu)] for node, gpu in (("nvl", 0), ("pci", 0))
    }
    assert 0 < sm["pci"] < sm["nvl"] / 2
    assert rate(scrapes["pci"], PCIE, SPREAD_PAIR[0], direction="tx") > 1e9


def test_counters_are_the_integral_of_the_truths_flows(
    scraped: tuple[SimCluster, dict[str, list[Samples]]],
) -> None:
    cluster, scrapes = scraped
    for node in ("nvl", "pci", "a100"):
        snap = cluster.node_snapshot(node)
        flows = gpu_flows(
            snap.template, ((w.spec, w.allocation.gpus, w.perf) for w in snap.workloads)
        )
        for gpu, flow in flows.items():
            for direction, expected in (("tx", flow.pcie_tx), ("rx", flow.pcie_rx)):
                assert rate(scrapes[node], PCIE, gpu, direction=direction) == pytest.approx(
                    expected, rel=1e-6
                )
            assert rate(scrapes[node], NVLINK, gpu, direction="tx") == pytest.approx(
                sum(flow.nvlink_tx.values()), rel=1e-6, abs=2048.0
            )
    # across switches: the model's exchange plus the input pipeline's share, over PCIe
    job = next(w for w in cluster.node_snapshot("pci").workloads)
    host = job.perf.gpu_compute * truth().gpu_figure("gpu_to_host")
    assert rate(scrapes["pci"], PCIE, SPREAD_PAIR[0], direction="tx") == pytest.approx(
        (exchange_rate(job.spec, job.perf.slowdown) + host) * 1e9, rel=1e-6
    )


def test_an_idle_gpu_moves_nothing_and_has_no_sm_active(
    scraped: tuple[SimCluster, dict[str, list[Samples]]],
) -> None:
    _, scrapes = scraped
    for node in ("nvl", "pci", "a100"):
        last = scrapes[node][-1]
        assert total(last, PCIE, IDLE_GPU) == 0
        assert total(last, NVLINK, IDLE_GPU) == 0
    for node in ("nvl", "pci"):
        assert by(scrapes[node][-1], SM, "gpu")[str(IDLE_GPU)] == 0


#: a series: family and labels
Series = tuple[str, tuple[tuple[str, str], ...]]


def _counters(samples: Samples) -> dict[Series, float]:
    """Every byte counter series of a scrape, keyed by family and labels."""
    return {
        (family, tuple(sorted(labels.items()))): value
        for family in (PCIE, NVLINK)
        for labels, value in samples.get(family, [])
    }


@pytest.mark.parametrize("template", [DGX, DGX_H100], ids=["field-values", "gpm"])
def test_counters_never_go_back_while_jobs_start_stop_and_move(
    tmp_path: Path, template: NodeTemplate
) -> None:
    clock = SimClock()
    cluster = SimCluster(clock, scheduler="none")
    cluster.add_node("n1", template)
    cluster.add_node("n2", template)
    mover = comm_job("mover")
    # each stay outlasts the move's checkpoint-restore pause
    step_seconds = checkpoint_restore_seconds(mover) / 2 + 1
    cluster.submit(mover, Allocation("n1", [], [], [0, 1]))
    short = replace(comm_job("short"), duration=2.5 * step_seconds)
    cluster.submit(short, Allocation("n1", [], [], [2, 3]))
    exporters = SimExporters(cluster, tmp_path, background=False)
    moves = {3: ("n2", [4, 6]), 6: ("n1", [4, 6])}
    try:
        seen: dict[str, dict[Series, float]] = {}
        grew: dict[str, set[str]] = {}
        for step in range(9):
            if step in moves:
                node, gpus = moves[step]
                cluster.apply(
                    ActionRequest(
                        request_id=f"move-{step}",
                        kind=ActionKind.MIGRATE,
                        workload="mover.service",
                        node=node,
                        gpus=gpus,
                    )
                )
            for node in ("n1", "n2"):
                now = _counters(parse(exporters.scrape(node)))
                for key, value in now.items():
                    before = seen.get(node, {}).get(key, 0.0)
                    assert value >= before, (step, node, key, before, value)
                    if value > before:
                        grew.setdefault(node, set()).add(dict(key[1])["gpu"])
                seen[node] = now
            clock.advance(step_seconds)
        # the mover ran on GPUs 0, 1 then 4, 6 of n1 and 4, 6 of n2; the short job ended
        assert grew == {"n1": {"0", "1", "2", "3", "4", "6"}, "n2": {"4", "6"}}
        running = {w.name for w in cluster.workloads() if w.state == "running"}
        assert running == {"mover.service"}
    finally:
        exporters.close()


def test_bytes_per_step_are_the_same_on_every_link_and_sm_falls_with_the_link() -> None:
    job = comm_job("j")
    nvl = evaluate(job, Allocation("n", [], [], list(NVLINK_PAIR)), DGX_H100)
    pci = evaluate(job, Allocation("n", [], [], list(SPREAD_PAIR)), PCIE_H100)
    for perf in (nvl, pci):
        assert exchange_rate(job, perf.slowdown) * perf.slowdown == pytest.approx(
            exchange_rate(job, nvl.slowdown) * nvl.slowdown
        )
    fast = gpu_flows(DGX_H100, [(job, NVLINK_PAIR, nvl)])
    slow = gpu_flows(PCIE_H100, [(job, SPREAD_PAIR, pci)])
    assert slow[0].sm_active < fast[0].sm_active
    assert slow[0].tensor_active < fast[0].tensor_active
    assert set(fast) == set(NVLINK_PAIR) and set(slow) == set(SPREAD_PAIR)  # idle GPUs: none
    assert fast[0].nvlink_tx == {1: pytest.approx(exchange_rate(job, nvl.slowdown) * 1e9)}
    alone = evaluate(job, Allocation("n", [], [], [0]), DGX_H100)
    assert exchange_rate(job, alone.slowdown) == 0  # a GPU short: stalled, no exchange


def test_gpu_figures_are_perturbed_within_their_meaning(tmp_path: Path) -> None:
    base = truth()
    moved = perturb_truth(base, 0.9, seed=3)
    assert {name for name in base.gpu if moved.gpu[name].value != base.gpu[name].value} == set(
        base.gpu
    )
    assert all(moved.gpu[name].value <= 1 for name in GPU_SHARES)
    text = (Path(__file__).resolve().parents[2] / "sim" / "truth.yaml").read_text()
    old = "    value: 0.85\n    range: [0.7, 0.95]"
    assert old in text
    bad = tmp_path / "truth.yaml"
    bad.write_text(text.replace(old, "    value: 0.85\n    range: [0.7, 1.5]", 1))
    with pytest.raises(ConfigError, match=r"gpu\.sm_active: a share must be <= 1"):
        load_truth(bad)
