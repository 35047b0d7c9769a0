"""Rules as configuration: the committed files are the default rendering, and a rendering
with other selectors and thresholds is valid and alerts where the defaults would not.

The renderer is strict: an unknown key in a configuration, a value of the wrong kind, an
unknown placeholder in a template, or a value that would change the YAML around it fails with
a message naming it, and ``toposcope rules export`` turns that into exit code 2.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.procs import require_binary
from toposcope.cli import main
from toposcope.errors import ConfigError
from toposcope.rules.config import default_config, load_config, merge
from toposcope.rules.render import HEADER, render_all, render_template, rule_groups

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "alerts"

#: A configuration unlike the defaults in every kind of value the templates use.
CUSTOM = {
    "selectors": {
        "exporter": 'job="node-topology"',
        "advisor": 'job="topo-advisor"',
        "agent": 'job="topo-agent"',
    },
    "cluster_label": "k8s_cluster",
    "runbook_url": "https://runbooks.example.com/toposcope.md",
    "alerts": {
        "ToposcopeExporterDown": {"for": "2m"},
        "ToposcopeGpuMemoryNearlyFull": {"used_ratio": 0.8, "for": "5m"},
        "ToposcopeGpuXidFatal": {"xids": [79]},
        "ToposcopeGpuEccUncorrectable": {"for": "2m"},
        "ToposcopeAdvisorActionFailed": {"for": "0m"},
    },
}


def _write(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_binary("promtool"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _rules(rendered: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {
        str(rule.get("alert") or rule["record"]): rule
        for group in rule_groups(rendered)
        for rule in group["rules"]
    }


def test_committed_rule_files_are_the_default_rendering() -> None:
    rendered = render_all(load_config(None))
    committed = {path.name: path.read_text(encoding="utf-8") for path in ALERTS.glob("*.rules.yml")}
    assert sorted(committed) == sorted(rendered), "a rule file without template, or the reverse"
    for name, text in rendered.items():
        assert committed[name] == text, f"alerts/{name} is stale: run toposcope rules export alerts"
        assert "${" not in text


def test_export_writes_the_rule_files_and_check_finds_a_stale_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rules", "export", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in ALERTS.glob("*.rules.yml")
    )
    assert main(["rules", "export", str(tmp_path), "--check"]) == 0
    stale = tmp_path / "gpu.rules.yml"
    stale.write_text(stale.read_text(encoding="utf-8").replace("for: 15m", "for: 16m"))
    assert main(["rules", "export", str(tmp_path), "--check"]) == 1
    assert "gpu.rules.yml is stale" in capsys.readouterr().err


def test_custom_configuration_renders_valid_rules_with_its_values(tmp_path: Path) -> None:
    config_file = _write(tmp_path / "rules.yaml", CUSTOM)
    out = tmp_path / "rules"
    assert main(["rules", "export", str(out), "--config", str(config_file)]) == 0
    rendered = {p.name: p.read_text(encoding="utf-8") for p in out.iterdir()}
    rules = _rules(rendered)
    assert rules["ToposcopeExporterDown"]["expr"] == 'up{job="node-topology"} == 0'
    assert rules["ToposcopeExporterDown"]["for"] == "2m"
    assert rules["ToposcopeAdvisorDown"]["expr"] == 'up{job="topo-advisor"} == 0'
    assert rules["ToposcopeAgentDown"]["expr"] == 'up{job="topo-agent"} == 0'
    assert rules["ToposcopeGpuEccUncorrectable"]["for"] == "2m"
    assert "for" not in rules["ToposcopeAdvisorActionFailed"]
    throttled = rules["ToposcopeGpuThermalThrottling"]["annotations"]["description"]
    assert '{k8s_cluster="%s",job="%s",instance="%s",gpu="%s"}' in throttled
    assert "` $labels.k8s_cluster $labels.job $labels.instance $labels.gpu | query" in throttled
    assert rules["ToposcopeGpuMemoryNearlyFull"]["expr"].endswith("> 0.8")
    assert 'xid=~"79"' in rules["ToposcopeGpuXidFatal"]["expr"]
    assert 'xid!~"79"' in rules["ToposcopeGpuXidErrors"]["expr"]
    assert "on (k8s_cluster, job, instance)" in rules["ToposcopeNumaNodeMemoryExhausted"]["expr"]
    assert rules["ToposcopeGpuLost"]["annotations"]["runbook_url"] == (
        "https://runbooks.example.com/toposcope.md#toposcopegpulost"
    )
    # unchanged keys keep their defaults
    assert rules["ToposcopeGpuLost"]["for"] == "1m"
    result = _promtool("check", "rules", *sorted(rendered), cwd=out)
    assert result.returncode == 0, result.stdout + result.stderr


_TARGET = 'job="node-topology", instance="n1:9847"'
#: 85 % of GPU 0's memory in use on a target of job node-topology that is down.
MOVED_THRESHOLD_SERIES = [
    {"series": f"up{{{_TARGET}}}", "values": "0x10"},
    {"series": f'toposcope_gpu_memory_used_bytes{{{_TARGET}, gpu="0"}}', "values": "85x10"},
    {"series": f'toposcope_gpu_memory_total_bytes{{{_TARGET}, gpu="0"}}', "values": "100x10"},
]


def _moved_threshold_case(tmp_path: Path, rules_dir: Path, custom: bool) -> Path:
    url = "https://runbooks.example.com/toposcope.md"
    down = [
        {
            "exp_labels": {"severity": "warning", "job": "node-topology", "instance": "n1:9847"},
            "exp_annotations": {
                "summary": "toposcope exporter on n1:9847 is down",
                "description": "Prometheus has not been able to scrape the toposcope exporter of "
                "job node-topology on n1:9847 for 2 minutes. The GPU, NUMA, cross-socket and "
                "workload locality metrics of this node are missing, and Alertmanager holds back "
                "this target's other toposcope alerts while this one fires.",
                "runbook_url": f"{url}#toposcopeexporterdown",
            },
        }
    ]
    full = [
        {
            "exp_labels": {
                "severity": "warning",
                "job": "node-topology",
                "instance": "n1:9847",
                "gpu": "0",
            },
            "exp_annotations": {
                "summary": "GPU 0 on n1:9847 memory 85% full",
                "description": "85% of the memory of GPU 0 on n1:9847 has been in use for 5 "
                "minutes. The next allocation of a job on it may fail with an out-of-memory "
                "error.",
                "runbook_url": f"{url}#toposcopegpumemorynearlyfull",
            },
        }
    ]
    data = {
        "rule_files": [str(rules_dir / "exporter.rules.yml"), str(rules_dir / "gpu.rules.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": MOVED_THRESHOLD_SERIES,
                "alert_rule_test": [
                    {
                        "eval_time": "7m",
                        "alertname": "ToposcopeExporterDown",
                        "exp_alerts": down if custom else [],
                    },
                    {
                        "eval_time": "7m",
                        "alertname": "ToposcopeGpuMemoryNearlyFull",
                        "exp_alerts": full if custom else [],
                    },
                ],
            }
        ],
    }
    case = tmp_path / f"moved-{'custom' if custom else 'default'}.test.yml"
    return _write(case, data)


def test_promtool_unit_test_sees_the_moved_threshold_and_selector(tmp_path: Path) -> None:
    """85 % used: a warning at the custom 0.8 (after its 5m), none at the default 0.95;
    a job named node-topology is watched by the custom selector only."""
    custom_dir = tmp_path / "custom"
    config_file = _write(tmp_path / "rules.yaml", CUSTOM)
    assert main(["rules", "export", str(custom_dir), "--config", str(config_file)]) == 0
    for rules_dir, custom in ((custom_dir, True), (ALERTS, False)):
        case = _moved_threshold_case(tmp_path, rules_dir, custom)
        result = _promtool("test", "rules", str(case), cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr


def test_prometheusrule_export_carries_the_selected_labels(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        main(["rules", "export", "-", "--format", "prometheusrule", "--label", "release=kps"]) == 0
    )
    obj = yaml.safe_load(capsys.readouterr().out)
    assert obj["kind"] == "PrometheusRule"
    assert obj["metadata"]["labels"]["release"] == "kps"
    assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == "toposcope"
    committed = [
        group
        for path in sorted(ALERTS.glob("*.rules.yml"))
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
    ]
    assert obj["spec"]["groups"] == committed


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"alerts": {"ToposcopeGpuLost": {"fro": "5m"}}}, "alerts.ToposcopeGpuLost.fro"),
        ({"alerts": {"ToposcopeNoSuchAlert": {"for": "5m"}}}, "ToposcopeNoSuchAlert"),
        ({"alerts": {"ToposcopeGpuLost": {"for": "5 minutes"}}}, "duration"),
        ({"alerts": {"ToposcopeGpuMemoryNearlyFull": {"used_ratio": "high"}}}, "number"),
        ({"alerts": {"ToposcopeGpuMemoryNearlyFull": {"used_ratio": True}}}, "number"),
        ({"alerts": {"ToposcopeGpuXidFatal": {"xids": []}}}, "non-empty list"),
        ({"selectors": {"exporter": "toposcope"}}, "label matchers"),
        ({"selectors": {"exporter": 'job="a"} or vector(1) #'}}, "label matchers"),
        ({"cluster_label": "k8s-cluster"}, "label name"),
        ({"runbook_url": "javascript:alert(1)"}, "URL"),
        (["not", "a", "mapping"], "mapping"),
    ],
)
def test_bad_configuration_is_named(overrides: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        merge(default_config(), overrides)


def _template_alerts() -> dict[str, dict[str, Any]]:
    folder = REPO / "toposcope" / "rules" / "templates"
    return {
        str(rule["alert"]): rule
        for path in sorted(folder.glob("*.rules.yml"))
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


def test_every_alert_has_a_configurable_for() -> None:
    alerts = _template_alerts()
    defaults = default_config()["alerts"]
    assert sorted(defaults) == sorted(alerts), "defaults.yaml and the templates' alerts differ"
    for name, rule in alerts.items():
        assert rule.get("for") == f"${{alerts.{name}.for}}", f"{name}: for is not configurable"
        assert "for" in defaults[name], f"{name}: no default for"


@pytest.mark.parametrize("zero", ["0s", "0m", "0h0m0s", "0ms"])
def test_zero_for_renders_as_no_for_and_any_other_as_itself(zero: str) -> None:
    name = "ToposcopeGpuXidFatal"
    zero_config = merge(default_config(), {"alerts": {name: {"for": zero}}})
    assert "for" not in _rules(render_all(zero_config))[name]
    timed = merge(default_config(), {"alerts": {name: {"for": "3m"}}})
    assert _rules(render_all(timed))[name]["for"] == "3m"
    # an alert that has a for by default loses it at zero, keeping the rest of the rule
    down = _rules(
        render_all(merge(default_config(), {"alerts": {"ToposcopeAgentDown": {"for": zero}}}))
    )
    assert "for" not in down["ToposcopeAgentDown"]
    assert down["ToposcopeAgentDown"]["labels"] == {"severity": "warning"}


def test_value_that_would_break_the_yaml_is_refused() -> None:
    # valid matchers, but " #" starts a YAML comment in the plain scalar around it
    config = merge(default_config(), {"selectors": {"exporter": 'job="a #b"'}})
    with pytest.raises(ConfigError, match="YAML structure"):
        render_all(config)


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("expr: up{${selectors.nope}} == 0\n", r"t\.rules\.yml:1: unknown configuration name"),
        ("a: 1\nfor: ${alerts.ToposcopeGpuLost.for|loud}\n", r":2: unknown filter 'loud'"),
        ("expr: ${selectors}\n", "unknown configuration name 'selectors'"),
        ("expr: ${selectors.exporter | }\n", "malformed placeholder"),
        ("expr: up{${selectors.exporter\n", "unterminated placeholder"),
        ("expr: ${gpu_idle_ratio|words}\n", "not a duration"),
    ],
)
def test_bad_template_is_named(template: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        render_template(template, default_config(), "t.rules.yml")


def test_filters_render_words_seconds_and_percent() -> None:
    template = (
        "a: ${alerts.ToposcopeAdvisorHighGainPending.open_for|seconds}\n"
        "b: ${alerts.ToposcopeAdvisorHighGainPending.open_for|words}\n"
        "c: ${alerts.ToposcopeGpuAllocatedIdle.for|words}\n"
        "d: ${gpu_idle_ratio|percent}\n"
        "e: ${alerts.ToposcopeCrossSocketTrafficHigh.bytes_per_second}\n"
    )
    text = render_template(template, default_config(), "t.rules.yml")
    assert yaml.safe_load(text.removeprefix(HEADER)) == {
        "a": 14400,
        "b": "4 hours",
        "c": "an hour",
        "d": "5 %",
        "e": "5e+09",
    }


def test_cli_reports_a_bad_configuration_with_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _write(tmp_path / "rules.yaml", {"thresholds": {"x": 1}})
    assert main(["rules", "export", str(tmp_path / "out"), "--config", str(bad)]) == 2
    assert "unknown key 'thresholds'" in capsys.readouterr().err
    assert main(["rules", "export", str(tmp_path), "--config", str(tmp_path / "none")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert main(["rules", "export", "-", "--format", "prometheusrule", "--label", "x"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
