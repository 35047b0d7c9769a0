"""``GET /api/v1/placement``: the what-if placement over the service's latest model."""

from __future__ import annotations

from tests.advisor_serve.conftest import SPREAD, Bench, call, host_text, serving

#: GPU k on NUMA node k // 2; GPUs 0-1 and 2-3 share a PCIe switch, pairs across are SYS
LINKS = {(0, 1): "PIX", (2, 3): "PIX"}


def gpu_text(count: int = 4, held: tuple[int, ...] = ()) -> str:
    lines = ["# TYPE toposcope_gpu_info gauge"]
    for g in range(count):
        lines.append(
            f'toposcope_gpu_info{{gpu="{g}",UUID="GPU-{g}",pci_bus_id="0000:0{g}:00.0",'
            f'modelName="A100",numa_node="{g // 2}",cpu_affinity="",driver_version="1",'
            'mig_mode="",GPU_I_ID="",GPU_I_PROFILE=""} 1'
        )
    lines.append("# TYPE toposcope_gpu_up gauge")
    lines += [f'toposcope_gpu_up{{gpu="{g}"}} 1' for g in range(count)]
    lines.append("# TYPE toposcope_gpu_utilization_ratio gauge")
    lines += [f'toposcope_gpu_utilization_ratio{{gpu="{g}"}} 0' for g in range(count)]
    lines.append("# TYPE toposcope_gpu_link_info gauge")
    for a in range(count):
        for b in range(count):
            if a != b:
                link = LINKS.get((min(a, b), max(a, b)), "SYS")
                lines.append(f'toposcope_gpu_link_info{{gpu="{a}",peer_gpu="{b}",link="{link}"}} 1')
    lines.append("# TYPE toposcope_workload_gpu_info gauge")
    lines += [f'toposcope_workload_gpu_info{{workload="train",gpu="{g}"}} 1' for g in held]
    return "\n".join(lines) + "\n"


def test_placement_ranks_free_gpu_sets(bench: Bench) -> None:
    bench.promql.text = host_text({"train": SPREAD}) + gpu_text(held=(0,))
    service = bench.dry_service()
    assert service.analyse_once() is not None
    with serving(service) as url:
        status, _, body = call(f"{url}/api/v1/placement?gpus=2")
        assert status == 200, body
        best = body["placements"][0]
        # GPU 0 is held: the only PIX pair left is 2-3
        assert (best["node"], best["gpus"], best["worst_link"]) == ("n1", [2, 3], "PIX")
        assert best["link_factor"] == 1.0 and best["numa_nodes"] == [1]
        assert body["gpus"] == 2 and body["node"] is None
        assert all(0 not in p["gpus"] for p in body["placements"])
        status, _, body = call(f"{url}/api/v1/placement?gpus=2&node=n1&top=1")
        assert status == 200 and len(body["placements"]) == 1
        status, _, body = call(f"{url}/api/v1/placement?gpus=4")
        assert status == 200 and body["placements"] == []


def test_placement_errors(bench: Bench) -> None:
    bench.promql.text = host_text({"train": SPREAD}) + gpu_text()
    service = bench.dry_service()
    with serving(service) as url:
        status, _, body = call(f"{url}/api/v1/placement?gpus=1")
        assert status == 503 and "no analysis" in body["error"]
        assert service.analyse_once() is not None
        for query, needle in (
            ("", "gpus must be a whole number"),
            ("gpus=two", "gpus must be a whole number"),
            ("gpus=0", "between 1 and"),
            ("gpus=1&top=-1", "top must be between"),
        ):
            status, _, body = call(f"{url}/api/v1/placement?{query}")
            assert status == 400 and needle in body["error"], (query, body)
        status, _, body = call(f"{url}/api/v1/placement?gpus=1&node=nope")
        assert status == 404 and "known nodes: n1" in body["error"]
        status, headers, body = call(f"{url}/api/v1/placement?gpus=1", method="POST")
        assert status == 405 and "GET" in headers["Allow"] and "POST" in body["error"]
