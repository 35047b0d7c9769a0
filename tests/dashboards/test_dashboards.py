"""The Grafana dashboards: committed JSON equals what the code generates, every query is
valid PromQL naming only known metrics and labels, every panel has a title and the
``datasource`` variable, template variables exist and are defined before use, and the
provisioning files point where docs/dashboards.md says."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import promql_parser as pp
import pytest
import yaml

from tests.alerts.test_rules import (
    PROMETHEUS_SERIES,
    TARGET_LABELS,
    metric_names,
    records,
    selectors,
)
from tests.dashboards.panels import (
    BUILTINS,
    Query,
    all_panels,
    dashboards,
    label_values,
    panels,
    queries,
    substitute,
    variable_names,
    variables,
)
from tests.helpers import REPO
from toposcope.catalogue import CATALOGUE
from toposcope.dashboards.grafana import JSON_DIR, build_all, render
from toposcope.dashboards.grafana.__main__ import main
from toposcope.dashboards.grafana.boards import BUILDERS

#: dcgm-exporter series that panels may read besides the catalogue's, as a fallback for GPUs
#: toposcope does not report (docs/dashboards.md lists those panels).
DCGM_SERIES = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
}
#: Labels dcgm-exporter series are selected by.
DCGM_LABELS = {"gpu", "Hostname", "cluster"}
#: Labels the scrape configuration adds to every series (docs/deploy.md), besides job and instance.
SCRAPE_LABELS = {"hostname", "cluster"}
#: Variables every dashboard starts with, and that scope every query.
SCOPE_VARIABLES = ["datasource", "cluster", "job"]
#: Variables each dashboard must offer.
REQUIRED_VARIABLES = {
    "toposcope-cluster-overview": {"datasource", "hostname", "instance"},
    "toposcope-node-detail": {"datasource", "hostname", "instance", "gpu"},
    "toposcope-workload-locality": {"datasource", "hostname", "instance", "workload"},
    "toposcope-advisor": {"datasource", "workload"},
    "toposcope-slurm-queue": {"datasource", "partition"},
    "toposcope-fabric": {"datasource", "hostname", "instance", "partition"},
}
#: Values put in place of the variables to parse queries.
PLACEHOLDERS = {
    "cluster": "eu-1",
    "job": "toposcope-host",
    "hostname": "node-1",
    "instance": "node-1:9847",
    "gpu": "0",
    "workload": "job-1",
    "partition": "gpu",
}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
DOCS = REPO / "docs" / "dashboards.md"
PROVISIONING = REPO / "deploy" / "grafana" / "provisioning"
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|tmp|home|root)/")


def known_metrics() -> set[str]:
    return set(CATALOGUE) | {rule.name for rule in records()} | PROMETHEUS_SERIES | DCGM_SERIES


def parsed(query: Query) -> str:
    return substitute(query.expr, PLACEHOLDERS)


# --- generation -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(build_all()))
def test_committed_json_is_what_the_code_generates(name: str) -> None:
    committed = (JSON_DIR / name).read_text(encoding="utf-8")
    assert committed == render(build_all()[name]), (
        f"dashboards/grafana/json/{name} is stale: run "
        "`python -m toposcope.dashboards.grafana --output dashboards/grafana/json/`"
    )


def test_json_folder_holds_exactly_the_dashboards() -> None:
    assert {p.name for p in JSON_DIR.glob("*.json")} == set(build_all())
    assert len(build_all()) == len(BUILDERS)


def test_generation_is_deterministic() -> None:
    first = {name: render(data) for name, data in build_all().items()}
    second = {name: render(data) for name, data in build_all().items()}
    assert first == second


def test_generator_writes_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check", "--output", str(tmp_path)]) == 1
    assert main(["--output", str(tmp_path / "out")]) == 0
    for name in build_all():
        written = (tmp_path / "out" / name).read_text(encoding="utf-8")
        assert written == (JSON_DIR / name).read_text(encoding="utf-8")
    assert main(["--check", "--output", str(tmp_path / "out")]) == 0
    assert main(["--check"]) == 0, "the committed JSON is stale"
    capsys.readouterr()


def test_json_names_no_machine_paths() -> None:
    for path in JSON_DIR.glob("*.json"):
        assert not MACHINE_PATH.search(path.read_text(encoding="utf-8")), path.name


# --- dashboards and panels --------------------------------------------------------------


def test_uids_and_titles_are_unique_and_stable() -> None:
    uids = list(dashboards())
    assert set(uids) == set(REQUIRED_VARIABLES)
    for uid, data in dashboards().items():
        assert len(uid) <= 40, f"{uid}: Grafana uids are at most 40 characters"
        assert "id" not in data or data["id"] is None, f"{uid}: no database id in files"
        assert data["title"].startswith("toposcope / ")
        assert "toposcope" in data["tags"]
    titles = [data["title"] for data in dashboards().values()]
    assert len(titles) == len(set(titles))


@pytest.mark.parametrize("uid", sorted(REQUIRED_VARIABLES))
def test_panel_ids_are_fixed_and_unique(uid: str) -> None:
    data = dashboards()[uid]
    ids: list[int] = []
    for panel in data["panels"]:
        ids.append(panel["id"])
        ids.extend(inner["id"] for inner in panel.get("panels", []))
    assert ids == list(range(1, len(ids) + 1))


@pytest.mark.parametrize(
    "uid,panel", all_panels(), ids=[f"{uid}:{p['title']}" for uid, p in all_panels()]
)
def test_panel_has_title_datasource_and_queries(uid: str, panel: dict[str, Any]) -> None:
    assert panel.get("title", "").strip(), f"{uid}: panel {panel['id']} has no title"
    assert panel.get("description", "").strip(), f"{uid}:{panel['title']}: no description"
    assert panel.get("datasource") == DATASOURCE
    targets = panel.get("targets", [])
    assert targets, f"{uid}:{panel['title']}: no query"
    ref_ids = [t.get("refId") for t in targets]
    assert len(set(ref_ids)) == len(ref_ids) and all(ref_ids)
    for target in targets:
        assert target.get("expr", "").strip()
        assert target.get("datasource") == DATASOURCE


def test_panel_titles_are_unique_per_dashboard() -> None:
    for uid, data in dashboards().items():
        titles = [p["title"] for p in panels(data)]
        assert len(titles) == len(set(titles)), uid


def test_rows_have_titles() -> None:
    for uid, data in dashboards().items():
        for panel in data["panels"]:
            if panel["type"] == "row":
                assert panel["title"].strip(), uid


# --- template variables ---------------------------------------------------------------------


@pytest.mark.parametrize("uid", sorted(REQUIRED_VARIABLES))
def test_template_variables_exist(uid: str) -> None:
    found = {v["name"]: v for v in variables(dashboards()[uid])}
    assert REQUIRED_VARIABLES[uid] <= found.keys()
    datasource = found["datasource"]
    assert datasource["type"] == "datasource" and datasource["query"] == "prometheus"
    for variable in found.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]
    if "instance" in found:
        assert found["instance"].get("hide") == 2, "instance follows hostname, hidden"
        assert "allValue" not in found["instance"], (
            "All instances must mean the chosen hosts' targets, not every target (.*)"
        )


@pytest.mark.parametrize("uid", sorted(REQUIRED_VARIABLES))
def test_variables_are_defined_before_use(uid: str) -> None:
    data = dashboards()[uid]
    defined: set[str] = set()
    for variable in variables(data):
        if variable["type"] == "query":
            used = variable_names(str(variable["query"])) - set(BUILTINS)
            assert used <= defined, f"{variable['name']} uses {used - defined} before definition"
        defined.add(variable["name"])
    for panel in panels(data):
        for target in panel["targets"]:
            used = variable_names(target["expr"]) - set(BUILTINS)
            assert used <= defined, f"{panel['title']}: undefined {sorted(used - defined)}"


@pytest.mark.parametrize("uid", sorted(REQUIRED_VARIABLES))
def test_variable_queries_parse_and_name_known_metrics(uid: str) -> None:
    for variable in variables(dashboards()[uid]):
        if variable["type"] != "query":
            continue
        selector, label = label_values(str(variable["query"]))
        expr = substitute(selector, PLACEHOLDERS)
        unknown = metric_names(expr) - known_metrics()
        assert not unknown, f"{variable['name']}: unknown metrics {unknown}"
        for name in metric_names(expr):
            spec = CATALOGUE.get(name)
            if spec is not None:
                assert label in set(spec.labels) | TARGET_LABELS | SCRAPE_LABELS


# --- PromQL -----------------------------------------------------------------------------------


@pytest.mark.parametrize("query", queries(), ids=str)
def test_query_parses(query: Query) -> None:
    try:
        pp.parse(parsed(query))
    except ValueError as exc:
        pytest.fail(f"{query}: {exc}\n{query.expr}")


@pytest.mark.parametrize("query", queries(), ids=str)
def test_query_names_only_known_metrics(query: Query) -> None:
    names = metric_names(parsed(query))
    unknown = names - known_metrics()
    assert not unknown, (
        f"{query}: not in the catalogue, not a recording rule in alerts/, not an allowed "
        f"dcgm-exporter series: {sorted(unknown)}"
    )
    assert names, f"{query}: selects no series"


@pytest.mark.parametrize("query", queries(), ids=str)
def test_query_matches_only_known_labels(query: Query) -> None:
    recorded = {rule.name for rule in records()}
    for selector in selectors(parsed(query)):
        name = selector.name or ""
        if name in CATALOGUE:
            allowed = set(CATALOGUE[name].labels) | TARGET_LABELS | SCRAPE_LABELS
        elif name in DCGM_SERIES:
            allowed = DCGM_LABELS | TARGET_LABELS
        elif name in recorded or name in PROMETHEUS_SERIES:
            continue
        else:
            pytest.fail(f"{query}: unexpected selector {name!r}")
        for matcher in selector.matchers.matchers:
            assert matcher.name in allowed | {"__name__"}, f"{query}: {name} has no {matcher.name}"


@pytest.mark.parametrize("query", queries(), ids=str)
def test_toposcope_series_are_filtered_to_the_chosen_hosts(query: Query) -> None:
    """Exporter value series are selected by $instance; ``_info`` series may be joined in
    unfiltered (the join does the filtering), and the advisor's come from its own job."""
    for selector in selectors(parsed(query)):
        spec = CATALOGUE.get(selector.name or "")
        if spec is None or spec.part != "exporter" or spec.type == "info":
            continue
        labels = {m.name for m in selector.matchers.matchers}
        assert "instance" in labels, f"{query}: {selector.name} is not filtered by $instance"


@pytest.mark.parametrize("query", queries(), ids=str)
def test_every_selector_is_scoped_to_the_chosen_cluster_and_job(query: Query) -> None:
    """Every series a panel reads is of the chosen cluster; toposcope's also of the chosen job
    (dcgm-exporter's come from its own job, and are matched by host instead)."""
    for selector in selectors(parsed(query)):
        matchers = {(m.name, m.value) for m in selector.matchers.matchers}
        assert ("cluster", PLACEHOLDERS["cluster"]) in matchers, f"{query}: {selector}"
        if not (selector.name or "").startswith("DCGM_"):
            assert ("job", PLACEHOLDERS["job"]) in matchers, f"{query}: {selector}"


@pytest.mark.parametrize("uid", sorted(REQUIRED_VARIABLES))
def test_cluster_and_job_variables_come_first_and_allow_all(uid: str) -> None:
    found = variables(dashboards()[uid])
    assert [v["name"] for v in found[:3]] == SCOPE_VARIABLES
    for variable in found[1:3]:
        assert variable["type"] == "query"
        assert variable["includeAll"] is True and variable["allValue"] == ".*"
        selector, label = label_values(variable["query"])
        assert label == variable["name"]
        assert metric_names(substitute(selector, PLACEHOLDERS)) == {"toposcope_build_info"}
    for variable in found[3:]:
        if variable["type"] == "query":
            assert "$cluster" in variable["query"], variable["name"]


def test_dcgm_series_are_each_used_as_a_fallback() -> None:
    used: set[str] = set()
    for query in queries():
        names = metric_names(parsed(query))
        dcgm = names & DCGM_SERIES
        if dcgm:
            assert " or " in query.expr and names - DCGM_SERIES, (
                f"{query}: dcgm-exporter series only as a fallback after toposcope's (`or`)"
            )
        used |= dcgm
    assert used == DCGM_SERIES, f"listed but unused: {sorted(DCGM_SERIES - used)}"


def test_dcgm_panels_are_documented() -> None:
    text = DOCS.read_text(encoding="utf-8")
    dcgm_panels = {
        (q.dashboard, q.panel) for q in queries() if metric_names(parsed(q)) & DCGM_SERIES
    }
    assert dcgm_panels
    for uid, title in sorted(dcgm_panels):
        title_in_docs = f"{dashboards()[uid]['title']}" in text and title in text
        assert title_in_docs, f"docs/dashboards.md does not list {title!r} ({uid}) as DCGM-ready"


def test_docs_name_every_dashboard_and_variable() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for uid, data in dashboards().items():
        assert uid in text and data["title"] in text, uid
    for name in set().union(*REQUIRED_VARIABLES.values()):
        assert f"`{name}`" in text, name


# --- provisioning --------------------------------------------------------------------------


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_datasource_provisioning() -> None:
    data = load(PROVISIONING / "datasources" / "toposcope.yaml")
    assert data["apiVersion"] == 1
    (source,) = data["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert source["access"] == "proxy"
    # Grafana refuses a second default data source: ours must not claim to be it
    assert source.get("isDefault", False) is False


def test_dashboard_provisioning_points_at_the_documented_folder() -> None:
    data = load(PROVISIONING / "dashboards" / "toposcope.yaml")
    assert data["apiVersion"] == 1
    (provider,) = data["providers"]
    assert provider["type"] == "file"
    path = provider["options"]["path"]
    text = DOCS.read_text(encoding="utf-8")
    assert f"dashboards/grafana/json:{path}" in text, "docs/dashboards.md mounts the JSON there"
    assert "deploy/grafana/provisioning:/etc/grafana/provisioning" in text
