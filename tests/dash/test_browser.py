"""The Dash app in a real headless Chromium against a real stack (``stack`` in conftest):
every page loads without console errors, the topology drawing matches the simulator's
template, the what-if placement is the advisor's, and applying and reverting through the UI
as a basic-auth user changes the simulator and is recorded under that user. Each page's
screenshot is written to a temporary folder, or to ``docs/img/`` for the README when
``TOPOSCOPE_DOCS_IMG`` names that folder (``make docs`` does), so a test run never changes the
tracked tree.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from selenium.common.exceptions import (
    ElementClickInterceptedException,
    NoAlertPresentException,
    StaleElementReferenceException,
)

from tests.dash.conftest import ADVISOR_TOKEN, Stack
from tests.procs import free_port, http_get, poll
from toposcope.dashboards.app.access import Access
from toposcope.dashboards.app.server import AppSettings, create_app
from toposcope.fabric.yamlfile import read_fabric_file
from toposcope.serving.webconfig import parse_web_config
from toposcope.sim.scenarios import load_scenario

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:HTTPResponse.getheader:DeprecationWarning"),
]

TIMEOUT = 30


def wait_until(check: Callable[[], object], what: str, timeout: float = TIMEOUT) -> None:
    """Poll ``check`` until it is truthy; fail after ``timeout`` seconds (its errors fail)."""
    poll(check, timeout, what=what, errors=())


def alert_shown(driver: Any) -> bool:
    try:
        driver.switch_to.alert  # noqa: B018 (raises while no dialog is open)
    except NoAlertPresentException:
        return False
    return True


def start(dash_duo: Any, settings: AppSettings, path: str, login: str = "") -> None:
    """Serve the app on a free port and open ``path`` in a 1280x800 window; with ``login``
    (``user:password``) the browser sends those basic-auth credentials on every request, as
    it does once its sign-in prompt was answered.
    """
    dash_duo.start_server(create_app(settings), navigate=False, port=free_port())
    if login:
        credentials = base64.b64encode(login.encode()).decode()
        dash_duo.driver.execute_cdp_cmd("Network.enable", {})
        dash_duo.driver.execute_cdp_cmd(
            "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {credentials}"}}
        )
    dash_duo.driver.set_window_size(1280, 800)
    dash_duo.server_url = dash_duo.server.url  # opens the app's root page
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}{path}", timeout=TIMEOUT)


def settings_for(
    stack: Stack, token: str | None = ADVISOR_TOKEN, access: Access | None = None
) -> AppSettings:
    return AppSettings(
        stack.prometheus,
        stack.advisor,
        token,
        timeout=10,
        refresh="off",
        access=access or Access(),
    )


#: a basic-auth user of the app (cost 4: fast to check in tests)
USER, PASSWORD = "alice", "alice-pw"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
USERS = Access(web_config=parse_web_config(f"basic_auth_users:\n  {USER}: '{HASH}'\n", "web.yml"))


def graphs_drawn(dash_duo: Any) -> bool:
    """Whether every graph of the page has drawn a figure of ours (they all have titles)."""
    drawn: bool = dash_duo.driver.execute_script(
        "const gs = [...document.querySelectorAll('#page .js-plotly-plot')];"
        "return gs.every(g => g._fullLayout && g.querySelector('.main-svg')"
        " && g.layout && g.layout.title && g.layout.title.text);"
    )
    return drawn


@pytest.fixture
def images(tmp_path: Path) -> Path:
    """Where screenshots go: ``$TOPOSCOPE_DOCS_IMG`` (``make docs``) or a temporary folder."""
    chosen = os.environ.get("TOPOSCOPE_DOCS_IMG")
    return Path(chosen) if chosen else tmp_path


def screenshot(dash_duo: Any, images: Path, name: str) -> None:
    """Save the page once every graph has drawn; the PNG must be written."""
    wait_until(lambda: graphs_drawn(dash_duo), "every graph drawn")
    images.mkdir(parents=True, exist_ok=True)
    assert dash_duo.driver.save_screenshot(str(images / name))
    assert (images / name).stat().st_size > 0


def figure(dash_duo: Any, graph_id: str) -> dict[str, Any]:
    """The figure plotly.js drew in ``#graph_id``: its data, layout and rendered shapes."""
    found: dict[str, Any] = dash_duo.driver.execute_script(
        f"const gd = document.querySelector('#{graph_id} .js-plotly-plot');"
        "return {data: gd.data.map(t => ({name: t.name, y: t.y, x: t.x})),"
        " shapes: (gd.layout.shapes || []).map(s => ({name: s.name, width: s.line.width})),"
        " title: gd.layout.title.text,"
        f" drawn: document.querySelectorAll('#{graph_id} .shapelayer path').length}};"
    )
    return found


def no_console_errors(dash_duo: Any) -> None:
    assert dash_duo.get_logs() == []


def advisor_json(stack: Stack, path: str) -> Any:
    return json.loads(http_get(f"{stack.advisor}{path}"))


def test_cluster_page(dash_duo: Any, stack: Stack, images: Path) -> None:
    start(dash_duo, settings_for(stack), "/")
    dash_duo.wait_for_contains_text("#cluster-summary", "nodes", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#cluster-util .gtitle", "GPU utilization", timeout=TIMEOUT)
    dash_duo.wait_for_element("#cluster-recs table", timeout=TIMEOUT)
    for graph in ("#cluster-util", "#cluster-memory"):
        dash_duo.wait_for_element(f"{graph} g.hm image", timeout=TIMEOUT)
    scenario = load_scenario("builtin:demo")
    gpu_nodes = sorted(n.name for n in scenario.nodes if n.template.gpus)
    heatmap = figure(dash_duo, "cluster-util")
    assert sorted(heatmap["data"][0]["y"]) == gpu_nodes
    assert len(heatmap["data"][0]["x"]) == max(len(n.template.gpus) for n in scenario.nodes)
    locality = figure(dash_duo, "cluster-locality")
    assert set(locality["data"][0]["x"]) <= {n.name for n in scenario.nodes}
    assert f"{len(scenario.nodes)}\nnodes" in dash_duo.find_element("#cluster-summary").text
    screenshot(dash_duo, images, "cluster.png")
    no_console_errors(dash_duo)


def test_node_page_draws_the_template(dash_duo: Any, stack: Stack, images: Path) -> None:
    scenario = load_scenario("builtin:demo")
    node = next(n for n in scenario.nodes if len(n.template.topology.numa_nodes) > 2)
    start(dash_duo, settings_for(stack), f"/node?node={node.name}")
    dash_duo.wait_for_contains_text("#node-topology .gtitle", node.name, timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#node-gpu-util .gtitle", "GPU utilization", timeout=TIMEOUT)
    drawn = figure(dash_duo, "node-topology")
    names = [s["name"] for s in drawn["shapes"]]
    template = node.template
    assert sum(n.startswith("gpu-") for n in names) == len(template.gpus)
    numa = [n for n in names if n.startswith("numa-") and not n.endswith("-memory")]
    assert len(numa) == len(template.topology.numa_nodes)
    packages = {n.package for n in template.topology.numa_nodes}
    assert sum(n.startswith("package-") for n in names) == len(packages)
    assert sum(n.startswith("nic-") for n in names) == len(template.nics)
    pairs = len(template.gpus) * (len(template.gpus) - 1) // 2
    assert sum(n.startswith("link-") for n in names) == pairs
    # every shape of the figure is in the page's SVG
    assert drawn["drawn"] == len(names)
    traces = figure(dash_duo, "node-gpu-util")["data"]
    assert len(traces) == len(template.gpus)
    screenshot(dash_duo, images, "node.png")
    no_console_errors(dash_duo)


def test_workload_page(dash_duo: Any, stack: Stack, images: Path) -> None:
    recs = advisor_json(stack, "/api/v1/recommendations")["recommendations"]
    target = next(r["target"] for r in recs if r["kind"] == "pin" and r["target"]["gpus"] == [])
    workloads = advisor_json(stack, "/api/v1/recommendations")
    assert workloads
    key = f"{target['node']}/{target['workload']}"
    start(dash_duo, settings_for(stack), "/workload?" + urllib.parse.urlencode({"workload": key}))
    dash_duo.wait_for_contains_text("#workload-summary", target["node"], timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#workload-cores .gtitle", "threads run", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#workload-recs", target["workload"], timeout=TIMEOUT)
    cores = figure(dash_duo, "workload-cores")
    assert cores["data"] and all(t["name"].startswith("NUMA ") for t in cores["data"])
    screenshot(dash_duo, images, "workload.png")
    no_console_errors(dash_duo)


def cpus_of(stack: Stack, workload: str) -> list[int]:
    """The CPUs the simulator has ``workload`` on now."""
    found = json.loads(http_get(f"{stack.sim}/api/v1/workloads/{workload}"))
    return sorted(found["allocation"]["cpus"])


def sim_action(stack: Stack, action_id: str) -> str:
    """The simulator's status of one action."""
    return str(json.loads(http_get(f"{stack.sim}/api/v1/actions/{action_id}"))["status"])


def finished(stack: Stack, action_id: str) -> Callable[[], bool]:
    """A check that the simulator's action ``action_id`` succeeded."""
    return lambda: sim_action(stack, action_id) == "succeeded"


def _row_status(dash_duo: Any, rec_id: str) -> str | None:
    status: str | None = dash_duo.driver.execute_script(
        "for (const tr of document.querySelectorAll('#recs-table tr')) {"
        "  const id = tr.querySelector('td[data-dash-column=\"id\"]');"
        "  if (id && id.innerText.trim() === arguments[0]) {"
        "    return tr.querySelector('td[data-dash-column=\"status\"]').innerText.trim(); }"
        "} return null;",
        rec_id,
    )
    return status


#: a click whose dialog has not opened after this long was lost (the button was re-rendered)
CLICK_AGAIN_S = 10.0


def _confirm(dash_duo: Any, button: str) -> str:
    """Click ``button`` until its confirmation dialog opens, then accept it; answer what the
    dialog asked.

    A refresh can re-render the button between finding and clicking it, which loses the
    click; clicking again until the dialog is open does not depend on when that happens.
    """
    driver = dash_duo.driver
    clicked_at = [-CLICK_AGAIN_S]
    # count the dialogs the page opens, so that a failure tells a lost click from a lost dialog
    driver.execute_script(
        "window.confirmsAsked = 0; const ask = window.confirm;"
        "window.confirm = m => { window.confirmsAsked += 1; return ask.call(window, m); };"
    )

    def dialog_open() -> bool:
        if alert_shown(driver):
            return True
        if time.monotonic() - clicked_at[0] < CLICK_AGAIN_S:
            return False  # the dialog of the last click may still be on its way
        try:
            element = driver.find_element("css selector", button)
            if element.is_enabled():
                element.click()
                clicked_at[0] = time.monotonic()
        except (StaleElementReferenceException, ElementClickInterceptedException):
            return False
        return alert_shown(driver)

    try:
        wait_until(dialog_open, "the confirmation dialog")
    except pytest.fail.Exception:
        element = driver.find_element("css selector", button)
        detail = driver.find_element("css selector", "#recs-detail").text[:300]
        pytest.fail(
            f"no dialog: {button} enabled={element.is_enabled()}, detail: {detail!r}, "
            f"outcome: {driver.find_element('css selector', '#recs-outcome').text!r}, "
            f"dialogs opened: {driver.execute_script('return window.confirmsAsked')}, "
            f"browser console: {dash_duo.get_logs()!r}"
        )
    alert = driver.switch_to.alert
    asked = str(alert.text)
    alert.accept()
    return asked


#: consecutive analyses (2 s apart) that must propose the same pin before the test acts on it
STABLE_ANALYSES = 3


def steady_pin(stack: Stack) -> dict[str, Any]:
    """The best pin that moves a workload's threads, once the advisor proposes it in
    :data:`STABLE_ANALYSES` analyses in a row.

    While the one-minute window still fills, rates (and so which of two conflicting pins
    wins) can change from one analysis to the next: a recommendation picked then may leave
    the report before the test clicks Apply, which the app rightly refuses.
    """

    def moves_cpus(rec: dict[str, Any]) -> bool:
        """Whether the pin changes the workload's CPUs (not only where its memory lives)."""
        pin = next(a for a in rec["actions"] if a["kind"] == "pin")
        now = json.loads(http_get(f"{stack.sim}/api/v1/workloads/{rec['target']['workload']}"))
        return sorted(now["allocation"]["cpus"]) != sorted(pin["cpus"])

    seen: list[tuple[str, str]] = []
    chosen: dict[str, Any] = {}

    def steady() -> bool:
        report = advisor_json(stack, "/api/v1/recommendations")
        pins = [r for r in report["recommendations"] if r["kind"] == "pin" and moves_cpus(r)]
        assert pins, "the demo scenario has a misplaced job whose pin moves its threads"
        best = max(pins, key=lambda r: r["estimated_gain"])
        analysis = (str(report["run"]["started_at"]), str(best["id"]))
        if not seen or seen[-1][0] != analysis[0]:
            seen.append(analysis)
        chosen.update(best)
        latest = {rec_id for _, rec_id in seen[-STABLE_ANALYSES:]}
        return len(seen) >= STABLE_ANALYSES and latest == {best["id"]}

    poll(steady, deadline_s=120, interval_s=0.5)
    return chosen


def test_apply_and_revert_through_the_ui(dash_duo: Any, stack: Stack, images: Path) -> None:
    rec = steady_pin(stack)
    workload = rec["target"]["workload"]
    action = next(a for a in rec["actions"] if a["kind"] == "pin")
    before = json.loads(http_get(f"{stack.sim}/api/v1/workloads/{workload}"))
    start(
        dash_duo,
        settings_for(stack, access=USERS),
        f"/recommendations?id={rec['id']}",
        login=f"{USER}:{PASSWORD}",
    )
    dash_duo.wait_for_contains_text("#recommendations-page", f"signed in as {USER}")
    wait_until(lambda: _row_status(dash_duo, rec["id"]) == "open", "row open")
    dash_duo.wait_for_contains_text("#recs-detail", rec["summary"], timeout=TIMEOUT)

    asked = _confirm(dash_duo, "#recs-apply")
    assert asked.startswith(f"Apply {rec['id']}?") and rec["summary"] in asked, asked
    dash_duo.wait_for_contains_text("#recs-outcome", f"apply {rec['id']}: applied", timeout=TIMEOUT)
    # the sim may still run the memory migration: "in progress" until the advisor settles it
    wait_until(
        lambda: _row_status(dash_duo, rec["id"]) in ("applied", "in progress"), "row applied"
    )
    # what the advice did: the advisor took its baseline when it applied the pin
    dash_duo.wait_for_contains_text("#recs-verification", "What the advice did", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#recs-verification", "reverted: no", timeout=TIMEOUT)
    # the simulator carries the action out in simulated time
    poll(lambda: cpus_of(stack, workload) == sorted(action["cpus"]))
    audit = advisor_json(stack, f"/api/v1/audit?recommendation={rec['id']}")["actions"]
    assert {a["kind"]: a["result"] for a in audit}["pin"] in ("succeeded", "running")
    assert {a["actor"].split(" ")[0] for a in audit} == {USER}
    # moving pages takes simulated time; revert undoes only what finished (the advisor's rule)
    for entry in audit:
        poll(finished(stack, str(entry["action_id"])), deadline_s=60)
    dash_duo.wait_for_contains_text("#recs-audit", rec["id"], timeout=TIMEOUT)
    screenshot(dash_duo, images, "recommendations.png")

    assert _confirm(dash_duo, "#recs-revert") == f"Revert what was applied under {rec['id']}?"
    dash_duo.wait_for_contains_text(
        "#recs-outcome", f"revert {rec['id']}: reverted", timeout=TIMEOUT
    )
    wait_until(lambda: _row_status(dash_duo, rec["id"]) == "reverted", "row reverted")
    dash_duo.wait_for_contains_text("#recs-verification", "reverted: yes", timeout=TIMEOUT)
    poll(lambda: cpus_of(stack, workload) == sorted(before["allocation"]["cpus"]))
    audit = advisor_json(stack, f"/api/v1/audit?recommendation={rec['id']}")["actions"]
    assert {a["actor"].split(" ")[0] for a in audit if a["reverts"]} == {USER}
    no_console_errors(dash_duo)


def test_no_apply_without_a_signed_in_user(dash_duo: Any, stack: Stack) -> None:
    recs = advisor_json(stack, "/api/v1/recommendations")["recommendations"]
    rec = max((r for r in recs if r["kind"] == "pin"), key=lambda r: r["estimated_gain"])
    start(dash_duo, settings_for(stack), f"/recommendations?id={rec['id']}")
    dash_duo.wait_for_contains_text(
        "#recommendations-page", "they need a signed-in user", timeout=TIMEOUT
    )
    # the row is selected and shown: with a user, Apply would be enabled now
    dash_duo.wait_for_contains_text("#recs-detail", rec["summary"], timeout=TIMEOUT)
    assert _row_status(dash_duo, rec["id"]) in ("open", "reverted")
    assert not dash_duo.find_element("#recs-apply").is_enabled()
    assert not dash_duo.find_element("#recs-revert").is_enabled()
    no_console_errors(dash_duo)


def test_read_only_without_a_token(dash_duo: Any, stack: Stack) -> None:
    start(dash_duo, settings_for(stack, token=None), "/recommendations")
    dash_duo.wait_for_contains_text(
        "#recommendations-page", "apply and revert are off", timeout=TIMEOUT
    )
    assert ADVISOR_TOKEN not in dash_duo.driver.page_source
    assert not dash_duo.find_element("#recs-apply").is_enabled()
    no_console_errors(dash_duo)


def test_placement_page(dash_duo: Any, stack: Stack, images: Path) -> None:
    # the demo's queue takes free GPUs as its jobs start: ask for a size that fits now
    fits = {
        gpus: advisor_json(stack, f"/api/v1/placement?gpus={gpus}")["placements"] for gpus in (2, 1)
    }
    gpus = next((n for n, placements in fits.items() if placements), None)
    assert gpus is not None, "the demo cluster has no free GPU"
    best = fits[gpus][0]
    start(dash_duo, settings_for(stack), f"/placement?gpus={gpus}")
    dash_duo.wait_for_contains_text(
        "#place-message", f"best placement for {gpus} GPU(s)", timeout=TIMEOUT
    )
    dash_duo.wait_for_contains_text("#place-topology .gtitle", best["node"], timeout=TIMEOUT)
    drawn = figure(dash_duo, "place-topology")
    chosen = sorted(
        int(s["name"].removeprefix("gpu-"))
        for s in drawn["shapes"]
        if s["name"].startswith("gpu-") and s["width"] == 5
    )
    assert chosen == best["gpus"]
    dash_duo.wait_for_element("#place-table table", timeout=TIMEOUT)
    screenshot(dash_duo, images, "placement.png")
    no_console_errors(dash_duo)


def test_prometheus_down_is_explained(dash_duo: Any) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    start(dash_duo, AppSettings(closed, closed, None, timeout=2, refresh="off"), "/")
    dash_duo.wait_for_contains_text(
        "#cluster-message", "Prometheus is unreachable", timeout=TIMEOUT
    )
    dash_duo.wait_for_contains_text("#prom-status", "unreachable", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#cluster-util", "unreachable", timeout=TIMEOUT)
    no_console_errors(dash_duo)


#: the demo scenario's network fabric, which its simulator reports the multi-node jobs on
DEMO_FABRIC = Path(__file__).resolve().parents[2] / "sim" / "scenarios" / "fabrics" / "demo.yaml"


def test_fabric_page_shows_the_demos_spread_job(dash_duo: Any, stack: Stack, images: Path) -> None:
    settings = replace(settings_for(stack), fabric=read_fabric_file(str(DEMO_FABRIC)))
    start(dash_duo, settings, "/fabric")
    # the simulator's multi-node job runs on two leaves where one would hold it
    dash_duo.wait_for_contains_text("#fabric-jobs", "llm-pretrain", timeout=TIMEOUT)
    assert "no fabric node reports GPU series" not in dash_duo.find_element("#fabric-page").text
    assert "1\nspread beyond need" in dash_duo.find_element("#fabric-summary").text
    dash_duo.find_element("#fabric-jobs a[href*='llm-pretrain']").click()
    dash_duo.wait_for_contains_text(
        "#fabric-job-detail", "its traffic crosses up to: spine", timeout=TIMEOUT
    )
    dash_duo.wait_for_contains_text(
        "#fabric-job-detail", "leaf domains 2 (needs 1)", timeout=TIMEOUT
    )
    wait_until(
        lambda: (
            "selected job's path"
            in dash_duo.driver.execute_script(
                "const gd = document.querySelector('#fabric-tree .js-plotly-plot');"
                "return gd && gd.data ? gd.data.map(t => t.name) : [];"
            )
        ),
        "the selected job's path drawn",
    )
    dash_duo.driver.execute_script("document.querySelector('#fabric-tree').scrollIntoView()")
    screenshot(dash_duo, images, "fabric.png")
    no_console_errors(dash_duo)
