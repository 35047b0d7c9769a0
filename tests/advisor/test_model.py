"""Building the model from loader results: node naming, capacity, GPU holders."""

from __future__ import annotations

from dataclasses import replace

from tests.advisor.builders import GIB, cluster, pcie4, workload
from toposcope.advisor.loaders.base import LoadedData, QueryResult, Window
from toposcope.advisor.model import BUSY_UNHELD
from toposcope.advisor.model_builder import build_model
from toposcope.promql.results import Sample


def data(**samples: list[tuple[dict[str, str], float]]) -> LoadedData:
    results = {
        name.replace("_", "-"): QueryResult(
            name, "toposcope_x", tuple(Sample(labels, value) for labels, value in items)
        )
        for name, items in samples.items()
    }
    return LoadedData("test", Window.parse("1h"), results)


def test_node_names_come_from_node_label_then_hostname_then_instance() -> None:
    loaded = data(
        build_info=[({"job": "t", "instance": "10.0.0.1:9400", "hostname": "gpu-a"}, 1)],
        numa_nodes=[
            ({"job": "t", "instance": "10.0.0.1:9400", "numa_node": "0", "cpus": "0-3"}, 1),
            ({"job": "t", "instance": "10.0.0.2:9400", "numa_node": "0", "cpus": "0-1"}, 1),
            ({"job": "s", "instance": "x", "node": "sim-1", "numa_node": "0", "cpus": "0"}, 1),
        ],
    )
    assert sorted(build_model(loaded).nodes) == ["10.0.0.2:9400", "gpu-a", "sim-1"]
    forced = build_model(loaded, node_label="instance")
    assert sorted(forced.nodes) == ["10.0.0.1:9400", "10.0.0.2:9400", "x"]


def test_workloads_gpus_and_links() -> None:
    labels = {"instance": "h:1", "job": "t"}
    loaded = data(
        gpu_info=[
            ({**labels, "gpu": "0", "numa_node": "1", "UUID": "GPU-a", "GPU_I_ID": ""}, 1),
            ({**labels, "gpu": "0", "numa_node": "1", "GPU_I_ID": "3"}, 1),
        ],
        gpu_locality=[({**labels, "gpu": "0", "numa_node": "0", "pci_bus_id": "0:17"}, 1)],
        gpu_links=[({**labels, "gpu": "0", "peer_gpu": "1", "link": "NV12"}, 1)],
        workload_cpu=[
            ({**labels, "workload": "w", "numa_node": "0"}, 1.5),
            ({**labels, "workload": "w", "numa_node": "bad"}, 9.0),
        ],
        workload_gpus=[({**labels, "workload": "w", "gpu": "0"}, 1)],
    )
    model = build_model(loaded)
    node = model.nodes["h:1"]
    assert node.gpus[0].numa_node == 0  # sysfs locality wins over NVML's
    assert node.gpus[0].uuid == "GPU-a"
    assert node.links == {(0, 1): "NV12"}
    [w] = model.workloads
    assert (w.cpu_by_numa, w.gpus, w.cores_used()) == ({0: 1.5}, (0,), 1.5)


def test_capacity_views() -> None:
    model = cluster(
        [pcie4()],
        [
            workload("a", cpu={0: 2.0, 1: 1.0}, memory={0: GIB}, gpus=[0]),
            workload("b", threads={1: 4}, gpus=[0, 3]),
        ],
    )
    cap = model.numa_capacity("n1")
    assert cap[0].cores_used == 2.0 and cap[0].cores_free == 6.0 and cap[0].cores_known
    assert not cap[1].cores_known  # b has threads but no CPU rate
    assert model.free_gpus("n1") == (1, 2)
    assert model.gpu_capacity("n1")[0].holders == ("a", "b")
    assert model.gpu_capacity("n1")[1].memory_free_bytes == 39 * GIB


def test_a_busy_gpu_no_workload_holds_is_not_free() -> None:
    """A scrape gap that lost a workload's series leaves its GPUs busy with no holder: they
    are not offered to a new job (an idle unheld GPU is, a down one is not).
    """
    model = cluster([pcie4()], [workload("a", gpus=[0])])
    node = model.nodes["n1"]
    gpus = list(node.gpus)
    gpus[1] = replace(gpus[1], utilization=0.6, utilization_last=0.7)  # runs, unnamed
    gpus[2] = replace(gpus[2], utilization=BUSY_UNHELD / 2)  # a monitoring probe
    gpus[3] = replace(gpus[3], utilization=None)  # no series: not known busy
    seen = replace(model, nodes={"n1": replace(node, gpus=tuple(gpus))})
    assert seen.free_gpus("n1") == (2, 3)
    assert not seen.gpu_capacity("n1")[1].free and seen.gpu_capacity("n1")[1].holders == ()
    # a job left GPU 1 during the window: busy on average, idle in the latest sample
    gpus[1] = replace(gpus[1], utilization=0.6, utilization_last=0.0)
    left = replace(model, nodes={"n1": replace(node, gpus=tuple(gpus))})
    assert left.free_gpus("n1") == (1, 2, 3)


def test_link_fallback_from_numa_nodes() -> None:
    node = pcie4()
    bare = type(node)(node.name, node.numa_nodes, node.gpus, {})
    assert str(bare.link(0, 1)) == "NODE" and str(bare.link(0, 2)) == "SYS"


def test_every_sample_fills_its_field_of_the_frozen_model() -> None:
    node = {"instance": "h:1", "job": "t", "node": "h"}
    gpu = {**node, "gpu": "0"}
    wl = {**node, "workload": "w", "numa_node": "0"}
    loaded = data(
        numa_nodes=[({**node, "numa_node": "0", "package": "0", "cpus": "0-3"}, 1)],
        cpus_online=[({**node, "numa_node": "0"}, 4)],
        numa_memory_total=[({**node, "numa_node": "0"}, 64.0)],
        numa_memory_free=[({**node, "numa_node": "0"}, 16.0)],
        numa_distance=[({**node, "numa_node": "0", "peer_node": "1"}, 21)],
        gpu_up=[(gpu, 1)],
        gpu_utilization=[(gpu, 0.5)],
        gpu_utilization_max=[(gpu, 0.75)],
        gpu_utilization_samples=[(gpu, 60)],
        gpu_memory_used=[(gpu, 2.0)],
        gpu_memory_total=[(gpu, 40.0)],
        gpu_clock_events=[({**gpu, "reason": "hw_thermal"}, 0.25)],
        workload_info=[({**node, "workload": "w", "pid": "7", "comm": "python"}, 1)],
        workload_cpu=[(wl, 1.5)],
        workload_threads=[(wl, 3)],
        workload_memory=[(wl, 8.0)],
        workload_locality=[({**node, "workload": "w", "resource": "cpu"}, 0.9)],
        workload_gpu_memory=[({**node, "workload": "w", "gpu": "0"}, 5.0)],
    )
    model = build_model(loaded)
    [numa] = model.nodes["h"].numa_nodes
    assert (numa.package, numa.cpus, numa.cpus_online) == (0, (0, 1, 2, 3), 4)
    assert (numa.memory_total_bytes, numa.memory_free_bytes, numa.distances) == (64, 16, {1: 21})
    [state] = model.nodes["h"].gpus
    assert state.numa_node is None  # no locality series: unknown, not an error
    assert (state.up, state.utilization, state.utilization_max, state.samples) == (
        True, 0.5, 0.75, 60
    )  # fmt: skip
    assert (state.memory_used_bytes, state.memory_total_bytes) == (2.0, 40.0)
    assert state.clock_events == {"hw_thermal": 0.25}
    [w] = model.workloads
    assert (w.pid, w.comm, w.pod) == ("7", "python", "")
    assert (w.cpu_by_numa, w.threads_by_numa, w.memory_by_numa) == ({0: 1.5}, {0: 3}, {0: 8.0})
    assert isinstance(w.threads_by_numa[0], int) and isinstance(numa.cpus_online, int)
    assert (w.locality, w.gpus, w.gpu_memory_bytes) == ({"cpu": 0.9}, (0,), {0: 5.0})
