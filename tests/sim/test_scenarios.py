"""Scenarios: the built-ins load, and mistakes are reported with file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from toposcope.errors import ConfigError
from toposcope.sim.jobs import JobKind, draws
from toposcope.sim.scenarios import (
    SCENARIO_DIR,
    build_cluster,
    builtin_scenarios,
    load_scenario,
    parse_scenario,
)
from toposcope.sim.traces import load_trace
from toposcope.sim.truth_params import truth

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
    assert len(demo.nodes) == 10
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
    s = draws("cnn-wrong-memory.service", JobKind.CPU_TRAIN)["numa_sensitivity"]
    assert rows["cnn-wrong-memory.service"].slowdown == pytest.approx(
        1 + s * truth().remote_cost(21)
    )
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
        "s.yaml:2: nodes[0].name: node name 'a/b' is not a host name"
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


# -- malformed and oversized scenarios: always a ConfigError naming file, line and field ------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "? [a, b]: 1\n" + GOOD_NODE,
            "s.yaml:1: not valid YAML: while constructing a mapping; a key",
        ),
        (
            GOOD_NODE + "jobs:\n  - {? {x: 1}: 1, name: a, type: notebook}\n",
            "s.yaml:4: not valid YAML: while constructing a mapping; a key must be text or a "
            "number, not a mapping",
        ),
        ("[" * 3000 + "]" * 3000, "s.yaml: not valid YAML: nested too deeply"),
        (
            GOOD_NODE + "jobs:\n  - {name: a, type: notebook, submit: 2024-13-45}\n",
            "s.yaml:4: not valid YAML: cannot read '2024-13-45': month must be in 1..12",
        ),
        (
            "nodes:\n  - {name: n1, template: xeon-2s, labels: {rack: [1, 2]}}\n",
            "s.yaml:2: nodes[0].labels: label 'rack': expected text or a number, got list",
        ),
    ],
)
def test_malformed_yaml_is_an_error_not_a_crash(text: str, expected: str) -> None:
    assert error_of(text).startswith(expected)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("memory_gb", ".nan", "jobs[0].memory_gb: must be a finite number, got nan"),
        ("gpu_memory_gb", ".inf", "jobs[0].gpu_memory_gb: must be a finite number, got inf"),
        ("duration", ".inf", "jobs[0].duration: must be a finite number, got inf"),
        ("submit", "-.inf", "jobs[0].submit: must be a finite number, got -inf"),
        ("throughput", ".NaN", "jobs[0].throughput: must be a finite number, got nan"),
        ("numa_sensitivity", ".nan", "jobs[0].numa_sensitivity: must be a finite number"),
        ("memory_gb", "1.0e+300", "jobs[0].memory_gb: must be at most 65536, got 1e+300"),
        ("submit", "10000000000", "jobs[0].submit: must be at most 1e+09"),
        ("threads", "1000000000", "jobs[0].threads: must be at most 4,096, got 1000000000"),
        ("gpus", "10" + "0" * 40, "jobs[0].gpus: must be at most 1,024, got 1000"),
        ("count", "100001", "jobs[0].count: must be at most 100,000, got 100001"),
    ],
)
def test_job_numbers_must_be_finite_and_bounded(field: str, value: str, expected: str) -> None:
    text = GOOD_NODE + f"jobs:\n  - {{name: a, type: gpu-train, gpus: 1, {field}: {value}}}\n"
    if field == "gpus":
        text = GOOD_NODE + f"jobs:\n  - {{name: a, type: gpu-train, gpus: {value}}}\n"
    assert error_of(text).startswith(f"s.yaml:4: {expected}")


def test_template_and_trace_numbers_must_be_finite(tmp_path: Path) -> None:
    xml = Path(__file__).resolve().parents[1] / "fixtures/hwloc/xml/32em64t-2n8c2t-pci-normalio.xml"
    (tmp_path / "box.xml").write_bytes(xml.read_bytes())
    text = "templates:\n  box: {hwloc_xml: box.xml, gpu_memory_gb: .nan}\n" + GOOD_NODE
    assert error_of(text, tmp_path).startswith(
        "s.yaml:2: templates.box.gpu_memory_gb: must be a finite number, got nan"
    )
    (tmp_path / "t.csv").write_text("submit_time,gpus,duration\n0,1,10\n")
    text = GOOD_NODE + "trace: {file: t.csv, offset: .inf}\n"
    assert error_of(text, tmp_path).startswith("s.yaml:3: trace.offset: must be a finite")


def test_bad_hwloc_template_is_reported_as_hwloc_xml(tmp_path: Path) -> None:
    """An importer failure that is not a ConfigError (here an unknown XML encoding) names
    the field the template was given by.
    """
    (tmp_path / "box.xml").write_text('<?xml version="1.0" encoding="no-such"?>\n<topology/>\n')
    text = "templates:\n  box: {hwloc_xml: box.xml}\n" + GOOD_NODE
    message = error_of(text, tmp_path)
    assert message.startswith("s.yaml:2: templates.box.hwloc_xml: cannot import:"), message
    assert "no-such" in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "nodes:\n  - {name: n, template: xeon-2s, count: 10001}\n",
            "s.yaml:2: nodes[0].count: must be at most 10,000",
        ),
        (
            "nodes:\n  - {name: a, template: xeon-2s, count: 6000}\n"
            "  - {name: b, template: xeon-2s, count: 5000}\n",
            "s.yaml:3: nodes[1].count: a scenario holds at most 10,000 nodes",
        ),
        (
            "generate: {nodes: {xeon-2s: 1000000000000}}\n",
            "s.yaml:1: generate.nodes.xeon-2s: must be at most 10,000",
        ),
        (
            "nodes:\n  - {name: a, template: xeon-2s, count: 10}\n"
            "generate: {nodes: {xeon-2s: 5000, pcie-4gpu: 5000}}\n",
            "s.yaml:3: generate.nodes: 10,000 generated nodes and 10 declared ones: a scenario "
            "holds at most 10,000 nodes",
        ),
        (
            "generate: {nodes: {xeon-2s: 1}, workloads: 1000000000}\n",
            "s.yaml:1: generate.workloads: must be at most 100,000",
        ),
        (
            "generate: {nodes: {xeon-2s: 1}, workloads: 65}\n",
            "s.yaml:1: generate.workloads: 65 workloads on 1 node(s): at most 64 per node",
        ),
        (
            "generate: {nodes: {xeon-2s: 2000}, workloads: 100000}\n"
            "jobs:\n  - {name: a, type: cpu-train, threads: 1}\n",
            "s.yaml:3: jobs[0].name: a scenario holds at most 100,000 jobs",
        ),
        (
            GOOD_NODE + "jobs:\n  - {name: a, type: notebook, count: 65, placement: {node: n1, "
            "gpus: [0]}}\n",
            "s.yaml:4: jobs[0].placement.node: more than 64 jobs placed on n1",
        ),
        (
            GOOD_NODE + "jobs:\n  - {name: a, type: cpu-train, placement: {node: n1, cpus: "
            "'0-4000000000'}}\n",
            "s.yaml:4: jobs[0].placement.cpus: not a cpulist: range end '4000000000'",
        ),
    ],
)
def test_counts_beyond_the_limits_are_refused_before_any_work(text: str, expected: str) -> None:
    assert error_of(text).startswith(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            GOOD_NODE + "jobs:\n  - {name: big, type: gpu-train, gpus: 1000}\n",
            "s.yaml:4: jobs[0].gpus: asks for 1000 GPUs but no node has more than 8",
        ),
        (
            "nodes:\n  - {name: c1, template: xeon-2s}\njobs:\n  - {name: nb, type: notebook}\n",
            "s.yaml:4: jobs[0].type: asks for 1 GPU(s) but no node has a GPU",
        ),
        (
            GOOD_NODE + "jobs:\n  - {name: wide, type: cpu-train, threads: 200}\n",
            "s.yaml:4: jobs[0].threads: asks for 200 CPU threads but no node has more than 128",
        ),
    ],
)
def test_jobs_that_can_never_fit_are_refused(text: str, expected: str) -> None:
    assert error_of(text).startswith(expected)


def test_oversubscribed_placed_or_unscheduled_cpu_jobs_are_allowed() -> None:
    """Threads beyond the node's CPUs are a valid (slow) placement, and without a first-fit
    scheduler a ``place`` action may start the job anywhere.
    """
    placed = (
        GOOD_NODE + "jobs:\n  - {name: w, type: cpu-train, threads: 200, placement: {node: n1}}\n"
    )
    assert len(parse(placed).jobs) == 1  # type: ignore[attr-defined]
    waiting = (
        "scheduler: none\n" + GOOD_NODE + "jobs:\n  - {name: w, type: cpu-train, threads: 200}\n"
    )
    assert len(parse(waiting).jobs) == 1  # type: ignore[attr-defined]


def test_expanded_names_follow_the_name_rules() -> None:
    long = "a" * 62
    assert error_of(
        GOOD_NODE + f"jobs:\n  - {{name: {long}, type: notebook, count: 12}}\n"
    ).startswith(f"s.yaml:4: jobs[0].count: with its number, job name '{long}-1' is not")
    assert error_of(f"nodes:\n  - {{name: {long}, template: xeon-2s, count: 3}}\n").startswith(
        f"s.yaml:2: nodes[0].count: with its number, node name '{long}-01' is not"
    )
    assert error_of("nodes:\n  - {name: dgx_01, template: xeon-2s}\n").startswith(
        "s.yaml:2: nodes[0].name: node name 'dgx_01' is not a host name"
    )


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("0,1,nan", "column duration: must be a finite number, got nan"),
        ("inf,1,10", "column submit_time: must be a finite number, got inf"),
        ("0,1,10,-inf", "column memory_gb: must be a finite number, got -inf"),
        ("0,1,10,1e999", "column memory_gb: must be a finite number, got inf"),
        ("0,-2,10", "column gpus: must not be negative, got -2"),
        ("0,1,-5", "column duration: must not be negative, got -5"),
        ("0," + "9" * 400 + ",10", "column gpus: must be at most 1,024"),
        ("0,1,1e12", "column duration: must be at most 1,000,000,000, got 1000000000000.0"),
        ("0,1,10,100000000", "column memory_gb: must be at most 65,536"),
        ("0,1", "column duration: missing (it is cell 3, the row has 2)"),
        ("0,1,10,8,notebook,x/y", "column name: job name 'x/y' is not"),
    ],
)
def test_trace_rows_are_checked_like_scenario_fields(
    tmp_path: Path, row: str, expected: str
) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"submit_time,gpus,duration,memory_gb,job_type,name\n0,1,10\n{row}\n")
    with pytest.raises(ConfigError) as info:
        load_trace(path)
    assert str(info.value).startswith(f"{path}:3: {expected}")


def test_trace_rows_that_can_never_fit_or_are_too_many(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("submit_time,gpus,duration\n0,1,10\n0,1000,10\n")
    message = error_of(GOOD_NODE + "trace: t.csv\n", tmp_path)
    assert message.startswith(f"s.yaml:3: trace: {tmp_path / 't.csv'}:3: column gpus: asks for")
    with pytest.raises(ConfigError, match=r"t\.csv:4: more than 2 jobs"):
        (tmp_path / "t.csv").write_text("submit_time,gpus,duration\n0,1,1\n0,1,1\n0,1,1\n")
        load_trace(tmp_path / "t.csv", max_jobs=2)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"submit_time,gpus,duration\n0,1,\xff\xfe\n", "not UTF-8 text"),
        (b'submit_time,gpus,duration\n0,1,"' + b"9" * 200_000 + b'"\n', ":2: not valid CSV"),
    ],
)
def test_unreadable_traces_are_config_errors(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=expected):
        load_trace(path)


def test_names_that_would_collide_in_the_state_directory(tmp_path: Path) -> None:
    """Two nodes or two templates of one name would share a directory (and a topology)."""
    clash = "nodes:\n  - {name: node-0003, template: xeon-2s}\ngenerate: {nodes: {xeon-2s: 2}}\n"
    assert error_of(clash).startswith(
        "s.yaml:3: generate.nodes: generated node node-0003 is also declared in nodes"
    )
    xml = Path(__file__).resolve().parents[1] / "fixtures/hwloc/xml/32em64t-2n8c2t-pci-normalio.xml"
    (tmp_path / "box.xml").write_bytes(xml.read_bytes())
    shadow = "templates:\n  xeon-2s: {hwloc_xml: box.xml}\n" + GOOD_NODE
    assert error_of(shadow, tmp_path).startswith(
        "s.yaml:2: templates.xeon-2s: a built-in template has this name"
    )
