"""The performance model: calibration, monotonicity, link factors, purity and the oracle."""

from __future__ import annotations

import ast
import copy
import random
from pathlib import Path

import pytest

from toposcope.advisor.comm_share import (
    BOUND_LINK_UTILISATION,
    BOUND_SM_ACTIVE,
    NVLINK_GBPS,
    PCIE_CAPACITY_GBPS,
)
from toposcope.advisor.fabric_wait import LEVEL_SLOWDOWN_PRIOR
from toposcope.advisor.gpu_sets import LINK_FACTOR
from toposcope.advisor.link_prices import COMM_SHARE, NVLINK_GBPS_PER_LINK, REFERENCE_GBPS
from toposcope.advisor.locality import CRI_RM_PENALTY
from toposcope.advisor.numa_share import CORE_STREAM_GBPS, REMOTE_COST, THREAD_SPREAD
from toposcope.advisor.policies.numa_pinning import NumaPinningSettings
from toposcope.errors import ConfigError
from toposcope.rm import Allocation
from toposcope.sim.candidates import candidate_count
from toposcope.sim.jobs import JobKind, make_job
from toposcope.sim.model import cross_node_slowdown, evaluate
from toposcope.sim.node_oracle import (
    best_allocation,
    best_over_nodes,
    greedy_allocation,
    rank_allocations,
)
from toposcope.sim.placement import thread_cpus
from toposcope.sim.templates import builtin_template
from toposcope.sim.truth_params import load_truth, truth

XEON = builtin_template("xeon-2s")
DGX = builtin_template("dgx-a100")
PCIE8 = builtin_template("pcie-8gpu-2sw")
PCIE4 = builtin_template("pcie-4gpu")
NODE0 = list(XEON.node_cpus(0))
NODE1 = list(XEON.node_cpus(1))


def cnn() -> object:
    return make_job("cnn", JobKind.CPU_TRAIN, threads=28, memory_gb=64)


def class_value(kind: str, name: str) -> float:
    """The truth's default of a class parameter."""
    return truth().classes[kind][name].value


def link_step(comm: float, tier: str) -> float:
    """The link factor a job of communication fraction ``comm`` gets on ``tier``."""
    t = truth()

    def step(bandwidth: float) -> float:
        return 1 - comm + comm * t.link_bandwidth("pcie-switch") / bandwidth

    return step(t.link_bandwidth(tier)) / step(t.link_bandwidth("nvswitch"))


def test_best_vs_worst_numa_placement_on_xeon_2s_reproduces_cri_rm() -> None:
    """The class default on the machine CRI-RM measured lands within a point of 57.76%."""
    s = class_value("cpu-train", "numa_sensitivity")
    job = make_job("cnn", JobKind.CPU_TRAIN, threads=28, memory_gb=64, numa_sensitivity=s)
    ranked = rank_allocations(job, "x", XEON)
    best, worst = ranked[0][1], ranked[-1][1]
    gain = (best.throughput / worst.throughput - 1) * 100
    assert gain == pytest.approx(100 * s * truth().remote_cost(21))
    assert gain == pytest.approx(57.76, abs=1.0)
    # the best keeps threads and memory on one node, the worst splits them across sockets
    best_alloc, worst_alloc = ranked[0][0], ranked[-1][0]
    assert {XEON.numa_of_cpu(c) for c in best_alloc.cpus} in ({0}, {1})
    worst_threads = {XEON.numa_of_cpu(c) for c in worst_alloc.cpus}
    assert len(worst_threads) == 1 and worst_alloc.mems and worst_alloc.mems[0] not in worst_threads


def test_slowdown_grows_with_the_remote_share_of_threads() -> None:
    job = make_job("cnn", JobKind.CPU_TRAIN, threads=28)
    local = evaluate(job, Allocation("x", NODE0, [0], []), XEON)
    half = evaluate(job, Allocation("x", NODE0 + NODE1, [0], []), XEON)
    remote = evaluate(job, Allocation("x", NODE1, [0], []), XEON)
    assert local.slowdown == pytest.approx(1.0)
    assert local.slowdown < half.slowdown < remote.slowdown


def test_slowdown_grows_with_numa_distance_on_dgx() -> None:
    job = make_job("cnn", JobKind.CPU_TRAIN, threads=16)
    cpus = list(DGX.node_cpus(0))[:16]
    far = DGX.distance(0, 2)
    near = evaluate(job, Allocation("d", cpus, [0], []), DGX)
    same_socket = evaluate(job, Allocation("d", cpus, [1], []), DGX)
    other_socket = evaluate(job, Allocation("d", cpus, [2], []), DGX)
    assert near.slowdown < same_socket.slowdown < other_socket.slowdown
    assert other_socket.slowdown == pytest.approx(
        1 + job.numa_sensitivity * truth().remote_cost(far)
    )


def test_moving_threads_to_the_memory_node_never_slows_a_job_down() -> None:
    rng = random.Random(3)
    job = make_job("cnn", JobKind.CPU_TRAIN, threads=8)
    for _ in range(50):
        remote_count = rng.randrange(0, 9)
        cpus = NODE0[: 8 - remote_count] + NODE1[:remote_count]
        fewer = NODE0[: 8 - max(remote_count - 1, 0)] + NODE1[: max(remote_count - 1, 0)]
        worse = evaluate(job, Allocation("x", cpus, [0], []), XEON)
        better = evaluate(job, Allocation("x", fewer, [0], []), XEON)
        assert better.slowdown <= worse.slowdown + 1e-12


@pytest.mark.parametrize(
    ("gpus", "link", "tier"),
    [
        ([0, 1], "same-switch", "pcie-switch"),
        ([0, 2], "cross-switch", "host-bridge"),
        ([0, 4], "cross-socket", "cross-socket"),
    ],
)
def test_link_factor_of_a_gpu_pair(gpus: list[int], link: str, tier: str) -> None:
    job = make_job("pair", JobKind.GPU_TRAIN, gpus=2, comm_intensity=0.6, input_intensity=0.0)
    perf = evaluate(job, Allocation("p", list(PCIE8.node_cpus(0)), [0], gpus), PCIE8)
    assert perf.link_class == link
    assert perf.factors["link"] == pytest.approx(link_step(0.6, tier))


def test_link_factors_rise_as_the_bandwidth_falls() -> None:
    job = make_job("pair", JobKind.GPU_TRAIN, gpus=2, comm_intensity=0.6, input_intensity=0.0)
    cpus = list(PCIE8.node_cpus(0))
    factors = [
        evaluate(job, Allocation("p", cpus, [0], gpus), PCIE8).factors["link"]
        for gpus in ([0, 1], [0, 2], [0, 4])
    ]
    assert 1.0 < factors[0] < factors[1] < factors[2] < cross_node_slowdown(job)


def test_nvswitch_pairs_are_all_equal_and_fastest() -> None:
    job = make_job("pair", JobKind.GPU_TRAIN, gpus=2, comm_intensity=1.0)
    for gpus in ([0, 1], [0, 7], [3, 4]):
        perf = evaluate(job, Allocation("d", [], [], gpus), DGX)
        assert perf.link_class == "nvlink" and perf.factors["link"] == 1.0
    assert cross_node_slowdown(job) == pytest.approx(link_step(1.0, "cross-node"))


def test_communication_fraction_scales_the_link_penalty() -> None:
    light = make_job("a", JobKind.GPU_TRAIN, gpus=2, comm_intensity=0.25, input_intensity=0.0)
    heavy = make_job("b", JobKind.GPU_TRAIN, gpus=2, comm_intensity=1.0, input_intensity=0.0)
    alloc = Allocation("p", list(PCIE8.node_cpus(0)), [0], [0, 4])
    assert evaluate(light, alloc, PCIE8).factors["link"] == pytest.approx(
        link_step(0.25, "cross-socket")
    )
    assert evaluate(heavy, alloc, PCIE8).factors["link"] == pytest.approx(
        link_step(1.0, "cross-socket")
    )


def test_gpu_sharing_interference() -> None:
    job = make_job("a", JobKind.GPU_TRAIN, gpus=1)
    other = make_job("b", JobKind.GPU_TRAIN, gpus=1)
    notebook = make_job("n", JobKind.NOTEBOOK, gpus=1)
    alloc = Allocation("p", list(PCIE4.node_cpus(0)), [0], [0])
    alone = evaluate(job, alloc, PCIE4)
    with_training = evaluate(job, alloc, PCIE4, [(other, Allocation("p", [], [], [0]))])
    with_notebook = evaluate(job, alloc, PCIE4, [(notebook, Allocation("p", [], [], [0]))])
    elsewhere = evaluate(job, alloc, PCIE4, [(other, Allocation("q", [], [], [0]))])
    assert alone.factors["interference"] == 1.0
    overhead = job.sharing_overhead
    assert overhead is not None
    assert with_training.factors["interference"] == pytest.approx(
        1 + (1 + overhead) * other.gpu_demand
    )
    assert 1.0 < with_notebook.factors["interference"] < 1.05
    assert elsewhere == alone


def test_input_pipeline_far_from_the_gpus_is_slower() -> None:
    job = make_job("a", JobKind.GPU_TRAIN, gpus=1, input_intensity=1.0)
    near = evaluate(job, Allocation("p", list(PCIE4.node_cpus(0)), [0], [0]), PCIE4)
    far = evaluate(job, Allocation("p", list(PCIE4.node_cpus(1)), [1], [0]), PCIE4)
    assert near.factors["input"] == 1.0
    t = truth()
    cost = t.remote_cost(PCIE4.distance(0, 1))
    expected = 1 + cost * (t.weight("input_threads") + t.weight("input_memory"))
    assert far.factors["input"] == pytest.approx(expected)


def test_cpu_oversubscription() -> None:
    a = make_job("a", JobKind.CPU_TRAIN, threads=28)
    b = make_job("b", JobKind.CPU_TRAIN, threads=28)
    alloc = Allocation("x", NODE0, [0], [])
    alone = evaluate(a, alloc, XEON)
    shared = evaluate(a, alloc, XEON, [(b, Allocation("x", NODE0, [0], []))])
    assert alone.factors["contention"] == 1.0
    assert shared.factors["contention"] == pytest.approx(2.0)


def test_gpu_job_without_its_gpus_is_stalled() -> None:
    job = make_job("a", JobKind.GPU_TRAIN, gpus=2)
    perf = evaluate(job, Allocation("p", [], [], [0]), PCIE8)
    assert perf.stalled and perf.throughput == 0.0


def test_evaluate_is_a_pure_function() -> None:
    job = make_job("a", JobKind.GPU_TRAIN, gpus=2)
    other = make_job("b", JobKind.GPU_TRAIN, gpus=2)
    alloc = Allocation("p", list(PCIE8.node_cpus(1)), [0], [0, 5])
    co = [(other, Allocation("p", [], [], [0, 1]))]
    snapshot = copy.deepcopy((job, alloc, co))
    first = evaluate(job, alloc, PCIE8, co)
    for _ in range(3):
        evaluate(other, Allocation("p", [], [], [2, 3]), PCIE8)
        assert evaluate(job, alloc, PCIE8, co) == first
    assert (job, alloc, co) == snapshot


def test_thread_placement_spreads_unpinned_jobs_over_nodes() -> None:
    cpus = thread_cpus(XEON.cpus, 2, XEON)
    assert {XEON.numa_of_cpu(c) for c in cpus} == {0, 1}
    cpus = thread_cpus(DGX.cpus, 8, DGX)
    assert sorted(DGX.numa_of_cpu(c) for c in cpus) == [0, 0, 1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize(
    ("template", "gpus"), [(PCIE8, 2), (PCIE8, 4), (DGX, 2), (PCIE4, 2), (DGX, 4)]
)
def test_greedy_reaches_the_exhaustive_optimum_on_an_empty_node(
    template: object, gpus: int
) -> None:
    job = make_job("j", JobKind.GPU_TRAIN, gpus=gpus, comm_intensity=0.8)
    exhaustive = best_allocation(job, "n", template)[1]  # type: ignore[arg-type]
    greedy_alloc = greedy_allocation(job, "n", template)  # type: ignore[arg-type]
    greedy = evaluate(job, greedy_alloc, template)  # type: ignore[arg-type]
    assert greedy.slowdown == pytest.approx(exhaustive.slowdown)


def test_oracle_falls_back_to_greedy_above_the_limit() -> None:
    job = make_job("j", JobKind.GPU_TRAIN, gpus=4)
    assert candidate_count(job, DGX, range(8)) > 100
    alloc, perf = best_allocation(job, "n", DGX, exhaustive_limit=100)
    assert alloc == greedy_allocation(job, "n", DGX)
    assert perf.slowdown == pytest.approx(1.0)


def test_best_over_nodes_prefers_a_free_pair_on_one_switch() -> None:
    job = make_job("j", JobKind.GPU_TRAIN, gpus=2, comm_intensity=1.0)
    found = best_over_nodes(
        job,
        [
            ("frag", PCIE8, [], [0, 2, 4, 6]),
            ("tidy", PCIE8, [], [6, 7]),
            ("full", PCIE8, [], [1]),
        ],
    )
    assert found is not None
    alloc, perf = found
    assert alloc.node == "tidy" and alloc.gpus == [6, 7]
    assert perf.slowdown == pytest.approx(link_step(1.0, "pcie-switch"))


# -- the truth: its own file, its own figures ----------------------------------------------------

SIM = Path(__file__).resolve().parents[2] / "sim"


def test_every_truth_parameter_says_where_it_comes_from() -> None:
    t = truth()
    params = [
        *t.links.values(),
        *(p for _, p in t.numa_bandwidth),
        *t.model.values(),
        *(p for c in t.classes.values() for p in c.values()),
    ]
    assert all(p.kind in ("measured", "assumed") and p.source for p in params)
    assert all(p.low <= p.value <= p.high for p in params)
    assert {"measured", "assumed"} <= {p.kind for p in params}


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("    value: 230.0", "    value: fast", "links.nvswitch.value: expected a number"),
        ("    range: [200.0, 240.0]", "    range: [231.0, 240.0]", "links.nvswitch.range"),
        ("    kind: assumed\n", "    kind: guessed\n", ".kind: 'guessed' is not one of"),
        ("  nvswitch:", "  nvswitchy:", "links.nvswitchy: unknown key"),
    ],
)
def test_a_bad_truth_file_names_file_line_and_field(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    text = (SIM / "truth.yaml").read_text()
    assert old in text
    bad = tmp_path / "truth.yaml"
    bad.write_text(text.replace(old, new, 1))
    with pytest.raises(ConfigError) as caught:
        load_truth(bad)
    assert str(caught.value).startswith(f"{bad}:")
    assert message in str(caught.value)
    line = int(str(caught.value).removeprefix(f"{bad}:").split(":")[0])
    assert line > 1


def test_each_job_draws_its_own_values_from_its_class_range() -> None:
    jobs = [make_job(f"j{i}", JobKind.GPU_TRAIN, gpus=2) for i in range(20)]
    params = truth().classes["gpu-train"]
    for name, attr in (("comm_fraction", "comm_intensity"), ("input_weight", "input_intensity")):
        values = [getattr(j, attr) for j in jobs]
        assert len(set(values)) == len(values)
        assert all(params[name].low <= v <= params[name].high for v in values)
    again = make_job("j3", JobKind.GPU_TRAIN, gpus=2)
    assert again == jobs[3]
    assert make_job("j3", JobKind.GPU_TRAIN, gpus=2, comm_intensity=0.5).comm_intensity == 0.5


def _sim_modules_of_the_model() -> list[Path]:
    """sim/model.py, the GPU traffic and activity model and how the fake NVML answers it, and
    the simulator modules they import, transitively."""
    seen: dict[str, Path] = {}
    todo = ["model", "gpu_activity", "gpu_traffic", "nvml_activity", "gang_price"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = SIM / f"{name}.py"
        seen[name] = path
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "toposcope.sim."
            ):
                todo.append((node.module or "").split(".")[2])
    return list(seen.values())


def test_the_simulator_imports_nothing_from_the_advisor_and_shares_no_constant() -> None:
    advisor = Path(__file__).resolve().parents[2] / "advisor"
    beliefs = {
        CRI_RM_PENALTY,
        *(v for v in LINK_FACTOR.values() if v != 1.0),
        *(v for v in (NumaPinningSettings().numa_penalty, NumaPinningSettings().gpu_job_share)),
        *PCIE_CAPACITY_GBPS.values(),
        NVLINK_GBPS,
        BOUND_LINK_UTILISATION,
        BOUND_SM_ACTIVE,
        COMM_SHARE,
        REFERENCE_GBPS,
        *NVLINK_GBPS_PER_LINK.values(),
        LEVEL_SLOWDOWN_PRIOR,
        CORE_STREAM_GBPS,
        REMOTE_COST,
        THREAD_SPREAD,
    }
    assert {0.5776, 1.4, 2.0, 0.125} <= beliefs
    modules = _sim_modules_of_the_model()
    assert {SIM / "truth_params.py", SIM / "gpu_traffic.py", SIM / "gang_price.py"} <= set(modules)
    for path in modules:
        text = path.read_text()
        assert "advisor" not in text.replace("the advisor", "").replace("advisor's", ""), path
        literals = {  # the figures written in the code (integers are indexes and counts)
            n.value
            for n in ast.walk(ast.parse(text))
            if isinstance(n, ast.Constant) and isinstance(n.value, float)
        }
        assert not literals & beliefs, (path, literals & beliefs)
    t = truth()
    figures = {
        *(p.value for p in t.links.values()),
        *(p.value for _, p in t.numa_bandwidth),
        *(p.value for p in t.model.values()),
        *(p.value for c in t.classes.values() for p in c.values()),
        *(p.value for p in t.gpu.values()),
        *(p.value for p in t.fabric.values()),
    }
    assert len(t.fabric) == 7
    assert not figures & beliefs
    assert not any(advisor in p.parents for p in modules)
