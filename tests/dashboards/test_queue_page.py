"""The Dash app's batch queue page on hand-made Prometheus answers (a PromQL API on loopback).

Partition ``gpu``: 4 free GPUs (all fragmented), 12 allocated, 1 job on topology and 1 held;
partition ``cpu``: no GPUs, 3 jobs on priority. Accounts ``teama`` (12 GPUs held, fair share
12) and ``teamb`` (none held, share 2, asking for 3, waiting 30 minutes).
"""

from __future__ import annotations

from typing import Any

from tests.dash.conftest import FakeApi, vector
from tests.procs import free_port
from toposcope.dashboards.app import queue_page, shell
from toposcope.dashboards.app.promclient import PromClient

GPU = {"partition": "gpu"}
CPU = {"partition": "cpu"}
ANSWERS: dict[str, dict[str, Any]] = {
    queue_page.GPUS: vector(
        ({**GPU, "state": "free"}, 4),
        ({**GPU, "state": "allocated"}, 12),
        ({**GPU, "state": "unavailable"}, 0),
        ({**CPU, "state": "free"}, 0),
    ),
    queue_page.FRAGMENTED: vector((GPU, 4), (CPU, 0)),
    queue_page.PENDING: vector(
        ({**GPU, "reason": "topology"}, 1),
        ({**GPU, "reason": "held"}, 1),
        ({**CPU, "reason": "priority"}, 3),
    ),
    queue_page.OLDEST: vector((GPU, 1800), (CPU, 600)),
    queue_page.ACCOUNT_QUERIES["GPUs held"]: vector(
        ({**GPU, "account": "teama"}, 12), ({**GPU, "account": "teamb"}, 0)
    ),
    queue_page.ACCOUNT_QUERIES["fair share"]: vector(
        ({**GPU, "account": "teama"}, 12), ({**GPU, "account": "teamb"}, 2)
    ),
    queue_page.ACCOUNT_QUERIES["GPUs asked for"]: vector(
        ({**GPU, "account": "teama"}, 0), ({**GPU, "account": "teamb"}, 3)
    ),
    queue_page.ACCOUNT_QUERIES["oldest wait (s)"]: vector(({**GPU, "account": "teamb"}, 1800)),
}


def prometheus(method: str, path: str, params: dict[str, str]) -> tuple[int, Any]:
    """The answers above; any other query answers an empty vector."""
    return 200, ANSWERS.get(params.get("query", ""), vector())


def test_queue_page_shows_partitions_accounts_and_topology_waits() -> None:
    with FakeApi(prometheus) as api:
        data = queue_page.load_queue(PromClient(api.url))
        message, summary, figure, partitions, accounts = queue_page.render_queue(data)
    rows = data.partitions.set_index("partition")
    assert rows.loc["gpu", "free"] == 4 and rows.loc["gpu", "fragmented"] == 4
    assert rows.loc["gpu", "pending"] == 2 and rows.loc["gpu", "on topology"] == 1
    assert rows.loc["cpu", "pending"] == 3 and rows.loc["cpu", "oldest wait (s)"] == 600
    cards = [str(card.children[0].children) for card in summary]
    assert cards == ["5", "1", "4", "4", "2"]
    assert "1 job(s) wait on topology" in str(message)
    assert {bar.name for bar in figure.data} == {"topology", "held", "priority"}
    team_b = data.accounts.set_index("account").loc["teamb"]
    assert (team_b["GPUs held"], team_b["fair share"], team_b["GPUs asked for"]) == (0, 2, 3)
    text = str(accounts)
    assert "teamb" in text and "30 min" in text and "2.0" in text
    assert "gpu" in str(partitions)


def test_queue_page_without_queue_series_says_what_to_scrape() -> None:
    with FakeApi(lambda m, p, params: (200, vector())) as api:
        message, summary, _, _, _ = queue_page.queue_view(PromClient(api.url))
    assert "toposcope slurm exporter" in str(message) and summary == []


def test_queue_page_with_prometheus_down_shows_the_error() -> None:
    message, summary, _, partitions, _ = queue_page.queue_view(
        PromClient(f"http://127.0.0.1:{free_port()}", timeout=2)
    )
    assert "error" in str(message) and summary == [] and str(partitions) == str(message)


def test_queue_page_is_in_the_navigation_with_its_components() -> None:
    assert (queue_page.QUEUE, "Queue") in shell.NAV
    skeleton = str(queue_page.queue_page())
    for component in ("queue-summary", "queue-pending", "queue-partitions", "queue-accounts"):
        assert component in skeleton
