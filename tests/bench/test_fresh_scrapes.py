"""The closed loop runs a round only on fresh scrapes: a real Prometheus scrapes one loopback
page; while the page answers, a round starts at once; once it stops answering (its series
marked stale), the round waits its deadline and says on stderr that it runs on stale targets.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest
from loop_scraping import await_fresh_scrapes, every_target_up, scrape_interval_s, scraped_targets

from tests.advisor.fakes import FakeServer
from tests.procs import require_binary
from toposcope.devtools.procs import Prometheus
from toposcope.waiting import wait_until

pytestmark = pytest.mark.integration


def test_a_round_waits_for_fresh_scrapes_and_says_when_it_runs_on_stale_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ExitStack() as page:  # closed in the middle: the page stops answering
        fake = page.enter_context(FakeServer(lambda _: (200, b"toposcope_test_gauge 1\n")).run())
        target = fake.url.removeprefix("http://").rstrip("/")
        configs = [{"job_name": "toposcope-sim", "static_configs": [{"targets": [target]}]}]
        server = Prometheus(tmp_path, configs, binary=require_binary("prometheus"))
        expected = scraped_targets(1, None, None)
        assert expected == 1 and scraped_targets(3, "a", None) == 4
        with server.run():
            wait_until(lambda: every_target_up(server.url, expected), 60, what="first scrape")
            await_fresh_scrapes(server.url, expected, deadline_s=30)
            assert "stale" not in capsys.readouterr().err
            page.close()
            wait_until(lambda: not every_target_up(server.url, expected), 60, what="failed scrape")
            await_fresh_scrapes(server.url, expected, deadline_s=1)
    err = capsys.readouterr().err
    assert "a round runs on stale targets" in err and "fresh scrapes" in err


def test_many_simulated_nodes_are_scraped_less_often() -> None:
    assert [scrape_interval_s(n) for n in (1, 16, 17, 40)] == [1, 1, 2, 3]
