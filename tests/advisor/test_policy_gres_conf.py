"""config (node settings): a node whose gres.conf does not match its topology.

The model is built by the advisor's own builder from samples shaped as the exporter's
``slurm_gres`` collector publishes them (the loader's answer without Prometheus).
"""

from __future__ import annotations

from toposcope.advisor.loaders.base import LoadedData, QueryResult, Window
from toposcope.advisor.loaders.queries import queries
from toposcope.advisor.model_builder import build_model
from toposcope.advisor.policies.node_settings import NodeSettingsCheck
from toposcope.promql.results import Sample

NODE = {"instance": "gpu1:9847", "job": "toposcope", "node": "gpu1"}
EXPECTED = {
    0: "NodeName=gpu1 Name=gpu File=/dev/nvidia0 Cores=0-23",
    1: "NodeName=gpu1 Name=gpu File=/dev/nvidia1 Cores=24-47",
}


def loaded(cores_match: dict[int, float], source: str = "gres.conf") -> LoadedData:
    """The two slurm_gres queries' answers for one node with two GPUs (no NVLink)."""
    match = [
        Sample({**NODE, "gpu": str(gpu), "field": field, "source": source}, value)
        for gpu, value in cores_match.items()
        for field, value in (("cores", value), ("links", 1.0))
    ]
    info = [Sample({**NODE, "gpu": str(gpu), "line": line}, 1.0) for gpu, line in EXPECTED.items()]
    wanted = queries(names=["slurm-gres-match", "slurm-gres-expected"])
    assert [q.metric for q in wanted] == [
        "toposcope_slurm_gres_config_match",
        "toposcope_slurm_gres_expected_info",
    ]
    results = {
        q.name: QueryResult(q.name, q.metric, tuple(samples))
        for q, samples in zip(wanted, (match, info), strict=True)
    }
    return LoadedData("test", Window.parse("1h"), results)


def test_a_wrong_cores_line_gives_the_lines_to_merge() -> None:
    model = build_model(loaded({0: 1.0, 1: 0.0}))
    gpu = model.nodes["gpu1"].gpu(1)
    assert gpu is not None and gpu.gres_match == {"cores": False, "links": True}
    [rec] = NodeSettingsCheck().evaluate(model).recommendations
    assert rec.kind == "config"
    assert rec.target.node == "gpu1"
    assert rec.target.gpus == (1,)
    assert rec.actions == ()
    assert "Slurm picks a job's GPU indices and CPUs from gres.conf's Cores=" in rec.summary
    assert rec.proposed["gres_conf_lines"] == [EXPECTED[0], EXPECTED[1]]
    assert rec.current["mismatched_fields"] == {"1": ["cores"]}
    assert rec.estimated_gain == 0.5 * 0.1


def test_matching_or_autodetected_gres_conf_gives_nothing() -> None:
    assert NodeSettingsCheck().evaluate(build_model(loaded({0: 1.0, 1: 1.0}))).recommendations == ()
    autodetect = build_model(loaded({0: 1.0, 1: 1.0}, source="autodetect"))
    assert NodeSettingsCheck().evaluate(autodetect).recommendations == ()
