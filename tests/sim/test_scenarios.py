"""Scenarios: the built-ins load, and mistakes are reported with file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from toposcope.errors import ConfigError
from toposcope.sim.jobs import JobKind, load_trace
from toposcope.sim.scenarios import (
    SCENARIO_DIR,
    build_cluster,
    builtin_scenarios,
    load_scenario,
    parse_scenario,
)

GOOD_NODE = "nodes:\n  - {name: n1, template: pcie-8gpu-2sw}\n"


def parse(text: str, base: Path | None = None) -> object:
    return parse_scenario(text, "s.yaml", base or Path("."))


def error_of(text: str, base: Path | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, base)
    return str(info.value)


def test_builtin_scenarios_load() -> None:
    assert set(builtin_scenarios()) >= {
        "demo",
        "dgx-misplaced",
        "pcie-fragmented",
        "cpu-numa",
        "large",
    }
    demo = load_scenario("builtin:demo")
    assert len(demo.nodes) == 8
    assert 24 <= len(demo.jobs) <= 60
    assert {n.template.name for n in demo.nodes} == {
        "dgx-a100",
        "pcie-8gpu-2sw",
        "pcie-4gpu",
        "xeon-2s",
    }
    cluster = build_cluster(demo)
    assert cluster.counts()["running"] >= 20


def test_demo_has_the_deliberate_misplacements() -> None:
    cluster = build_cluster(load_scenario("builtin:demo"))
    rows = {r.name: r for r in cluster.truth()}
    assert rows["cnn-wrong-memory.service"].slowdown == pytest.approx(1.5776)
    assert rows["resnet-cross-socket.service"].link_class == "cross-socket"
    assert rows["bert-cross-switch.service"].link_class == "cross-switch"
    notebooks = [r for r in rows.values() if r.kind == "notebook" and r.state == "running"]
    assert len(notebooks) >= 4
    views = {v.name: v for v in cluster.workloads()}
    frag = [v for v in views.values() if v.allocation and v.allocation.node == "pcie8-02"]
    assert sorted(g for v in frag for g in v.allocation.gpus) == [0, 2, 4, 6]  # type: ignore[union-attr]


def test_large_is_deterministic_and_has_the_right_size() -> None:
    first = load_scenario("builtin:large")
    assert len(first.nodes) == 1000 and len(first.jobs) == 4000
    again = load_scenario("builtin:large")
    assert [j.placement for j in first.jobs[:200]] == [j.placement for j in again.jobs[:200]]
    other = load_scenario("builtin:large", seed=99)
    assert [j.placement for j in first.jobs[:200]] != [j.placement for j in other.jobs[:200]]


def test_unknown_field_names_line_and_field() -> None:
    text = GOOD_NODE + "jobs:\n  - name: a\n    type: gpu-train\n    gpuz: 2\n"
    assert error_of(text) == (
        "s.yaml:6: jobs[0].gpuz: unknown field (known: name, type, gpus, threads, memory_gb, "
        "gpu_memory_gb, numa_sensitivity, comm_intensity, input_intensity, throughput, submit, "
        "duration, count, placement)"
    )


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        (
            "  - {name: a, type: gpu-train, gpus: two}\n",
            "s.yaml:4: jobs[0].gpus: expected an integer",
        ),
        ("  - {name: a, type: trainer}\n", "s.yaml:4: jobs[0].type: unknown job type 'trainer'"),
        ("  - {type: notebook}\n", "s.yaml:4: jobs[0].name: is required"),
        (
            "  - {name: a, type: gpu-train, comm_intensity: 2}\n",
            "s.yaml:4: jobs[0].comm_intensity: must be at most 1",
        ),
        (
            "  - name: a\n    type: gpu-train\n    gpus: 2\n"
            "    placement: {node: n9, gpus: [0, 1]}\n",
            "s.yaml:7: jobs[0].placement.node: unknown node 'n9'",
        ),
        (
            "  - name: a\n    type: gpu-train\n    gpus: 2\n    placement:\n      node: n1\n"
            "      gpus: [0]\n",
            "s.yaml:9: jobs[0].placement.gpus: the job asks for 2 GPU(s), 1 given",
        ),
        (
            "  - name: a\n    type: cpu-train\n    placement:\n      node: n1\n      cpus: 0-200\n",
            "s.yaml:8: jobs[0].placement.cpus: CPUs 128-200 are not on n1",
        ),
        (
            "  - name: a\n    type: cpu-train\n    placement: {node: n1, mems: [5]}\n",
            "s.yaml:6: jobs[0].placement.mems: NUMA nodes [5] are not on n1",
        ),
        ("  - {name: a, type: cpu-train, gpus: 1}\n", "s.yaml:4: jobs[0].gpus: a cpu-train job"),
        (
            "  - {name: a, type: notebook}\n  - {name: a, type: notebook}\n",
            "s.yaml:5: jobs[1].name: job a.service is declared twice",
        ),
    ],
)
def test_job_errors(jobs: str, expected: str) -> None:
    assert error_of(GOOD_NODE + "jobs:\n" + jobs).startswith(expected)


def test_node_errors() -> None:
    assert error_of("nodes:\n  - {name: n1, template: dgx-b200}\n").startswith(
        "s.yaml:2: nodes[0].template: unknown template 'dgx-b200'"
    )
    assert error_of(
        "nodes:\n  - {name: n1, template: xeon-2s}\n  - {name: n1, template: xeon-2s}\n"
    ).startswith("s.yaml:3: nodes[1].name: node n1 is declared twice")
    assert error_of("nodes:\n  - {name: 'a/b', template: xeon-2s}\n").startswith(
        "s.yaml:2: nodes[0].name: 'a/b'"
    )
    assert error_of("seed: 1\n").startswith("s.yaml:1: nodes: a scenario needs at least one node")
    assert error_of("name: x\nscheduler: fifo\n" + GOOD_NODE).startswith(
        "s.yaml:2: scheduler: must be first-fit or none"
    )


def test_bad_yaml_names_the_line() -> None:
    assert error_of("nodes:\n  - {name: n1, template: [\n").startswith("s.yaml:3: not valid YAML")


def test_imported_template_and_its_errors(tmp_path: Path) -> None:
    xml = Path(__file__).resolve().parents[1] / "fixtures/hwloc/xml/32em64t-2n8c2t-pci-normalio.xml"
    (tmp_path / "box.xml").write_bytes(xml.read_bytes())
    text = (
        "templates:\n  box: {hwloc_xml: box.xml, gpu_model: NVIDIA A40, gpu_memory_gb: 48}\n"
        "nodes:\n  - {name: lab, template: box}\n"
        "jobs:\n  - {name: t, type: gpu-train, gpus: 2, placement: {node: lab, gpus: [1, 2]}}\n"
    )
    scenario = parse_scenario(text, "s.yaml", tmp_path)
    template = scenario.nodes[0].template
    assert template.gpu_model == "NVIDIA A40" and len(template.gpus) == 3
    build_cluster(scenario)
    missing = "templates:\n  box: {hwloc_xml: nope.xml}\n" + GOOD_NODE
    assert error_of(missing, tmp_path).startswith("s.yaml:2: templates.box.hwloc_xml:")


def test_trace_jobs(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(
        "job_id,submit_time,gpu_num,duration,job_type\nx1,10,2,100,\nx2,20,0,50,\nx3,30,1,,notebook\n"
    )
    scenario = parse(GOOD_NODE + "trace: {file: t.csv, offset: 5}\n", tmp_path)
    specs = [j.spec for j in scenario.jobs]  # type: ignore[attr-defined]
    assert [(s.name, s.kind, s.gpus, s.submit_time, s.duration) for s in specs] == [
        ("x1.service", JobKind.GPU_TRAIN, 2, 15.0, 100.0),
        ("x2.service", JobKind.CPU_TRAIN, 0, 25.0, 50.0),
        ("x3.service", JobKind.NOTEBOOK, 1, 35.0, None),
    ]


def test_trace_errors_name_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("submit_time,gpus,duration\n0,1,10\n5,lots,10\n")
    with pytest.raises(ConfigError, match=r"t\.csv:3: column gpus: expected an integer"):
        load_trace(path)
    path.write_text("when,gpus\n0,1\n")
    with pytest.raises(ConfigError, match=r"t\.csv:1: missing column\(s\) submit_time, duration"):
        load_trace(path)


def test_shipped_trace_loads() -> None:
    jobs = load_trace(SCENARIO_DIR.parent / "traces" / "sample.csv")
    assert len(jobs) >= 10
    assert {j.kind for j in jobs} == set(JobKind)


def test_builtin_and_missing_scenarios() -> None:
    with pytest.raises(ConfigError, match="no built-in scenario 'nope'"):
        load_scenario("builtin:nope")
    with pytest.raises(ConfigError, match="does not exist"):
        load_scenario("no/such/file.yaml")
