"""The fabric page in a real headless Chromium: the app started with Slurm's documented
``topology.conf`` example, Prometheus answered by a fake PromQL API on loopback (the answers
of ``test_fabric_page``): the tree, blocks and jobs draw without console errors, a job chosen
from the table shows its path, and choosing a switch drills down to it. The page on the
simulator's demo fabric, with its screenshot, is in ``test_browser``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.dash.conftest import FakeApi
from tests.dash.test_browser import TIMEOUT, no_console_errors, start, wait_until
from tests.dash.test_fabric_page import FIXTURES, prometheus
from toposcope.dashboards.app.server import AppSettings
from toposcope.fabric.slurmconf import read_topology_conf

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:HTTPResponse.getheader:DeprecationWarning"),
]


def drawn(dash_duo: Any) -> tuple[str, list[str]]:
    """The title and trace names of the fabric figure drawn now (empty before it is)."""
    found: tuple[str, list[str]] = dash_duo.driver.execute_script(
        "const gd = document.querySelector('#fabric-tree .js-plotly-plot');"
        "if (!gd || !gd.data || !gd.layout || !gd.layout.title) return ['', []];"
        "return [gd.layout.title.text, gd.data.map(t => t.name)];"
    )
    return found[0], found[1]


def trace_names(dash_duo: Any) -> list[str]:
    """The names of the traces drawn in the fabric figure."""
    return drawn(dash_duo)[1]


def test_fabric_page_draws_jobs_and_the_chosen_path(dash_duo: Any) -> None:
    fabric = read_topology_conf(str(FIXTURES / "slurm-tree.conf"))
    with FakeApi(prometheus) as api:
        settings = AppSettings(api.url, "http://127.0.0.1:9", refresh="off", fabric=fabric)
        start(dash_duo, settings, "/fabric")
        dash_duo.wait_for_contains_text("#fabric-summary", "multi-node jobs", timeout=TIMEOUT)
        dash_duo.wait_for_contains_text("#fabric-jobs", "slurm-job-42", timeout=TIMEOUT)
        wait_until(
            lambda: drawn(dash_duo)[0].startswith("Fabric: the whole"),
            "the overview drawn",
        )
        assert "selected job's path" not in trace_names(dash_duo)
        assert {"slurm-job-42", "slurm-job-7", "nodes", "switches"} <= set(trace_names(dash_duo))
        # choose the spread job from the table: its path is drawn and described
        dash_duo.find_element("#fabric-jobs a[href*='slurm-job-42']").click()
        dash_duo.wait_for_contains_text(
            "#fabric-job-detail", "its traffic crosses up to: spine", timeout=TIMEOUT
        )
        wait_until(
            lambda: "selected job's path" in trace_names(dash_duo), "the selected job's path"
        )
        assert "slurm-job-42" in dash_duo.find_element("#fabric-job").text
        # drill down to the spine: the job stays selected
        dash_duo.select_dcc_dropdown("#fabric-switch", value="s3 (spine)")
        wait_until(
            lambda: drawn(dash_duo)[0].startswith("Fabric: below s3"),
            "the drill-down drawn",
        )
        assert "selected job's path" in trace_names(dash_duo)
        no_console_errors(dash_duo)
