"""Property-based fuzzing of scenario files and traces: a scenario or a ConfigError, nothing else.

Documents are built from the scenario grammar with hostile values mixed in (NaN, infinities,
huge and negative numbers, unhashable keys, names with ``/`` and ``..``, nested lists where
numbers belong), plus a trace CSV of hostile cells; arbitrary YAML-ish text covers the
parser. Whatever loads must also build into a cluster without an unexpected exception.
"""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toposcope.errors import ConfigError
from toposcope.sim.scenarios import build_cluster, parse_scenario

SCALARS = st.sampled_from(
    [None, True, 0, 1, 2, 8, 64, 65, -1, 10**6, 10**30, 0.5, 1.5, math.nan, math.inf,
     -math.inf, 1e300, "", "x", "../x", "a/b", "n1", "0-3", "0-4000000000", "notebook",
     "xeon-2s", "pcie-4gpu", "none", "t.csv"]
)  # fmt: skip
KEYS = st.sampled_from(["name", "type", "gpus", "nodes", "node", "cpus", "count", "x", "file"])
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)
JOB_NUMBERS = (
    "gpus", "threads", "memory_gb", "gpu_memory_gb", "numa_sensitivity", "comm_intensity",
    "input_intensity", "throughput", "submit", "duration", "count",
)  # fmt: skip
PLACEMENT = st.fixed_dictionaries(
    {"node": st.sampled_from(["n1", "n2", "zz"])},
    optional={"gpus": VALUES, "cpus": VALUES, "mems": VALUES},
)
JOB = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["a", "b", "../x", "a_b"]),
        "type": st.sampled_from(["notebook", "gpu-train", "cpu-train", "inference", "zz"]),
    },
    optional={**{k: SCALARS for k in JOB_NUMBERS}, "placement": PLACEMENT},
)
NODE = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["n1", "n2", "a_b", "x.y"]),
        "template": st.sampled_from(["xeon-2s", "pcie-8gpu-2sw", "nope"]),
    },
    optional={"count": SCALARS, "labels": VALUES},
)
TRACE = st.just("t.csv") | st.fixed_dictionaries(
    {"file": st.just("t.csv")}, optional={"limit": SCALARS, "offset": SCALARS}
)
GENERATE = st.fixed_dictionaries(
    {"nodes": st.dictionaries(st.sampled_from(["xeon-2s", "pcie-4gpu", "nope"]), SCALARS)},
    optional={"workloads": SCALARS, "seed": SCALARS},
)
DOCUMENT = st.fixed_dictionaries(
    {},
    optional={
        "name": VALUES,
        "seed": SCALARS,
        "scheduler": SCALARS,
        "nodes": st.lists(NODE, max_size=3) | VALUES,
        "jobs": st.lists(JOB | VALUES, max_size=4),
        "trace": TRACE | VALUES,
        "generate": GENERATE | VALUES,
        "templates": VALUES,
    },
)
CELLS = st.sampled_from(
    ["", "0", "1", "8", "-1", "nan", "inf", "1e400", "9" * 400, "x", "../../x.scope", "2.5"]
)
ROWS = st.lists(st.lists(CELLS, max_size=6), max_size=4)
SETTINGS = settings(
    max_examples=300,
    derandomize=True,
    deadline=timedelta(seconds=10),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def load_and_build(text: str, base: Path) -> None:
    """Parse and build; only :class:`ConfigError` may come out."""
    try:
        scenario = parse_scenario(text, "s.yaml", base)
        build_cluster(scenario)
    except ConfigError as exc:
        assert str(exc).startswith("s.yaml"), exc


@SETTINGS
@given(document=DOCUMENT, rows=ROWS)
def test_hostile_scenarios_and_traces_load_or_fail_cleanly(
    tmp_path: Path, document: dict[str, object], rows: list[list[str]]
) -> None:
    header = "name,submit_time,gpus,duration,cpus,memory_gb\n"
    (tmp_path / "t.csv").write_text(header + "".join(",".join(r) + "\n" for r in rows))
    load_and_build(yaml.safe_dump(document), tmp_path)


@SETTINGS
@given(text=st.text(alphabet=st.sampled_from(list("[]{}:,-? &*!|>'\"%@`#\n ab1.0xe")), max_size=80))
def test_arbitrary_text_is_a_scenario_or_a_config_error(tmp_path: Path, text: str) -> None:
    load_and_build(text, tmp_path)


@pytest.mark.parametrize("key", ["? [a, b]", "? {a: 1}", "? !!set {a}"])
def test_unhashable_keys_anywhere(tmp_path: Path, key: str) -> None:
    text = f"nodes:\n  - {{name: n1, template: xeon-2s}}\njobs:\n  - name: a\n    {key}: 1\n"
    with pytest.raises(ConfigError, match=r"^s\.yaml:5: not valid YAML: .*a key must be"):
        parse_scenario(text, "s.yaml", tmp_path)
